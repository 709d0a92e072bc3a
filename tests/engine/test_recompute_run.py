"""Activation recomputation on real processes: the same losses, gradients and weights as the unsplit
model, with every kind of schedule; the peak bytes each rank measured are what the memory model
predicts from the stages' sizes, and less than without recomputation."""

import pytest

from minipipe.course.recompute_measured import stage_bytes
from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.sim.pipeline import simulate
from minipipe.sim.recompute_costs import activation_peak
from tests.support.reference import assert_same_math

pytestmark = pytest.mark.distributed

MODELS = {
    "mlp": {"width": 16, "depth": 8},
    "gpt": {"width": 16, "heads": 2, "depth": 6, "block": 8, "vocab": 16},
}
KINDS = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe-v", "bfs")
STEPS = 2


def config(kind, model, recompute, p=2, m=4, **extra):
    return RunConfig(
        schedule=kind,
        p=p,
        m=m,
        model=model,
        model_args=MODELS[model],
        batch_size=16,
        steps=STEPS,
        optimizer="sgd",
        lr=0.05,
        return_grads=True,
        timeout=60,
        recompute=recompute,
        **extra,
    )


def predicted_peaks(result):
    sizes = stage_bytes(result.config)
    return activation_peak(simulate(result.plan.schedule), sizes["kept"], sizes["B"], sizes["I"])


@pytest.mark.timeout(600)
def test_every_kind_recomputes_with_the_same_math_and_the_predicted_memory():
    configs = [
        config(kind, model, option) for kind in KINDS for model in MODELS for option in ("none", "stage", [1, 3, 4])
    ]
    results = run_many(configs)
    by = {(r.config.schedule, r.config.model, str(r.config.recompute)): r for r in results}
    for result in results:
        assert_same_math(result, STEPS)
        assert result.peak_bytes == predicted_peaks(result), (result.config.schedule, str(result.config.recompute))
    for kind in KINDS:
        for model in MODELS:
            none, stage = by[kind, model, "none"].peak_bytes, by[kind, model, "stage"].peak_bytes
            # rank 0 holds the most micro-batches and saves; a rank that holds one at a time (1F1B's
            # last) must rebuild it whole, and holds as much as before
            assert stage[0] < none[0] and all(s <= n for s, n in zip(stage, none)), (kind, model, stage, none)


@pytest.mark.timeout(600)
def test_recompute_on_four_ranks_and_on_the_mesh():
    configs = [config(kind, "mlp", "stage", p=4, m=8) for kind in ("1f1b", "zb-v", "dualpipe-v")]
    configs += [config("1f1b", "gpt", "stage", dp=2), config("zb-h1", "gpt", [2, 3], tp=2)]
    for result in run_many(configs):
        assert_same_math(result, STEPS)
