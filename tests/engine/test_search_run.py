"""Searched schedules are ordinary schedules: on real processes (gloo) they give the unsplit model's
losses, gradients and weights, hold what the simulator says they hold, and torch's own pipelining
runtime runs their CSV with the executor's losses, bit for bit."""

import pytest

from minipipe import Costs
from minipipe.course.recompute_measured import stage_bytes
from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.schedule.search import heuristic, search
from minipipe.sim.pipeline import simulate
from minipipe.sim.recompute_costs import activation_peak
from tests.support.reference import assert_same_math

pytestmark = pytest.mark.distributed

COSTS = Costs(forward=1.0, backward=2.0, weight=1.0)
MLP = {"width": 16, "depth": 8}
STEPS = 2


def found(m, cap, placement):
    """The heuristic's schedule on one placement (the search's candidate, whether or not it wins)."""
    return heuristic(2, m, COSTS, (cap, cap), placements=(placement,))[0].schedule


def searched():
    """One of each: the optimum under the least cap, the greedy on each placement under a cap
    between, and one with no cap at all."""
    optimum = search(2, 3, COSTS, 1, exact=True)
    assert optimum.how.startswith("optimum")
    return [
        optimum.schedule,
        found(4, 1.5, "line"),
        found(4, 1.5, "v"),
        found(4, 1.5, "interleaved"),
        found(6, float("inf"), "v"),
    ]


@pytest.mark.timeout(300)
def test_searched_schedules_give_the_unsplit_models_math_and_hold_what_was_simulated():
    schedules = searched()
    assert {s.kind for s in schedules} == {"searched"}
    assert {s.v for s in schedules} == {1, 2}
    configs = [
        RunConfig(
            schedule=s,
            model="mlp",
            model_args=MLP,
            batch_size=24,
            steps=STEPS,
            optimizer="sgd",
            lr=0.05,
            return_grads=True,
            timeout=60,
        )
        for s in schedules
    ]
    for result in run_many(configs):
        assert_same_math(result, STEPS)
        sizes = stage_bytes(result.config)
        assert result.peak_bytes == activation_peak(
            simulate(result.plan.schedule), sizes["kept"], sizes["B"], sizes["I"]
        )


@pytest.mark.timeout(300)
def test_torchs_runtime_runs_a_searched_schedules_csv_with_the_executors_losses():
    from tests.support.frameworks import need

    need("torch")
    from minipipe.frameworks.timeline import order_of, planned
    from minipipe.frameworks.torch_runtime import runtime_runs, to_csv

    schedules = [found(4, 1.5, "line"), found(4, 1.5, "v")]
    configs = [RunConfig(schedule=s, model="mlp", model_args=MLP, batch_size=16, steps=STEPS) for s in schedules]
    mine = run_many(configs)
    for config, run, ours in zip(configs, runtime_runs(configs), mine):
        assert run.csv == to_csv(config.schedule)
        assert run.losses == ours.losses  # bit for bit
        for trace in run.traces:
            assert order_of(trace) == planned(run.plan.schedule)
