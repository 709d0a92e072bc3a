"""DualPipe-V against 1F1B with the same experts, measured on gloo (2 processes, ep=2): what a CPU
shows and what it cannot. One stream per rank: inside every measured F&B pair the all-to-alls run
one at a time, inside the pair's forward or its backward, never beside the other's compute. The
simulator, calibrated on each run (its all-to-alls timed apart from the compute), replays it; at
overlap 1 it hides each pair's all-to-alls under its compute — what DualPipe-V earns on a GPU —
and 1F1B, which pairs nothing, gains nothing. benchmarks/moe_overlap.py measures the same at
4 processes."""

import dataclasses

import pytest

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from minipipe.models import task_of
from minipipe.parallel.accounting import activation_bytes, step_traffic
from minipipe.sim.measured_costs import calibrate_mesh
from minipipe.sim.mesh_step import simulate_mesh, step_time
from minipipe.traffic import TrafficKind

pytestmark = pytest.mark.distributed
EP = TrafficKind.EP_ALL_TO_ALL
MOE = {
    "width": 32,
    "heads": 2,
    "depth": 2,
    "block": 8,
    "vocab": 16,
    "experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
    "moe_every": 1,
}


def configs():
    base = dict(
        model="moe", model_args=MOE, batch_size=16, m=4, p=1, dp=2, ep=2, steps=3, optimizer="sgd", lr=0.05, timeout=60
    )
    return [RunConfig(schedule=s, **base) for s in ("1f1b", "dualpipe-v")]


def pairs_of(trace, schedule):
    """Each measured pair: (rank, its forward's event, its backward's event)."""
    return [(r, trace.rank_events(r)[i], trace.rank_events(r)[i + 1]) for r, i in schedule.paired]


@pytest.mark.timeout(300)
def test_dualpipe_v_pairs_on_one_stream_and_what_the_overlap_would_hide():
    one_f_one_b, dualpipe = run_many(configs())
    assert dualpipe.losses == pytest.approx(one_f_one_b.losses, rel=1e-5)  # same experts, same math
    plan = dualpipe.plan
    assert plan.schedule.paired
    for trace in dualpipe.traces:
        for r, f, b in pairs_of(trace, plan.schedule):
            swaps = sorted(
                (
                    c
                    for c in trace.collectives
                    if c.rank == r and c.kind is EP and f.start - 1e-3 <= c.start and c.end <= b.end + 1e-3
                ),
                key=lambda c: c.start,
            )
            assert swaps  # the pair's all-to-alls are on its timeline
            for c in swaps:  # each inside its forward or its backward
                assert any(e.start - 1e-3 <= c.start and c.end <= e.end + 1e-3 for e in (f, b))
            for a, c in zip(swaps, swaps[1:]):  # one stream: one after the other
                assert a.end <= c.start + 1e-6
            assert f.end <= b.start + 1e-6  # and the two computations too
    gains = {}
    for result in (one_f_one_b, dualpipe):
        steady = result.traces[1:]
        traffic = step_traffic(result.plan, task_of(result.config).layers())
        cal = calibrate_mesh(steady, result.plan.mesh, traffic, activation_bytes(result.plan))
        assert cal.observations["ep"] > 0

        def gain(traffic):
            """The step the overlap saves: on one stream, less with the pairs overlapped."""
            serial = simulate_mesh(result.plan.schedule, cal.costs, result.plan.mesh, cal.network, traffic)
            hidden = simulate_mesh(
                result.plan.schedule,
                dataclasses.replace(cal.costs, overlap=1.0),
                result.plan.mesh,
                cal.network,
                traffic,
            )
            return step_time(serial) - step_time(hidden)

        # what the all-to-alls add to the gain: with them, less the same run's without them
        gains[result.config.schedule] = gain(traffic) - gain(dataclasses.replace(traffic, ep=()))
    assert gains["1f1b"] == 0.0 < gains["dualpipe-v"]
