"""The simulator with collectives: ring costs against a hand computation, the links a group uses
from the mesh's rank order, a PP×DP×TP step laid out by hand, the bytes equal to the formulas
the engine is checked against, and calibration recovering the costs it was given."""

import pytest

from minipipe import make_schedule, simulate, theory
from minipipe.parallel.mesh import Mesh
from minipipe.sim.costs import Costs
from minipipe.sim.measured_costs import calibrate_mesh, fit_link, predicted_vs_measured
from minipipe.sim.mesh_step import simulate_mesh, step_time
from minipipe.sim.network import Link, Network
from minipipe.traffic import DEFAULT_BUCKET_BYTES, Traffic, TrafficKind, buckets, ring_bytes, ring_steps
from minipipe.viz.timeline import theory_bubble

TP_AR, DP_AR = TrafficKind.TP_ALL_REDUCE, TrafficKind.DP_ALL_REDUCE


# -- collective costs, by hand ----------------------------------------------------------------
def test_ring_collectives_cost_what_a_hand_computation_gives():
    net = Network(inside=Link(bandwidth=100.0, latency=0.5), between=Link(bandwidth=10.0, latency=2.0), gpus_per_node=4)
    # all-reduce of 1200 bytes over 4 ranks of one node: 2·3 steps, each 0.5 + (1200/4)/100 = 3.5
    assert net.all_reduce(1200, (0, 1, 2, 3)) == pytest.approx(21.0)
    # = 2(n−1)·latency + 2(n−1)/n · bytes / bandwidth
    assert net.all_reduce(1200, (0, 1, 2, 3)) == pytest.approx(6 * 0.5 + 1.5 * 1200 / 100)
    # all-gather of a 1200-byte result: 3 steps of 300 bytes
    assert net.all_gather(1200, (0, 1, 2, 3)) == pytest.approx(3 * (0.5 + 3.0))
    assert net.collective("reduce-scatter", 1200, (0, 1, 2, 3)) == net.all_gather(1200, (0, 1, 2, 3))
    # ranks 3 and 4 sit on nodes 0 and 1: the ring runs at the slower link's pace
    assert net.all_reduce(1200, (2, 3, 4, 5)) == pytest.approx(6 * (2.0 + 300 / 10))
    assert net.send(50, 0, 3) == pytest.approx(0.5 + 0.5) and net.send(50, 3, 4) == pytest.approx(2.0 + 5.0)
    assert net.all_reduce(1200, (7,)) == 0.0
    # what each rank sends is traffic.py's ring formula, which the engine and the accounting count
    assert ring_bytes(TP_AR, 1200, 4) == 1800 and ring_bytes(TrafficKind.TP_ALL_GATHER, 1200, 4) == 900
    assert ring_bytes("all-reduce", 1000, 3) == pytest.approx(4000 / 3) and ring_bytes(DP_AR, 1000, 1) == 0
    assert [ring_steps("all-reduce", n) for n in (2, 8)] == [2, 14] and ring_steps(DP_AR, 8) == 14


def test_an_axis_with_a_link_of_its_own_talks_over_it_wherever_its_ranks_are():
    own = Link(bandwidth=1000.0, latency=0.125)
    net = Network(inside=Link(100.0), between=Link(10.0), gpus_per_node=4, axes=(("pp", own), ("tp", own)))
    assert net.send(500, 3, 4) == pytest.approx(0.125 + 0.5)  # the pipeline's messages, across nodes too
    assert net.collective(TP_AR, 1200, (3, 4)) == pytest.approx(2 * (0.125 + 600 / 1000))  # 2 steps of 600 B
    assert net.collective(DP_AR, 1200, (3, 4)) == pytest.approx(2 * 600 / 10)  # dp has none: between nodes
    assert Network.uniform(Link(100.0), {"pp": own}).send(500, 0, 1) == pytest.approx(0.625)


