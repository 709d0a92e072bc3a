"""Exercise 15 (sharded data parallelism): typical wrong answers are refused with the message that
names the mistake, and the engine's own answer, in several disguises, with the message that names
the engine (in a watched sandbox, as when graded). Each is refused before the checker's real FSDP
run starts; the reference answers pass it (a 2-process run)."""

import importlib
import math

import pytest

from minipipe.course.exercises import WrongAnswer, check_sharded
from tests.support.answers import fsdp_bytes, ring, zero_memory
from tests.support.judged import direct, sandboxed


def wrong(*answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check_sharded, *answer)
    return " ".join(str(info.value).split())


def refused(*answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check_sharded, *answer)
    return " ".join(str(info.value).split())


@pytest.mark.distributed  # the checker's last check is a real FSDP run
@pytest.mark.timeout(180)
def test_the_reference_answers_pass(capsys):
    check_sharded(fsdp_bytes, zero_memory)
    out = capsys.readouterr().out
    assert "✓ 3/3 checks passed" in out and "torch's fully_shard on 2 processes sent" in out


@pytest.mark.parametrize("failure", ["WorkerError", "ValueError"])
def test_a_real_fsdp_run_that_fails_is_named_with_its_error(failure, monkeypatch):
    """Right answers, and the machine's run fails (a worker died, a config this torch refuses): the verdict
    says the real run failed, and why, not that the learner's bytes are wrong."""
    from minipipe.engine.diagnosis import WorkerError
    from minipipe.frameworks import fsdp

    def failing(config):
        raise (WorkerError if failure == "WorkerError" else ValueError)("rank 1 lost its connection")

    monkeypatch.setattr(fsdp, "fsdp_run", failing)
    text = wrong(fsdp_bytes, zero_memory)
    assert "✗ 2/3 checks passed" in text and "the real FSDP run failed: rank 1 lost its connection" in text


# -- FSDP's bytes per step ---------------------------------------------------------------------------
BYTES_MISTAKES = {
    "no padding": (lambda units, n: ring(units, n, pad=False), " That leaves out FSDP's padding"),
    "gathered once": (lambda units, n: ring(units, n, gathers=1), "two all-gathers a unit"),
    "an all-reduce's share": (
        lambda units, n: ring(units, n, share=lambda b, n: 2 * (n - 1) / n * b),
        " That is a ring all-reduce's share",
    ),
    "the whole buffer": (lambda units, n: ring(units, n, share=lambda b, n: b), " That is the whole buffer"),
    "one shard": (lambda units, n: ring(units, n, share=lambda b, n: b / n), " That is one shard"),
    "values, not bytes": (lambda units, n: {k: v / 4 for k, v in ring(units, n).items()}, "each is 4 bytes"),
    "a list, not a dict": (
        lambda units, n: list(ring(units, n).values()),
        "return a dict with the keys 'all-gather', 'reduce-scatter'",
    ),
}


@pytest.mark.parametrize("mistake", BYTES_MISTAKES)
def test_fsdp_bytes_mistakes_are_named(mistake):
    fn, message = BYTES_MISTAKES[mistake]
    text = wrong(fn, zero_memory)
    assert "0/3 checks passed" in text and message in text, text


def _through_the_formula(units, n):
    fsdp = importlib.import_module("minipipe.frameworks.fsdp")
    import torch

    layers = [torch.nn.ParameterList([torch.nn.Parameter(torch.empty(s)) for s in unit]) for unit in units]
    return fsdp.formula_bytes(layers, n)


