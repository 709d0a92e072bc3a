"""The simulator against the textbook formulas, exactly, over the issue's whole grid."""

import math

import pytest

from minipipe import make_schedule, theory
from minipipe.sim.costs import Costs
from minipipe.sim.pipeline import simulate

COSTS = [(1.0, 2.0), (1.0, 1.0), (2.0, 1.0), (0.3, 1.7)]


def cases():
    for p in range(1, 9):
        for kind in ("gpipe", "1f1b"):
            yield kind, p, 1
        yield "interleaved", p, 2
        yield "interleaved", p, 4


@pytest.mark.parametrize("kind,p,v", list(cases()))
def test_makespan_bubble_and_memory_equal_the_formulas(kind, p, v):
    for m in range(1, 33):
        if kind == "interleaved" and m % p:
            continue
        schedule = make_schedule(kind, p, m, v)
        for f, b in COSTS:
            trace = simulate(schedule, Costs(forward=f, backward=b))
            assert trace.makespan == pytest.approx(theory.makespan(kind, p, m, v, f, b), abs=1e-9)
            assert trace.bubble() == pytest.approx(theory.bubble_fraction(kind, p, m, v), abs=1e-12)
        peaks = trace.peak_inflight()
        assert peaks == [theory.peak_inflight(kind, p, m, r, v) for r in range(p)]
        if kind == "gpipe":
            assert peaks == [m] * p
        if kind == "1f1b":
            assert peaks == [min(p - r, m) for r in range(p)]


@pytest.mark.parametrize("p", range(1, 9))
def test_zb_h1_fills_the_cool_down_with_weight_gradients(p):
    for m in range(p, 33):
        schedule = make_schedule("zb-h1", p, m)
        for f, b, w in [(1.0, 2.0, 1.0), (1.0, 3.0, 1.0), (2.0, 2.0, 0.5), (1.0, 1.5, 0.5)]:
            trace = simulate(schedule, Costs(forward=f, backward=b, weight=w))
            assert trace.makespan == pytest.approx(theory.makespan("zb-h1", p, m, 1, f, b, w), abs=1e-9)
            assert trace.bubble() == pytest.approx(theory.bubble_fraction("zb-h1", p, m, 1, f, b, w), abs=1e-12)
            # and it beats 1F1B by (p-1)·2w
            one_f = simulate(make_schedule("1f1b", p, m), Costs(forward=f, backward=b))
            assert one_f.makespan - trace.makespan == pytest.approx((p - 1) * 2 * w, abs=1e-9)
        assert trace.peak_inflight() == [theory.peak_inflight("zb-h1", p, m, r) for r in range(p)] == [p] * p


def test_zb_h1_formula_says_when_it_does_not_apply():
    with pytest.raises(ValueError, match="m >= p"):
        theory.makespan("zb-h1", 4, 2)
    with pytest.raises(ValueError, match="w <= min"):
        theory.makespan("zb-h1", 2, 4, f=1.0, b=2.0, w=1.5)


@pytest.mark.parametrize("kind, v", [("interleaved", 2), ("zb-h1", 1), ("1f1b", 1)])
def test_what_a_rank_holds_adds_up_each_stages_share(kind, v):
    """peak_inflight(per_stage): the peak of what the held micro-batches hold, stage by stage,
    against a replay of each rank's list (a forward takes its stage's share, B or W frees it)."""
    p, m = 4, 8
    schedule = make_schedule(kind, p, m, v)
    share = [10**s for s in range(p * v)]  # every mix of stages adds up differently
    peaks = []
    for acts in schedule.actions:
        held = peak = 0
        for a in acts:
            held += share[a.stage] if a.op == "F" else -share[a.stage] if a.op in ("B", "W") else 0
            peak = max(peak, held)
        peaks.append(peak)
    trace = simulate(schedule)
    assert trace.peak_inflight(share) == peaks
    assert trace.peak_inflight([1] * (p * v)) == trace.peak_inflight()


def test_naive_keeps_one_rank_busy_at_a_time():
    trace = simulate(make_schedule("naive", 4, 3))
    assert trace.makespan == pytest.approx(4 * 3 * 3.0)
    assert trace.bubble() == pytest.approx(3 / 4)
    assert trace.peak_inflight() == [1, 1, 1, 1]


def test_slow_stage_stretches_the_step_and_shows_in_its_rank():
    base = simulate(make_schedule("1f1b", 4, 8))
    slow = simulate(make_schedule("1f1b", 4, 8), Costs(stage_scale={2: 2.0}))
    assert slow.makespan > base.makespan
    # the slow rank is the bottleneck: it is the least idle
    assert min(range(4), key=lambda r: slow.bubble_per_rank()[r]) == 2
    # steady state is bound by the slowest stage: m * (f + b) * 2 at least
    assert slow.makespan >= 8 * 3.0 * 2.0