def test_a_schedule_alone_is_simulated_on_a_mesh_of_its_pipeline():
    schedule, costs = make_schedule("1f1b", 3, 6), Costs(forward=1.0, backward=2.0, latency=0.25)
    alone = simulate_mesh(schedule, costs)
    on_its_mesh = simulate_mesh(schedule, costs, Mesh(pp=3))
    assert alone.makespan == on_its_mesh.makespan == simulate(schedule, costs).makespan
    assert alone.events == on_its_mesh.events


def test_the_mesh_rank_order_keeps_tensor_parallel_groups_inside_a_node():
    mesh, net = Mesh(pp=4, dp=2, tp=8), Network(Link(1.0), Link(1.0), gpus_per_node=8)
    assert all(net.where(g) == "inside a node" for g in mesh.groups("tp"))
    assert all(net.where(g) == "between nodes" for g in mesh.groups("dp") + mesh.groups("pp"))
    small = Mesh(pp=2, dp=2, tp=2)
    assert [net.where(g) for g in small.groups("dp")] == ["inside a node"] * 4


def test_bad_links_and_collectives_are_refused():
    for bad in (dict(bandwidth=0.0), dict(bandwidth=1.0, latency=-1.0)):
        with pytest.raises(ValueError, match="bandwidth > 0 and latency >= 0"):
            Link(**bad)
    with pytest.raises(ValueError, match="not a collective; choose one of all-reduce"):
        ring_steps("broadcast", 4)
    with pytest.raises(ValueError, match="pp activation is not a collective"):
        ring_bytes(TrafficKind.PP_ACTIVATION, 100, 2)
    with pytest.raises(ValueError, match="gpus_per_node"):
        Network(Link(1.0), Link(1.0), gpus_per_node=0)


def test_buckets_are_the_gradient_reducers():
    import torch

    from minipipe.models import make_task
    from minipipe.parallel import data

    params = [p for layer in make_task("gpt", depth=3, width=32, heads=2).layers() for p in layer.parameters()]
    sizes = [p.numel() * p.element_size() for p in params]
    for bucket_bytes in (1, 4096, DEFAULT_BUCKET_BYTES, 10**9):
        assert buckets(sizes, bucket_bytes) == data.assign_buckets(params, bucket_bytes)
    # by hand: last first, at most 150 bytes unless one alone is larger, never two dtypes in one
    assert buckets([100, 40, 60, 200], 150) == [[3], [2, 1], [0]]
    assert buckets([10, 10, 10], 100, keys=["f32", "bf16", "bf16"]) == [[2, 1], [0]]
    mixed = [torch.zeros(4), torch.zeros(4, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.bfloat16)]
    assert data.assign_buckets(mixed, 10**6) == [[2, 1], [0]]


