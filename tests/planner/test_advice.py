"""What the planner says when nothing fits (minipipe.planner.advice): whether any layout fits at all, and
the GPU counts and batches it looks through for one that would, held at their edges."""

from dataclasses import replace

import pytest

from minipipe.planner import advice
from minipipe.planner.setup_and_layout import make_setup
from minipipe.planner.space import Space


def test_a_model_that_fits_on_one_gpu_fits_somehow():
    """One GPU is one cut (tp = pp = dp = 1): only the kinds without virtual stages can run it."""
    one = make_setup("gpt3-2.7b", 1, "h100-sxm", batch=8)
    assert advice.fits_somehow(one, Space())
    assert not advice.fits_somehow(make_setup("gpt3-6.7b", 1, "h100-sxm", batch=8), Space())


def test_whether_anything_fits_reads_the_setups_sequence_parallelism():
    """Two blocks of 768k tokens on 8 H100s, context parallelism held at 1: with sequence parallelism a
    tensor-parallel cut of 8 holds the activations (27 GiB), without it no cut does (69 GiB on tp 8)."""
    from minipipe.planner.shapes import ModelShape

    long = ModelShape("long", 2, 4096, 32, 32000, 786432, attention="fused", positions="rotary")
    on, off = (make_setup(long, 8, "h100-sxm", batch=1, sequence_parallel=sp) for sp in (True, False))
    assert advice.fits_somehow(on, Space(cp=(1,))) and not advice.fits_somehow(off, Space(cp=(1,)))


@pytest.mark.parametrize(
    ("first_fit", "suggested"),
    # 8 GPUs on 8-GPU nodes: every count up to twice the GPUs (9..16), then whole nodes (24, 32, ... 512)
    [(9, 9), (16, 16), (17, 24), (21, 24), (24, 24), (505, 512), (512, 512), (513, None)],
)
def test_more_gpus_are_every_count_to_twice_then_whole_nodes(monkeypatch, first_fit, suggested):
    setup = make_setup("llama2-70b", 8, "h100-sxm", batch=64)
    assert setup.node == 8
    monkeypatch.setattr(advice, "fits_somehow", lambda s, space: s.gpus >= first_fit and s.batch == setup.batch)
    said = advice.suggest(setup, Space())
    if suggested is None:
        assert said == [
            "no GPU count up to 512 (as far as 2 s of looking reached) and no batch within 256 of 64 fits: "
            "a GPU with more memory, a smaller memory reserve, or a smaller model"
        ]
    else:
        assert said == [f"{suggested} GPUs (--gpus {suggested}) would fit a layout with the batch of 64 sequences"]


@pytest.mark.parametrize(("fits_from", "suggested"), [(65, 65), (64 + 256, 320), (64 + 257, None), (63, 63)])
def test_the_nearest_batch_is_looked_for_within_256_sequences(monkeypatch, fits_from, suggested):
    setup = make_setup("llama2-70b", 8, "h100-sxm", batch=64)

    def fits(s, space):  # the same GPUs only; from fits_from up (or, below the batch, down to it)
        if s.gpus != setup.gpus:
            return False
        return s.batch >= fits_from if fits_from > setup.batch else s.batch <= fits_from

    monkeypatch.setattr(advice, "fits_somehow", fits)
    said = advice.suggest(setup, Space())
    batch = [line for line in said if "global batch" in line]
    want = f"a global batch of {suggested} sequences (--batch {suggested}) would fit a layout on these 8 GPUs"
    assert batch == ([want] if suggested else [])


def test_the_batch_nearest_below_wins_a_tie(monkeypatch):
    setup = make_setup("llama2-70b", 8, "h100-sxm", batch=64)
    monkeypatch.setattr(advice, "fits_somehow", lambda s, space: s.gpus == 8 and s.batch in (60, 68))
    assert advice.suggest(setup, Space())[-1].startswith("a global batch of 60 sequences")


def test_looking_stops_after_its_seconds(monkeypatch):
    setup = make_setup("llama2-70b", 8, "h100-sxm", batch=64)
    looked = []
    clock = iter(range(10**6))
    monkeypatch.setattr(advice.time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(advice, "fits_somehow", lambda s, space: looked.append(s) or False)
    advice.suggest(replace(setup), Space(), seconds=3.0)
    # each search reads the clock once to start and once per candidate: 3 s is 4 candidates
    assert len(looked) == 8


@pytest.mark.parametrize(("fits_upto", "suggested"), [(511, 511), (256, 256), (255, None)])
def test_a_smaller_batch_is_looked_for_down_to_256_fewer(monkeypatch, fits_upto, suggested):
    setup = make_setup("llama2-70b", 8, "h100-sxm", batch=512)
    monkeypatch.setattr(advice, "fits_somehow", lambda s, space: s.gpus == 8 and s.batch <= fits_upto)
    batch = [line for line in advice.suggest(setup, Space()) if "global batch" in line]
    assert batch == (
        [f"a global batch of {suggested} sequences (--batch {suggested}) would fit a layout on these 8 GPUs"]
        if suggested
        else []
    )
