"""ZB-V, DualPipe-V and breadth-first on real processes (gloo): the same losses, gradients and weights
as the unsplit model on one process, on p = 2 and p = 4, and inside a mesh with data parallelism.

One group of processes per world size runs every configuration (run_many): starting one costs seconds.
"""
import pytest

from minipipe.engine.launch import RunConfig, run_many
from tests.reference import assert_same_math

pytestmark = pytest.mark.distributed

MODELS = {
    "mlp": {"width": 16, "depth": 8},                                       # 9 layers: up to 8 stages
    "gpt": {"width": 16, "heads": 2, "depth": 6, "block": 8, "vocab": 16},   # 8 layers
}
STEPS = 2


def config(kind, p, m, model, v=None, **extra):
    return RunConfig(schedule=kind, p=p, m=m, v=v, model=model, model_args=MODELS[model], batch_size=48,
                     steps=STEPS, optimizer="sgd", lr=0.05, return_grads=True, timeout=60, **extra)


def configs_for(p):
    for model in MODELS:
        for m in (1, 3, 4, 6) if p == 2 else (4, 6, 8):
            yield config("zb-v", p, m, model)
            yield config("bfs", p, m, model)
        for m in (2 * p, 3 * p):
            yield config("dualpipe-v", p, m, model)
    yield config("bfs", p, 4, "mlp", v=4 if p == 2 else 1)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("p", [2, 4])
def test_new_kinds_same_loss_gradients_and_weights_as_one_process(p):
    results = run_many(list(configs_for(p)))
    for result in results:
        assert_same_math(result, STEPS)
    v_placed = [r for r in results if r.config.schedule in ("zb-v", "dualpipe-v")]
    assert all(r.plan.schedule.placement[0] == r.plan.schedule.placement[-1] == 0 for r in v_placed)
    assert any(r.plan.schedule.paired for r in v_placed)
    for r in results:      # what each rank held is what the schedule says it holds
        assert r.peak_held == [max(n for _, n in r.traces[-1].inflight_curve(q)) for q in range(p)], r.config.schedule


@pytest.mark.timeout(300)
def test_new_kinds_same_math_with_data_parallelism():
    configs = [config(kind, 2, 4, "mlp", dp=2) for kind in ("zb-v", "dualpipe-v", "bfs")]
    configs += [config("zb-v", 2, 4, "gpt", dp=2, message_order="issue")]     # NCCL's in-order matching too
    for result in run_many(configs):
        assert result.plan.mesh.dp == 2
        assert_same_math(result, STEPS)