# -- a step laid out by hand ------------------------------------------------------------------
def test_a_pp_dp_tp_step_by_hand():
    """1F1B, p=2, m=2, tp=2, dp=2, two nodes of 4 GPUs. Every F and B runs one tensor-parallel
    all-reduce of 100 bytes inside a node (2 steps of 50 bytes at 100 B/ms: 1 ms), so F = 1 + 1
    and B = 2 + 1. Messages between the stages cross nodes (ranks 0 and 4): 10 bytes at 10 B/ms
    + 0.5 ms. The gradients (100 bytes a stage) all-reduce inside a node in 1 ms, after each
    stage's last backward."""
    schedule = make_schedule("1f1b", 2, 2)
    net = Network(inside=Link(100.0), between=Link(10.0, latency=0.5), gpus_per_node=4)
    traffic = Traffic(
        tp=[{"F": [(TP_AR, 100)], "B": [("tp all-reduce", 100)]}] * 2,  # a kind or its label
        grads=[[60, 40], [100]],
        bucket_bytes=1000,
    )
    costs = Costs(forward=1.0, backward=2.0, activation_bytes=10.0)
    trace = simulate(schedule, costs, mesh=Mesh(2, dp=2, tp=2), network=net, traffic=traffic)
    events = {str(e.action): (e.start, e.end) for e in trace.events}
    c = 1.5  # one message: 0.5 + 10/10
    assert events["0F0"] == (0.0, 2.0) and events["1F0"] == (2.0 + c, 4.0 + c)
    assert events["1B0"] == (4.0 + c, 7.0 + c) and events["0B0"][0] == pytest.approx(7.0 + 2 * c)
    # the textbook makespan with F = 2, B = 3, plus 1F1B's messages on the critical path
    no_wire = simulate(
        schedule,
        Costs(forward=1.0, backward=2.0),
        mesh=Mesh(2, dp=2, tp=2),
        network=Network.uniform(Link(100.0)),
        traffic=traffic,
    )
    assert no_wire.compute_span == pytest.approx(theory.makespan("1f1b", 2, 2, f=2.0, b=3.0))
    tp = [x for x in trace.collectives if x.kind is TP_AR]
    assert len(tp) == 8 and all(x.end - x.start == pytest.approx(1.0) for x in tp)
    assert tp[0].start == pytest.approx(1.0) and tp[0].nbytes == 100  # after the F's compute; 2·1/2·100 sent
    dp = sorted((x for x in trace.collectives if x.kind is DP_AR), key=lambda x: x.rank)
    last_b = [max(e.end for e in trace.rank_events(r) if e.action.op == "B") for r in (0, 1)]
    assert [x.start for x in dp] == pytest.approx(last_b) and [x.end - x.start for x in dp] == pytest.approx([1.0, 1.0])
    assert last_b[1] < last_b[0] == pytest.approx(max(e.end for e in trace.events))  # rank 1's overlaps the cool-down
    assert step_time(trace) == trace.makespan == pytest.approx(last_b[0] + 1.0)  # the step ends with the all-reduce
    assert {str(k): v for k, v in trace.traffic[0].items()} == {
        "pp activation": 20.0,
        "pp gradient": 0.0,
        "tp all-reduce": 400.0,
        "tp all-gather": 0.0,
        "cp ring": 0.0,
        "ep all-to-all": 0.0,
        "dp all-reduce": 100.0,
    }


def test_buckets_wait_for_each_other_and_cross_nodes_when_the_dp_group_does():
    schedule = make_schedule("1f1b", 1, 1)
    net = Network(inside=Link(100.0), between=Link(10.0), gpus_per_node=1)  # every rank its own node
    traffic = Traffic(grads=[[100, 100, 100]], bucket_bytes=150)  # three buckets of 100
    trace = simulate_mesh(schedule, Costs(forward=1.0, backward=2.0), Mesh(1, dp=2), net, traffic)
    dp = [(x.start, x.end) for x in trace.collectives]
    assert dp == [pytest.approx((3.0, 13.0)), pytest.approx((13.0, 23.0)), pytest.approx((23.0, 33.0))]


def test_without_collectives_it_is_the_pipeline_simulator():
    for kind, p, m, v in [("1f1b", 4, 8, 1), ("interleaved", 2, 4, 2), ("zb-h1", 3, 6, 1)]:
        schedule = make_schedule(kind, p, m, v)
        costs = (
            Costs(forward=[1.0, 1.5] * p, backward=2.0, latency=0.1, activation_bytes=100.0, bandwidth=1000.0)
            if v == 2
            else Costs(forward=1.0, backward=2.0, latency=0.1, activation_bytes=100.0, bandwidth=1000.0)
        )
        plain, meshed = simulate(schedule, costs), simulate(schedule, costs, mesh=Mesh(p))
        assert meshed.events == plain.events and meshed.bytes_sent == plain.bytes_sent
        assert meshed.collectives == [] and step_time(meshed) == pytest.approx(plain.makespan)
        # the timeline reads a trace's costs for its textbook bubble (zb-h1's depends on them) and its source
        assert meshed.costs is costs and theory_bubble(meshed) == theory_bubble(plain)
        assert meshed.summary().split()[0] == plain.summary().split()[0] == "simulated"


