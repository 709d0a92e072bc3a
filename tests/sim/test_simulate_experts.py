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


# -- the all-to-all's price and the experts' gradient buckets, by hand --------------------------
@pytest.mark.parametrize("ep, each", [(2, 1 * (0.5 + 1024 / 1000)), (4, 3 * (0.5 + 512 / 1000))])
def test_an_all_to_all_costs_its_ep_minus_one_steps_of_a_share_each(ep, each):
    """DP4×EP{2,4}, one MoE layer's buffer of 2048 bytes (6 layers, 2 exchanges each per F and per
    B), a link of 1000 bytes/ms and 0.5 ms a step: ep − 1 steps of 2048/ep bytes each; an F
    lasts its 2.0 of compute and its 12 all-to-alls, a B its 4.0 and 12."""
    plan = plan_of(schedule="1f1b", p=1, dp=4, ep=ep, m=4)
    traffic = traffic_of(plan)
    assert [nb for _, nb in traffic.ep[0]["F"]] == [2048.0] * 12 and len(traffic.ep[0]["B"]) == 12
    trace = simulated(plan, link=Link(bandwidth=1000.0, latency=0.5), traffic=Traffic(ep=traffic.ep))
    talks = [c for c in trace.collectives if c.kind is EP]
    assert len(talks) == 4 * 24
    assert all(c.end - c.start == pytest.approx(each) for c in talks)
    assert all(c.nbytes == pytest.approx(2048 * (ep - 1) / ep) for c in talks)
    f, b = (next(e for e in trace.events if e.action.op == op) for op in "FB")
    assert f.duration == pytest.approx(2.0 + 12 * each) and b.duration == pytest.approx(4.0 + 12 * each)


def test_the_experts_buckets_go_out_beside_the_dense_ones():
    """DP4×EP2 (edp = 2): two dense buckets of 3000 bytes over the 4 dp ranks (2·3/4·3000 / 1000
    bytes/ms = 4.5 ms each) and one expert bucket of 1000 over the 2 edp ranks (2·1/2·1000 / 1000
    = 1 ms). The engine's two GradReducers send on their own process groups at once, so the
    expert bucket starts where the last backward ends (24 = 4 · (2 + 4)), as the first dense one
    does, and the step ends with the dense chain: 24 + 9 = 33, not 34 (one after the other)."""
    plan = plan_of(schedule="1f1b", p=1, dp=4, ep=2, m=4)
    traffic = Traffic(grads=[[3000, 3000]], expert_grads=[[1000]], bucket_bytes=3000)
    trace = simulated(plan, link=Link(bandwidth=1000.0), traffic=traffic)
    spans = sorted((c.start, c.end, c.nbytes) for c in trace.collectives)
    assert spans == [
        pytest.approx((24.0, 25.0, 1000)),
        pytest.approx((24.0, 28.5, 4500)),
        pytest.approx((28.5, 33.0, 4500)),
    ]
    assert step_time(trace) == pytest.approx(33.0)


def test_calibration_chains_the_buckets_in_the_order_the_rank_waited_for_them():
    """A measured DP4×EP2 step by hand: the expert bucket (100 bytes) is launched first, in the
    backward, but the engine waits for the dense ones first, so it is found complete last (just
    after them). The dense buckets cost 2 and 4 after the last backward (300 and 600 bytes), the
    expert one 0.001 more: least squares through 0, bandwidth = Σ bytes² / Σ bytes·time =
    (300² + 600² + 100²) / (300·2 + 600·4 + 100·0.001) bytes/ms. Chained in launch order, the
    expert bucket carried the whole tail (6 ms for 100 bytes: 16.7 bytes/ms, every bucket nine
    times too dear)."""
    from minipipe.trace import CollectiveEvent, Event, Trace

    plan = plan_of(schedule="1f1b", p=1, dp=4, ep=2, m=4)
    events, t = [], 0.0
    for a in plan.schedule.actions[0]:
        compute = 1.0 if a.op == "F" else 2.0
        events.append(Event(0, a, t, t + compute))
        t += compute
    end = events[-1].end  # 12.0
    dp = TrafficKind.DP_ALL_REDUCE
    buckets = [
        CollectiveEvent(0, dp, end - 1.5, end + 6.001, 100),  # the experts', over edp
        CollectiveEvent(0, dp, end - 1.0, end + 2.0, 300),
        CollectiveEvent(0, dp, end - 0.5, end + 6.0, 600),
    ]
    measured = Trace(plan.schedule, events, source="measured", unit="ms", collectives=buckets)
    cal = calibrate_mesh(measured, plan.mesh, Traffic(), [0.0])
    assert cal.observations["dp"] == 3
    link = cal.network.inside
    assert link.latency == 0.0 and link.bandwidth == pytest.approx(460_000 / 3000.1)