def _own_padding_their_ring(units, n):
    from minipipe.traffic import ring_bytes

    gathered = sum(-(-s[0] // n) * n * math.prod(s[1:]) * 4 for unit in units for s in unit)
    return {
        "all-gather": 2 * ring_bytes("all-gather", gathered, n),
        "reduce-scatter": ring_bytes("reduce-scatter", gathered, n),
    }


def _accounting(units, n):
    accounting = importlib.import_module("minipipe.parallel.accounting")
    return {"all-gather": accounting.tensor_bytes((1,), None), "reduce-scatter": 0}


BYTES_DISGUISES = {
    "FSDP's formula, by another path": (_through_the_formula, "FSDP's own byte formula"),
    "the engine's ring formula": (_own_padding_their_ring, "the engine's ring formula"),
    "the byte accounting": (_accounting, "the engine's byte and memory accounting"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", BYTES_DISGUISES)
def test_the_engines_bytes_are_refused(disguise):
    fn, message = BYTES_DISGUISES[disguise]
    text = refused(fn, zero_memory)
    assert "0/3 checks passed" in text and message in text and "work the bytes out from the shapes" in text, text


# -- memory under ZeRO 0-3 -------------------------------------------------------------------------
def _one_stage_off(parameters, tensors, block, n, zero):
    return zero_memory(parameters, tensors, block, n, min(zero + 1, 3) if zero == 1 else zero)


MEMORY_MISTAKES = {
    "ZeRO-1 sharding the gradients": (_one_stage_off, "That is ZeRO-2's gradients"),
    "no step counts": (lambda *a: zero_memory(*a, steps=False), "Adam's step counts are missing"),
    "no master copy": (lambda *a: zero_memory(*a, master=False), "an fp32 master copy of the weights"),
    "no block's gradients": (lambda *a: zero_memory(*a, block_grads=False), "one block's whole gradients"),
    "nothing gathered": (lambda *a: zero_memory(*a, gathered=False), "two blocks' worth on top of the shard"),
    "fp32 everywhere": (
        lambda p, t, b, n, z: {k: 2 * v if k != "optimizer" else v for k, v in zero_memory(p, t, b, n, z).items()},
        "bf16's 2 bytes",
    ),
}


@pytest.mark.parametrize("mistake", MEMORY_MISTAKES)
def test_zero_memory_mistakes_are_named(mistake):
    fn, message = MEMORY_MISTAKES[mistake]
    text = wrong(fsdp_bytes, fn)
    assert "1/3 checks passed" in text and message in text, text


def test_an_optimizer_off_by_one_byte_gets_no_hint_of_a_cause_it_does_not_have():
    def off_by_one(p, t, b, n, z):
        return {k: v + (k == "optimizer") for k, v in zero_memory(p, t, b, n, z).items()}

    text = wrong(fsdp_bytes, off_by_one)
    assert text.endswith("bytes of optimizer, the planner 80,860,988,172. · a real FSDP run on 2 processes (not run)")


def _footprint(parameters, tensors, block, n, zero):
    from minipipe.planner import presets
    from minipipe.planner.footprint import memory_per_rank
    from minipipe.planner.setup_and_layout import Layout

    return memory_per_rank(presets.model("llama2-7b"), Layout(1, 1, n, 1, 1, zero=zero))[0]


def _their_bytes_per_parameter(parameters, tensors, block, n, zero):
    per = importlib.import_module("minipipe.planner.shapes").bytes_per_parameter("bf16-mixed")
    return zero_memory(parameters, tensors, block, n, zero) if per else {}


def _evaluated(parameters, tensors, block, n, zero):
    from minipipe.planner import Layout, evaluate, make_setup

    row = evaluate(make_setup("llama2-7b", n, "a100-80gb"), Layout(1, 1, n, 1, 1, zero=zero))
    return {k: row.memory[k] for k in ("parameters", "gradients", "optimizer")}


MEMORY_DISGUISES = {
    "the planner's memory model": (_footprint, "the planner's catalogue of models"),  # asked first
    "its bytes per parameter, by another path": (_their_bytes_per_parameter, "the planner's bytes per parameter"),
    "the planner's cost model": (_evaluated, "the planner's set-up"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", MEMORY_DISGUISES)
def test_the_planners_memory_is_refused(disguise):
    fn, message = MEMORY_DISGUISES[disguise]
    text = refused(fsdp_bytes, fn)
    assert "1/3 checks passed" in text and message in text and "work the bytes out from the counts" in text, text


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda units, n: list(ring(units, n).values()), r"<lambda>\(units, \d+\) returned list; return a dict"),
        (lambda units, n: {**ring(units, n), "max": 1}, r"returned \['all-gather', 'max', 'reduce-scatter'\]; return"),
        (
            lambda units, n: {k: str(v) for k, v in ring(units, n).items()},
            r"<lambda>\(units, \d+\)\['all-gather'\] is str '\d+\.0'; each kind is a number of bytes",
        ),
        (lambda units, n: dict.fromkeys(ring(units, n), True), r"\['all-gather'\] is bool True; each kind is a number"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_named_with_the_call_that_returned_it(answer, said):
    import re

    text = wrong(answer, zero_memory)
    assert re.search(said, text), text