def test_gradients_of_one_replica_are_reduced_over_nobody():
    """Without data or context parallelism (dp·cp = 1, so one expert replica too) the step's gradient
    buckets, the experts' among them, have no one to be summed with: no collective, the same step."""
    schedule, costs = make_schedule("1f1b", 2, 4), Costs(forward=1.0, backward=2.0, latency=0.1)
    grads = Traffic(grads=[[400.0, 400.0], [400.0]], expert_grads=[[200.0], [200.0]])
    net = Network.uniform(Link(10.0))
    alone = simulate_mesh(schedule, costs, Mesh(2), net, grads)
    assert alone.collectives == [] and alone.events == simulate_mesh(schedule, costs, Mesh(2), net).events
    assert simulate_mesh(schedule, costs, Mesh(2, dp=2), net, grads).collectives


def test_a_mesh_that_does_not_fit_the_schedule_is_refused():
    with pytest.raises(ValueError, match="pp=4"):
        simulate(make_schedule("1f1b", 4, 4), mesh=Mesh(2, tp=2))
    with pytest.raises(ValueError, match="one per stage"):
        simulate(make_schedule("1f1b", 2, 2), traffic=Traffic(grads=[[1]]), mesh=Mesh(2, dp=2))
    with pytest.raises(ValueError, match="activation_bytes: got 3 values for 2 stages; give one number or one per"):
        simulate_mesh(make_schedule("1f1b", 2, 2), Costs(activation_bytes=[1.0, 2.0, 3.0]), Mesh(2, dp=2))


def test_a_network_without_nodes_puts_every_rank_on_node_0():
    net = Network(Link(1.0), Link(2.0), gpus_per_node=4)
    assert [net.node(r) for r in (0, 3, 4, 9)] == [0, 0, 1, 2]
    assert {Network.uniform(Link(1.0)).node(r) for r in (0, 7, 100)} == {0}


# -- the engine's plans -----------------------------------------------------------------------
def plan_of(**kw):
    from minipipe.engine.config import RunConfig, prepare

    base = dict(
        model="gpt",
        model_args={"width": 16, "heads": 2, "depth": 4, "block": 8, "vocab": 16},
        batch_size=16,
        m=2,
        steps=1,
    )
    return prepare(RunConfig(**{**base, **kw}))


def traffic_of(plan) -> Traffic:
    """What the plan's step moves, as the engine side hands it to the simulator."""
    from minipipe.models import task_of
    from minipipe.parallel.accounting import step_traffic

    return step_traffic(plan, task_of(plan.config).layers())