def test_communication_costs_latency_and_bytes_and_counts_bytes():
    schedule = make_schedule("gpipe", 2, 4)
    free = simulate(schedule)
    paid = simulate(schedule, Costs(latency=0.5, bandwidth=100.0, activation_bytes=50.0))
    per_hop = 0.5 + 50.0 / 100.0
    # one hop on the way in (first forward) and one on the way out (first backward)
    assert paid.makespan == pytest.approx(free.makespan + 2 * per_hop)
    assert paid.bytes_sent == [4 * 50, 4 * 50]  # activations forward, gradients back


def test_gaps_and_busy_add_up_to_the_makespan():
    trace = simulate(make_schedule("1f1b", 3, 5), Costs(forward=1.0, backward=2.5))
    for r in range(3):
        idle = sum(b - a for a, b in trace.gaps(r))
        assert idle + trace.busy(r) == pytest.approx(trace.makespan)


def test_split_backward_costs():
    from minipipe import Schedule

    s = Schedule.custom(["0F0 0I0 0W0".split()])
    trace = simulate(s, Costs(forward=1.0, backward=3.0, weight=1.0))
    assert [e.duration for e in trace.events] == [1.0, 2.0, 1.0]
    assert trace.makespan == 4.0


def test_one_schedule_may_mix_full_and_split_backwards():
    from minipipe import Schedule

    # stage 1 splits micro-batch 0's backward, stage 0 does not: 0B0 waits for 1I0, not for a 1B0
    s = Schedule.custom(["0F0 0F1 0B0 0B1".split(), "1F0 1I0 1F1 1B1 1W0".split()])
    trace = simulate(s, Costs(forward=1.0, backward=3.0, weight=1.0))
    start = {str(e.action): e.start for e in trace.events}
    end = {str(e.action): e.end for e in trace.events}
    assert start["0B0"] == end["1I0"] == 4.0
    assert end["1W0"] - start["1W0"] == 1.0 and end["1B1"] - start["1B1"] == 3.0
    assert trace.peak_inflight() == [2, 2]  # 1W0 frees micro-batch 0 on rank 1 only at the very end


@pytest.mark.parametrize("f,b", COSTS)
def test_interleaving_shortens_the_step_of_the_same_model(f, b):
    """A rank's share of the model costs the same whatever v: each of its v chunks costs 1/v."""
    one = simulate(make_schedule("1f1b", 4, 8), Costs(forward=f, backward=b))
    inter = simulate(make_schedule("interleaved", 4, 8, 2), Costs(forward=f, backward=b))
    assert inter.makespan < one.makespan
    assert sum(e.duration for e in inter.events) == pytest.approx(sum(e.duration for e in one.events))
    if (f, b) == (1.0, 2.0):
        assert (inter.makespan, one.makespan) == (28.5, 33.0)


def test_per_stage_costs_are_taken_as_they_are():
    costs = Costs(forward=[1.0, 2.0, 3.0, 4.0], backward=[2.0, 4.0, 6.0, 8.0])
    trace = simulate(make_schedule("interleaved", 2, 2, 2), costs)
    assert {e.action.stage: e.duration for e in trace.events if e.action.op == "F"} == {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}


def test_slow_stage_scales_every_op_of_a_split_backward():
    trace = simulate(make_schedule("zb-h1", 2, 4), Costs(forward=1.0, backward=3.0, weight=1.0, stage_scale={1: 2.0}))
    durations = {(e.action.stage, e.action.op): e.duration for e in trace.events}
    assert durations == {(0, "F"): 1.0, (0, "I"): 2.0, (0, "W"): 1.0, (1, "F"): 2.0, (1, "I"): 4.0, (1, "W"): 2.0}


def test_a_recomputing_backward_pays_the_forward_again_in_b_and_i_not_in_w():
    costs = Costs(forward=1.0, backward=3.0, weight=1.0, recompute=0.5, stage_scale={1: 2.0})
    split = simulate(make_schedule("zb-h1", 2, 4), costs)
    durations = {(e.action.stage, e.action.op): e.duration for e in split.events}
    assert durations == {(0, "F"): 1.0, (0, "I"): 2.5, (0, "W"): 1.0, (1, "F"): 2.0, (1, "I"): 5.0, (1, "W"): 2.0}
    whole = simulate(make_schedule("1f1b", 2, 4), costs)
    assert {(e.action.stage, e.action.op): e.duration for e in whole.events if e.action.op == "B"} == {
        (0, "B"): 3.5,
        (1, "B"): 7.0,
    }


