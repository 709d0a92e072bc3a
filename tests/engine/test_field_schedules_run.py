"""ZB-V, DualPipe-V and breadth-first on real processes (gloo): the same losses, gradients and weights
as the unsplit model on one process, on p = 2 and p = 4, and inside a mesh with data parallelism.

One group of processes per world size runs every configuration (run_many): starting one costs seconds.
"""

import pytest

from minipipe.course.recompute_measured import stage_bytes
from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.sim.pipeline import simulate
from minipipe.sim.recompute_costs import activation_peak
from tests.support.reference import assert_same_math

pytestmark = pytest.mark.distributed

MODELS = {
    "mlp": {"width": 16, "depth": 8},  # 9 layers: up to 8 stages
    "gpt": {"width": 16, "heads": 2, "depth": 6, "block": 8, "vocab": 16},  # 8 layers
}
STEPS = 2


def config(kind, p, m, model, v=None, **extra):
    return RunConfig(
        schedule=kind,
        p=p,
        m=m,
        v=v,
        model=model,
        model_args=MODELS[model],
        batch_size=48,
        steps=STEPS,
        optimizer="sgd",
        lr=0.05,
        return_grads=True,
        timeout=60,
        **extra,
    )


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
    for r in results:  # the bytes each rank held at once are what its schedule has it hold
        sizes = stage_bytes(r.config)
        assert r.peak_bytes == activation_peak(simulate(r.plan.schedule), sizes["kept"], sizes["B"], sizes["I"]), (
            r.config.schedule,
            r.config.m,
        )


@pytest.mark.timeout(300)
def test_new_kinds_same_math_with_data_parallelism():
    configs = [config(kind, 2, 4, "mlp", dp=2) for kind in ("zb-v", "dualpipe-v", "bfs")]
    configs += [config("zb-v", 2, 4, "gpt", dp=2, message_order="issue")]  # NCCL's in-order matching too
    for result in run_many(configs):
        assert result.plan.mesh.dp == 2
        assert_same_math(result, STEPS)


@pytest.mark.timeout(300)
def test_torchs_own_zbv_dualpipev_and_looped_bfs_train_the_same_and_run_minipipes_order():
    """torch.distributed.pipelining's ScheduleZBVZeroBubble, ScheduleDualPipeV and ScheduleLoopedBFS
    on minipipe's stages (bench/torch_pp.py): the unsplit model's losses, and on every rank the
    compute actions minipipe's lists name, in their order."""
    from minipipe.bench.torch_pp import torch_runs
    from tests.support.reference import unsplit_losses

    configs = [
        RunConfig(schedule=kind, p=2, m=m, model="mlp", model_args={"width": 16, "depth": 8}, batch_size=16, steps=3)
        for kind, m in (("zb-v", 4), ("zb-v", 2), ("dualpipe-v", 4), ("bfs", 4), ("bfs", 1))
    ]
    for config, run in zip(configs, torch_runs(configs)):
        schedule = run.plan.schedule
        assert run.losses == pytest.approx(unsplit_losses(config), rel=1e-5), config.schedule
        for trace in run.traces:
            ran = [[str(e.action) for e in trace.rank_events(r)] for r in range(2)]
            assert ran == [[str(a) for a in row] for row in schedule.actions], (config.schedule, config.m)