@pytest.mark.parametrize(
    "kw",
    [
        dict(schedule="1f1b", p=2, tp=2),
        dict(schedule="interleaved", p=2, dp=2),
        dict(schedule="zb-h1", p=1, tp=2, model="mlp", model_args={"width": 16, "depth": 5}),
        dict(schedule="1f1b", p=1, dp=2, tp=2),
    ],
)
def test_simulated_bytes_are_the_formulas_the_engine_is_checked_against(kw):
    from minipipe.models import task_of
    from minipipe.parallel.accounting import activation_bytes, expected_bytes, step_traffic

    plan = plan_of(**kw)
    layers = task_of(plan.config).layers()
    costs = Costs(activation_bytes=activation_bytes(plan))
    trace = simulate_mesh(plan.schedule, costs, plan.mesh, Network.uniform(Link(1e6)), step_traffic(plan, layers))
    for q in range(plan.mesh.pp):
        assert trace.traffic[q] == pytest.approx(expected_bytes(plan, plan.mesh.rank(q), layers), rel=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        dict(schedule="1f1b", p=2, tp=2),
        dict(schedule="1f1b", p=1, dp=2, tp=2),
        dict(schedule="interleaved", p=2, dp=2),
        dict(schedule="1f1b", p=2, cp=2),
        dict(schedule="zb-h1", p=1, cp=2, tp=2),
    ],
)
def test_calibration_recovers_the_costs_a_run_was_simulated_with(kw):
    """A 'measured' run made by the simulator itself, with known compute and link: calibrating on
    it must give back its compute per op and predict its step exactly."""
    from minipipe.parallel.accounting import activation_bytes

    plan = plan_of(**kw)
    n = plan.schedule.n_stages
    truth = Costs(
        forward=[1.0 + 0.25 * s for s in range(n)],
        backward=[2.0 + 0.5 * s for s in range(n)],
        weight=[0.6 + 0.1 * s for s in range(n)],  # not half the backward: zb-h1's W read back, not assumed
        activation_bytes=activation_bytes(plan),
    )
    link = Link(bandwidth=2000.0)  # a run whose collectives all have one size cannot tell latency from
    # bandwidth; test_fit_link_separates_latency_from_bandwidth does
    traffic = traffic_of(plan)
    measured = simulate_mesh(plan.schedule, truth, plan.mesh, Network.uniform(link), traffic)
    cal = calibrate_mesh([measured, measured], plan.mesh, traffic, activation_bytes(plan))
    assert cal.costs.forward == pytest.approx(truth.forward) and cal.costs.backward == pytest.approx(truth.backward)
    if plan.schedule.splits_backward():
        assert cal.costs.weight == pytest.approx(truth.weight)
    out = predicted_vs_measured([measured, measured], plan.mesh, traffic, activation_bytes(plan))
    assert out["error"] == pytest.approx(0.0, abs=1e-9)
    assert out["measured_ms"] == pytest.approx(step_time(measured))


def test_calibration_times_the_gradient_buckets_on_the_dp_x_cp_group():
    """With cp the gradients are averaged over dp × cp ranks (4 here), a ring of 2·3 steps a
    bucket: a link of latency alone (each bucket's time its steps' latency) must be read back as
    that latency, not as the 2 steps of a dp group of 2 (which predicted a DP2×CP2 step with
    three times its measured tail)."""
    from minipipe.parallel.accounting import activation_bytes

    plan = plan_of(schedule="1f1b", p=1, dp=2, cp=2)
    truth = Costs(forward=[1.0], backward=[2.0], activation_bytes=activation_bytes(plan))
    link, traffic = Link(bandwidth=float("inf"), latency=0.25), traffic_of(plan)
    measured = simulate_mesh(plan.schedule, truth, plan.mesh, Network.uniform(link), traffic)
    assert len(traffic.grads[0]) > 1 and any(c.kind is DP_AR for c in measured.collectives)
    cal = calibrate_mesh([measured, measured], plan.mesh, traffic, activation_bytes(plan))
    assert cal.network.inside.latency == pytest.approx(0.25)
    # what the link was fitted to: ring attention's steps and the buckets, nothing of tp, ep or messages
    assert cal.observations == {"tp": 0, "cp": 48, "ep": 0, "dp": 4, "message": 0}
    assert [axis for axis, _ in cal.network.axes] == ["cp"]  # ring attention's steps on a link of their own
    out = predicted_vs_measured([measured, measured], plan.mesh, traffic, activation_bytes(plan))
    assert out["error"] == pytest.approx(0.0, abs=1e-9) and out["calibration"].observations == cal.observations


def test_the_prediction_simulates_on_the_calibrated_links_each_axis_its_own():
    """Ring attention's steps on a link 5× faster than the gradient buckets': the prediction must
    replay the step on the links the calibration fitted, ring attention's on its own."""
    from minipipe.parallel.accounting import activation_bytes

    plan = plan_of(schedule="1f1b", p=1, dp=2, cp=2)
    truth = Costs(forward=[1.0], backward=[2.0], activation_bytes=activation_bytes(plan))
    network = Network.uniform(Link(bandwidth=float("inf"), latency=0.25), {"cp": Link(float("inf"), 0.05)})
    traffic = traffic_of(plan)
    measured = simulate_mesh(plan.schedule, truth, plan.mesh, network, traffic)
    out = predicted_vs_measured([measured, measured], plan.mesh, traffic, activation_bytes(plan))
    assert dict(out["calibration"].network.axes)["cp"].latency == pytest.approx(0.05)
    assert out["error"] == pytest.approx(0.0, abs=1e-9)


