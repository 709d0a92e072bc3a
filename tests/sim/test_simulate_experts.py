"""The mesh simulator with expert parallelism: the all-to-alls' bytes are the formula the engine
is checked against, DualPipe-V's overlapped pairs hide one micro-batch's all-to-all under the
other's compute (and 1F1B, which pairs nothing, pays every one), and calibration on a run takes
the all-to-alls out of the compute it reads. No processes: plans and simulated traces only."""

import pytest

from minipipe.engine.config import RunConfig, prepare
from minipipe.models import task_of
from minipipe.parallel.accounting import activation_bytes, expected_bytes, step_traffic
from minipipe.sim.costs import Costs
from minipipe.sim.measured_costs import calibrate_mesh, predicted_vs_measured
from minipipe.sim.mesh_step import simulate_mesh, step_time
from minipipe.sim.network import Link, Network
from minipipe.traffic import Traffic, TrafficKind, moe_exchanges

EP = TrafficKind.EP_ALL_TO_ALL
# 8 layers, every block a mixture of experts: each of DualPipe-V's 4 stages holds at least one
MOE = {
    "width": 16,
    "heads": 2,
    "depth": 6,
    "block": 8,
    "vocab": 16,
    "experts": 4,
    "top_k": 2,
    "capacity_factor": 1.0,
    "moe_every": 1,
}


def plan_of(**kw):
    base = dict(model="moe", model_args=MOE, batch_size=32, m=8, steps=1, dp=2, ep=2, p=2)
    return prepare(RunConfig(**{**base, **kw}))


def traffic_of(plan) -> Traffic:
    return step_traffic(plan, task_of(plan.config).layers())


def simulated(plan, overlap=0.0, link=Link(bandwidth=1000.0, latency=0.05), traffic=None):
    costs = Costs(forward=2.0, backward=4.0, overlap=overlap, activation_bytes=activation_bytes(plan))
    traffic = traffic_of(plan) if traffic is None else traffic
    return simulate_mesh(plan.schedule, costs, plan.mesh, Network.uniform(link), traffic)


@pytest.mark.parametrize(
    "kw",
    [
        dict(schedule="1f1b"),
        dict(schedule="dualpipe-v"),
        dict(schedule="zb-h1"),
        dict(schedule="1f1b", p=1, dp=4, ep=4),
        dict(schedule="1f1b", tp=2),
        dict(schedule="1f1b", p=1, dp=4, ep=2),
    ],
)  # edp = 2: the experts all-reduced too
def test_simulated_all_to_all_bytes_are_the_formula_the_engine_is_checked_against(kw):
    plan = plan_of(**kw)
    layers = task_of(plan.config).layers()
    trace = simulated(plan)
    for q in range(plan.mesh.pp):
        want = expected_bytes(plan, plan.mesh.pipeline_ranks(0)[q], layers)
        assert trace.traffic[q] == pytest.approx(want, rel=1e-12)
        assert want[EP] > 0
    swaps = [c for c in trace.collectives if c.kind is EP]
    assert swaps and all(
        any(
            e.rank == c.rank and e.start <= c.start and c.end <= e.end + 1e-9
            for e in trace.events
            if e.action.op in ("F", "B", "I")
        )
        for c in swaps
    )


def pair_spans(trace, schedule) -> list[float]:
    """Each overlapped pair's time: its forward's start to its backward's end."""
    at = {(e.rank, i): e for r in range(trace.p) for i, e in enumerate(trace.rank_events(r)) if e.rank == r}
    return [at[(r, i + 1)].end - at[(r, i)].start for r, i in schedule.paired]


def talk_of(plan, link) -> dict:
    """The all-to-all time one MoE layer's forward (or backward) costs a micro-batch, by hand:
    two buffers (moe_exchanges), each ep − 1 steps of latency + (buffer/ep)/bandwidth."""
    ep, n = plan.mesh.ep, plan.config.batch_size // (plan.config.dp * plan.schedule.m) * MOE["block"]
    buffers = moe_exchanges("forward", n, MOE["experts"], MOE["top_k"], MOE["capacity_factor"], MOE["width"], 4)
    return sum((ep - 1) * (link.latency + b / ep / link.bandwidth) for b in buffers)


def test_dualpipe_v_pairs_hide_the_all_to_alls_that_1f1b_pays():
    plan, fast, slow = plan_of(schedule="dualpipe-v"), Link(1e5, 0.01), Link(20.0, 0.05)
    layer_talk = talk_of(plan, fast)
    per_stage = [sum(1 for i in plan.partition.layers_of(s) if 1 <= i <= MOE["depth"]) for s in range(4)]
    dense = Traffic(grads=traffic_of(plan).grads, expert_grads=traffic_of(plan).expert_grads)  # no all-to-alls
    s = plan.schedule
    # one stream (overlap 0, a CPU): each pair pays both micro-batches' all-to-alls in full
    paid = [
        a - b
        for a, b in zip(
            pair_spans(simulated(plan, 0.0, fast), s), pair_spans(simulated(plan, 0.0, fast, traffic=dense), s)
        )
    ]
    want = [layer_talk * (per_stage[s.actions[r][i].stage] + per_stage[s.actions[r][i + 1].stage]) for r, i in s.paired]
    assert paid == pytest.approx(want, rel=1e-9)
    # overlapped, the all-to-alls (shorter than the pair's compute here) hide entirely under it
    assert max(want) < 2.0
    assert pair_spans(simulated(plan, 1.0, fast), s) == pytest.approx(
        pair_spans(simulated(plan, 1.0, fast, traffic=dense), s)
    )
    assert step_time(simulated(plan, 1.0, fast)) < step_time(simulated(plan, 0.0, fast))
    # on a slow link the talk outlasts the compute: the pair takes the talk's time, no less
    spans = pair_spans(simulated(plan, 1.0, slow), s)
    slow_talk = [
        talk_of(plan, slow) * (per_stage[s.actions[r][i].stage] + per_stage[s.actions[r][i + 1].stage])
        for r, i in s.paired
    ]
    assert spans == pytest.approx([max(t, 4.0 / 2) for t in slow_talk], rel=1e-9)  # compute: max(F, B) per chunk
    # 1F1B with the same experts pairs nothing: every all-to-all is paid, whatever the overlap
    one_f_one_b = plan_of(schedule="1f1b")
    assert step_time(simulated(one_f_one_b, 1.0, fast)) == step_time(simulated(one_f_one_b, 0.0, fast))


def test_calibration_takes_the_all_to_alls_out_of_the_compute_it_reads():
    """A 'measured' run made by the simulator itself: calibrating on it must give back its compute
    per op (the all-to-alls inside each F and B timed apart) and predict its step exactly."""
    for schedule in ("1f1b", "dualpipe-v"):
        plan = plan_of(schedule=schedule)
        n = plan.schedule.n_stages
        truth = Costs(
            forward=[1.0 + 0.25 * s for s in range(n)],
            backward=[2.0 + 0.5 * s for s in range(n)],
            activation_bytes=activation_bytes(plan),
        )
        traffic, link = traffic_of(plan), Link(bandwidth=2000.0)
        measured = simulate_mesh(plan.schedule, truth, plan.mesh, Network.uniform(link), traffic)
        cal = calibrate_mesh([measured, measured], plan.mesh, traffic, activation_bytes(plan))
        assert cal.observations["ep"] > 0
        assert cal.costs.forward == pytest.approx(truth.forward) and cal.costs.backward == pytest.approx(truth.backward)
        out = predicted_vs_measured([measured, measured], plan.mesh, traffic, activation_bytes(plan))
        assert out["error"] == pytest.approx(0.0, abs=1e-9)