def test_zb_h1_runs_the_oldest_weight_gradient_first():
    """Each rank's W's follow its I's in micro-batch order, so the oldest activations go first;
    a W that overtook an older one would hold micro-batch 0 on rank p-1 to the end of the step."""
    for p, m in [(2, 4), (4, 8), (4, 4), (3, 7)]:
        s = make_schedule("zb-h1", p, m)
        for r, acts in enumerate(s.actions):
            order = [a.mb for a in acts if a.op == "W"]
            assert order == sorted(order) == [a.mb for a in acts if a.op == "I"], f"rank {r}: {order}"
        trace = simulate(s)
        for r in range(p):
            held = {e.action.mb: e.start for e in trace.rank_events(r) if e.action.op == "F"}
            freed = {e.action.mb: e.end for e in trace.rank_events(r) if e.action.op == "W"}
            longest = max(freed[mb] - held[mb] for mb in held)
            assert longest <= (p + 1) * 3.0, f"rank {r} held a micro-batch for {longest}"


def test_bubble_counts_every_rank_when_ranks_idle_unequally():
    from minipipe import Event, Trace

    trace = simulate(make_schedule("1f1b", 4, 8), Costs(stage_scale={1: 2.5}))
    idle = [trace.makespan - sum(e.end - e.start for e in trace.events if e.rank == r) for r in range(4)]
    assert len(set(round(x, 6) for x in idle)) > 1  # the ranks really do idle unequally
    assert trace.bubble() == pytest.approx(sum(idle) / (4 * trace.makespan))
    assert trace.bubble_per_rank() == pytest.approx([x / trace.makespan for x in idle])
    # a measured-looking trace: two ranks, rank 1 idle twice as long, the step not starting at 0
    s = make_schedule("gpipe", 2, 1)
    a = make_schedule("gpipe", 2, 1).actions
    events = [
        Event(0, a[0][0], 10.0, 11.0),
        Event(1, a[1][0], 11.0, 12.0),
        Event(1, a[1][1], 12.0, 13.0),
        Event(0, a[0][1], 13.0, 16.0),
    ]
    measured = Trace(s, events, source="measured")
    assert measured.makespan == 6.0
    assert measured.bubble() == pytest.approx((2.0 + 4.0) / 12.0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(forward=[1.0, 2.0, 3.0]), "^forward costs: got 3 values for 2 stages"),
        (dict(backward=[2.0, 2.0, 2.0]), "^backward costs: got 3 values for 2 stages"),
        (dict(weight=[1.0, 1.0, 1.0]), "^weight costs: got 3 values for 2 stages; give one number or one per stage"),
        (dict(forward=-1.0), "must be finite numbers >= 0"),
        (dict(stage_scale={5: 2.0}), "names stage 5"),
        (dict(stage_scale={0: 0.0}), "must be a finite number > 0"),
        (dict(latency=-1.0), "latency must be >= 0"),
        (dict(backward=1.0, weight=2.0), "cannot exceed"),
        (dict(backward=[2.0, 2.0], weight=[1.0, 3.0]), "stage 1: the weight gradient"),
    ],
)
def test_bad_costs_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        simulate(make_schedule("zb-h1", 2, 2), Costs(**kwargs))


def test_chrome_trace_has_one_event_per_action(tmp_path):
    trace = simulate(make_schedule("1f1b", 2, 4))
    doc = trace.to_chrome(str(tmp_path / "t.json"))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 16
    assert {e["tid"] for e in spans} == {0, 1}
    assert (tmp_path / "t.json").stat().st_size > 0


def test_ideal_step_time():
    assert theory.ideal_step_time(100.0, 2, 8) == pytest.approx(50.0 * 9 / 8)
    assert theory.ideal_step_time(100.0, 2, 4, v=2) == pytest.approx(50.0 * 9 / 8)
    assert math.isclose(theory.bubble_fraction("interleaved", 4, 8, 2), 3 / 19)


def test_calibrate_reads_op_costs_and_latency_off_a_trace():
    from minipipe import Action, Event, Trace, Wait
    from minipipe.sim.measured_costs import calibrate

    # uniform simulated trace: calibrating and simulating again gives it back
    trace = simulate(make_schedule("gpipe", 3, 4), Costs(forward=1.5, backward=2.5))
    assert simulate(trace.schedule, calibrate(trace)).makespan == pytest.approx(trace.makespan)
    # a measured-looking trace: rank 1 was already waiting when 0F0 ended; the data came 0.3 later
    s = make_schedule("gpipe", 2, 1)
    a = Action.parse
    events = [
        Event(0, a("0F0"), 0.0, 1.0),
        Event(1, a("1F0"), 1.3, 2.3),
        Event(1, a("1B0"), 2.3, 4.3),
        Event(0, a("0B0"), 4.6, 6.6),
    ]
    waits = [Wait(1, "recv", a("0F0"), 0.0, 1.3, 0), Wait(0, "recv", a("1B0"), 1.0, 4.6, 1)]
    costs = calibrate(Trace(s, events, source="measured", waits=waits))
    assert costs.latency == pytest.approx(0.3)
    assert costs.forward == pytest.approx([1.0, 1.0]) and costs.backward == pytest.approx([2.0, 2.0])
    assert simulate(s, costs).makespan == pytest.approx(6.6)