def test_calibration_on_a_measured_run_counts_the_executor_and_the_all_reduce_tail():
    """A measured step by hand (p=1, dp=2, m=4): every action but the last is followed by 0.5 of
    executor time (no wait), and the last backward is 1.0 slower than the others because the
    gradient buckets launched during it share the cores. The compute must carry the executor's
    time, and the buckets count from where the last backward would have ended."""
    from minipipe.schedule.ops import Action
    from minipipe.trace import CollectiveEvent, Event, Trace

    plan = plan_of(schedule="1f1b", p=1, dp=2, m=4)
    events, t = [], 0.0
    for a in plan.schedule.actions[0]:
        compute = 1.0 if a.op == "F" else (3.0 if a == Action("B", 0, 3) else 2.0)
        events.append(Event(0, a, t, t + compute))
        t += compute + 0.5
    last_end = events[-1].end  # 16.5; at its typical length: 16.0
    buckets_ = [CollectiveEvent(0, DP_AR, 15.0, 17.0, 100), CollectiveEvent(0, DP_AR, 15.5, 18.0, 100)]
    measured = Trace(plan.schedule, events, source="measured", unit="ms", collectives=buckets_)
    cal = calibrate_mesh(measured, plan.mesh, Traffic(), [0.0])
    assert last_end == 16.5
    assert cal.costs.forward == pytest.approx([1.5]) and cal.costs.backward == pytest.approx([2.5])
    assert cal.observations["dp"] == 2  # 17 − 16 and 18 − 17: 1.0 each
    link, steps = cal.network.inside, ring_steps("all-reduce", 2)
    assert steps * link.latency + 100 / link.bandwidth == pytest.approx(1.0)


def test_calibration_fits_the_link_to_a_message_whose_receive_was_waiting():
    """A measured gpipe step by hand (p=2, m=1): rank 1's receive of F0 waits [0, 1.5) while F0 runs
    [0, 1): the message took 0.5 after its producer ended, 100 bytes (stage 0's activation); rank 0's
    receive of B1's gradient starts the moment B1 ends, waiting too (0.5, the gradient of boundary 0)."""
    from minipipe.schedule.ops import Action
    from minipipe.trace import Event, Trace, Wait

    plan = plan_of(schedule="gpipe", p=2, m=1)
    f0, f1, b1, b0 = Action("F", 0, 0), Action("F", 1, 0), Action("B", 1, 0), Action("B", 0, 0)
    events = [Event(0, f0, 0.0, 1.0), Event(1, f1, 1.5, 2.5), Event(1, b1, 2.5, 4.5), Event(0, b0, 5.0, 7.0)]
    waits = [Wait(1, "recv", f0, 0.0, 1.5, peer=0), Wait(0, "recv", b1, 4.5, 5.0, peer=1)]
    measured = Trace(plan.schedule, events, source="measured", unit="ms", waits=waits)
    cal = calibrate_mesh(measured, plan.mesh, Traffic(), [100.0, 0.0])
    assert cal.observations == {"tp": 0, "cp": 0, "ep": 0, "dp": 0, "message": 2}
    link = cal.network.inside
    assert link.latency + 100 / link.bandwidth == pytest.approx(0.5)


def test_a_measured_actions_time_leaves_out_the_collectives_inside_it_and_its_own_ranks_waits():
    """compute_times on a measured gpipe step by hand (p=2, m=1): a tensor-parallel all-reduce that
    starts exactly with F0 and one that ends exactly with B0 are inside them and taken out; one that
    starts 0.01 before F1 is not, nor rank 1's that runs while rank 0 runs B0. Rank 0's time between F0
    and B0 less its own wait is F0's executor time (0.5); rank 1's wait for its sends at the same time
    is not rank 0's."""
    from minipipe.schedule.ops import Action
    from minipipe.sim.measured_costs import compute_times
    from minipipe.trace import CollectiveEvent, Event, Trace, Wait

    f0, f1, b1, b0 = Action("F", 0, 0), Action("F", 1, 0), Action("B", 1, 0), Action("B", 0, 0)
    events = [Event(0, f0, 0.0, 1.0), Event(1, f1, 1.5, 2.5), Event(1, b1, 2.5, 4.5), Event(0, b0, 5.0, 7.0)]
    waits = [Wait(0, "recv", b1, 1.0, 4.5, peer=1), Wait(1, "send", None, 4.5, 4.8)]
    inside = [CollectiveEvent(0, TP_AR, 0.0, 0.25, 8), CollectiveEvent(0, TP_AR, 6.75, 7.0, 8)]
    before = [CollectiveEvent(1, TP_AR, 1.49, 1.6, 8)]
    elsewhere = [CollectiveEvent(1, TP_AR, 5.5, 6.0, 8)]
    measured = Trace(
        make_schedule("gpipe", 2, 1), events, source="measured", waits=waits, collectives=inside + before + elsewhere
    )
    (spent,) = compute_times([measured])[1]
    assert {e.action: t for e, t in spent.items()} == pytest.approx({f0: 1.25, b0: 1.75, f1: 1.0, b1: 2.0})


def test_fit_link_separates_latency_from_bandwidth():
    link = Link(bandwidth=500.0, latency=0.2)
    timings = [
        (steps, nbytes, steps * link.latency + nbytes / link.bandwidth)
        for steps, nbytes in [(1, 100), (2, 1000), (6, 300), (1, 5000)]
    ]
    fitted = fit_link(timings)
    assert fitted.bandwidth == pytest.approx(500.0) and fitted.latency == pytest.approx(0.2)
    assert fit_link([(2, 100, 1.0)] * 3).send(50) * 2 == pytest.approx(1.0)  # one size: its time, exactly
    assert fit_link([]).bandwidth == float("inf")
    assert fit_link([(1, 0, 0.5)]) == Link(bandwidth=float("inf"), latency=0.5)  # one empty message: all latency


def test_fit_link_keeps_the_one_term_with_the_smaller_squared_error_when_both_cannot_be_fitted():
    """Timings whose best fit of both terms has a negative bandwidth term: the fit falls back to
    latency alone or bandwidth alone, whichever leaves the smaller sum of squared errors (here
    latency alone, 6.18 against 9.62; bandwidth alone's errors summed unsquared make 3.47)."""
    timings = [(3, 20, 2.3), (1, 10, 3.2), (3, 10, 4.3)]
    latency = sum(s * t for s, _, t in timings) / sum(s * s for s, _, _ in timings)
    per_byte = sum(b * t for _, b, t in timings) / sum(b * b for _, b, _ in timings)
    squared = [sum((t - s * latency) ** 2 for s, _, t in timings), sum((t - b * per_byte) ** 2 for _, b, t in timings)]
    assert squared == [pytest.approx(6.18, abs=0.01), pytest.approx(9.62, abs=0.01)]
    fitted = fit_link(timings)
    assert fitted.bandwidth == float("inf") and fitted.latency == pytest.approx(latency)


def test_one_median_for_every_calibration():
    from minipipe import Action, Event, Trace
    from minipipe.sim.measured_costs import calibrate, compute_costs, median

    assert median([]) == 0.0 and median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5
    # two steps of one stage whose forwards took 1 and 2: the pipeline's calibration and the
    # mesh's compute both say 1.5 (the true median, not the upper middle value)
    s = make_schedule("gpipe", 1, 1)
    steps = [
        Trace(s, [Event(0, Action("F", 0, 0), 0.0, f), Event(0, Action("B", 0, 0), f, f + 2.0)], source="measured")
        for f in (1.0, 2.0)
    ]
    assert calibrate(steps).forward == [1.5] and compute_costs(steps).forward == [1.5]
