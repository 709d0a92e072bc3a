"""PipeDream and PipeDream-2BW as schedules (no processes): their versions, their rules, their
formulas against the simulator, and what a flush costs, over p, m and steps."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minipipe import Schedule, ScheduleError, make_schedule, simulate, theory, validate
from minipipe.schedule import asynchronous, kinds
from minipipe.schedule.updates import Updates
from minipipe.sim.costs import Costs

NO_FLUSH = ("pipedream", "pipedream-2bw")
FLUSHED = ("1f1b", "gpipe", "zb-h1")


def made(kind, p, m, steps):
    try:
        return make_schedule(kind, p, m, steps=steps)
    except ValueError:
        return None


# -- the formulas, against the simulator ---------------------------------------------------------
@settings(max_examples=250, deadline=None)
@given(
    kind=st.sampled_from(NO_FLUSH + FLUSHED),
    p=st.integers(1, 8),
    m=st.integers(1, 12),
    steps=st.integers(1, 4),
    f=st.sampled_from([1.0, 0.5, 2.0]),
    b=st.sampled_from([2.0, 1.0, 3.5]),
    share=st.sampled_from([0.5, 0.3]),  # of the backward, the weight gradient's (zb-h1's W): the default, and not
)
def test_run_makespan_memory_and_weight_versions_equal_the_simulator(kind, p, m, steps, f, b, share):
    s = made(kind, p, m, steps)
    if s is None:
        assert kind == "pipedream-2bw" and m < p - 1 or kind == "zb-h1"
        return
    assert (s.steps, s.m, s.updates.per_step) == (steps, steps * m, m)
    w = share * b if kind == "zb-h1" else None
    if kind == "zb-h1" and (m < p or w > f or w > b - w):
        return
    trace = simulate(s, Costs(forward=f, backward=b, weight=w))
    assert trace.makespan == pytest.approx(theory.run_makespan(kind, p, m, steps, f=f, b=b, w=w), abs=1e-9)
    assert trace.bubble() == pytest.approx(theory.run_bubble_fraction(kind, p, m, steps, f=f, b=b, w=w), abs=1e-9)
    assert trace.peak_inflight() == [theory.peak_inflight(kind, p, m, r, steps=steps) for r in range(p)]
    assert trace.peak_weight_versions() == [theory.weight_versions(kind, p, m, r, steps) for r in range(p)]


@pytest.mark.parametrize("kind", NO_FLUSH)
@pytest.mark.parametrize(("p", "m"), [(2, 1), (3, 2), (4, 4), (4, 8)])
def test_without_steps_the_formulas_and_the_schedule_run_the_kinds_default_steps(kind, p, m):
    steps = kinds.get(kind).asynchronous.default_steps
    if made(kind, p, m, steps) is None:
        return
    s = make_schedule(kind, p, m)
    assert s.steps == steps
    trace = simulate(s)
    assert trace.peak_inflight() == [theory.peak_inflight(kind, p, m, r) for r in range(p)]
    assert trace.makespan == pytest.approx(theory.run_makespan(kind, p, m, steps))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_a_flush_costs_its_fill_and_drain_every_step_and_no_flush_pays_it_once(p):
    for m in (max(p - 1, 1), p, 2 * p):
        for steps in (1, 2, 5):
            flushed = simulate(make_schedule("1f1b", p, m, steps=steps)).makespan
            alone = simulate(make_schedule("1f1b", p, m)).makespan
            assert flushed == pytest.approx(steps * alone)  # a flush: nothing overlaps
            for kind in NO_FLUSH:
                span = simulate(make_schedule(kind, p, m, steps=steps)).makespan
                assert span == pytest.approx((steps * m + p - 1) * 3.0)  # f + b = 1 + 2
                assert flushed - span == pytest.approx((steps - 1) * (p - 1) * 3.0)  # the bubbles saved
            ratio = theory.throughput("pipedream-2bw", p, m, steps) / theory.throughput("1f1b", p, m, steps)
            assert ratio == pytest.approx(steps * (m + p - 1) / (steps * m + p - 1))


# -- the versions: the papers' formulas, from the lists --------------------------------------------
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_pipedream_forwards_take_the_newest_weights_which_is_the_papers_staleness(p):
    """Every stage updates after every backward and each forward takes the newest version: stage i
    of n (1-indexed) runs micro-batch t with w_i^(t−n+i) (SOSP 2019), p − 1 − r updates stale."""
    m, steps = 3, 4
    v = make_schedule("pipedream", p, m, steps=steps).versions
    for r in range(p):
        assert v.uses[r] == tuple(max(0, mb - (p - 1 - r)) for mb in range(m * steps))
        assert v.into[r] == tuple(range(m * steps))
        steady = [v.staleness(r, mb) for mb in range(p, m * steps)]
        assert set(steady) == {theory.staleness("pipedream", p, m, r)} == {p - 1 - r}


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_2bw_is_one_step_stale_on_every_stage(p):
    """max(⌊(k−1)/m⌋ − 1, 0) for micro-batch k (1-indexed), on every stage (ICML 2021, §3.1)."""
    m, steps = max(p - 1, 1), 4
    v = make_schedule("pipedream-2bw", p, m, steps=steps).versions
    for r in range(p):
        assert v.uses[r] == tuple(max((k - 1) // m - 1, 0) for k in range(1, m * steps + 1))
        assert v.into[r] == tuple(mb // m for mb in range(m * steps))
        assert {v.staleness(r, mb) for mb in range(m, m * steps)} == {theory.staleness("pipedream-2bw", p, m, r)} == {1}
        assert v.updates(r) == steps


def test_a_flushed_run_of_steps_is_never_stale():
    v = make_schedule("interleaved", 2, 4, 2, steps=3).versions
    assert all(v.staleness(s, mb) == 0 for s in range(4) for mb in range(12))
    assert [theory.staleness("1f1b", 4, 8, r) for r in range(4)] == [0] * 4


# -- the rules, at the limit and either side ---------------------------------------------------------
@pytest.mark.parametrize("p", [3, 4, 6])
def test_2bw_needs_m_of_at_least_p_minus_1_and_the_validator_proves_why(p):
    with pytest.raises(kinds.UnsuitedError, match=f"at least p − 1 = {p - 1}") as e:
        make_schedule("pipedream-2bw", p, p - 2)
    assert e.value.kind == "pipedream-2bw"
    for m in (p - 1, p):
        assert make_schedule("pipedream-2bw", p, m, steps=3).versions.updates(0) == 3
    # the rule's reason, found by the validator in the lists themselves
    with pytest.raises(ScheduleError, match=r"rank 0 runs 0F\d+ with version \d of stage 0's weights"):
        validate(asynchronous.pipedream_2bw(p, p - 2, 3))


def test_steps_must_be_a_whole_number():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="steps must be a whole number"):
            make_schedule("pipedream", 2, 4, steps=bad)


def test_a_step_of_a_kind_without_a_flush_has_no_makespan_of_its_own():
    with pytest.raises(ValueError, match="no flush.*run_makespan"):
        theory.makespan("pipedream-2bw", 4, 8)
    assert theory.run_makespan("pipedream-2bw", 4, 8, 10) == (80 + 3) * 3.0


# -- the data: text form, hand-written schedules, refusals -----------------------------------------------
def test_text_form_round_trips_with_its_updates():
    for kind in NO_FLUSH + ("1f1b",):
        s = make_schedule(kind, 3, 4, steps=2)
        text = s.to_text()
        assert "per_step=4" in text.splitlines()[0]
        assert Schedule.from_text(text) == s and Schedule.from_text(text).versions == s.versions


def test_a_hand_written_schedule_that_uses_weights_not_made_yet_is_refused():
    # rank 1's second forward wants version 1 of stage 1 under the flush rule, made after 1B0
    ok = Schedule.custom([["0F0", "0B0", "0F1", "0B1"], ["1F0", "1B0", "1F1", "1B1"]], updates=Updates("flush", 1))
    assert validate(ok).versions.uses == ((0, 1), (0, 1))
    early = Schedule.custom([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1F1", "1B0", "1B1"]], updates=Updates("flush", 1))
    with pytest.raises(
        ScheduleError,
        match=r"rank 0 runs 0F1 with version 1 of stage 0's weights, but stage 0 has "
        r"made only versions 0..0",
    ):
        validate(early)
    for bad, match in ((Updates("vertical-sync", 1), "unknown update rule"), (Updates("2bw", 3), "divides m=2")):
        with pytest.raises(ScheduleError, match=match):
            validate(Schedule.custom(ok.actions, updates=bad))


def test_torch_runtime_export_refuses_a_schedule_that_updates_inside():
    from minipipe.frameworks.torch_runtime import to_csv

    with pytest.raises(ValueError, match="updates its weights inside its lists"):
        to_csv(make_schedule("pipedream-2bw", 2, 4))
    assert to_csv(make_schedule("1f1b", 2, 4)).count("\n") == 2


# -- a run without a flush: what it refuses before any process starts --------------------------------
@pytest.mark.parametrize(
    "change,match",
    [
        (dict(dp=2), "dp=2: a data-parallel all-reduce at the end of a step"),
        (
            dict(cp=2, model="gpt", model_args={"width": 8, "heads": 2, "depth": 2, "block": 8, "vocab": 16}),
            "cp=2: context parallelism",
        ),
        (dict(tp=2), "tp=2: tensor parallelism"),
        (dict(recompute="stage"), "recomputation"),
        (dict(checkpoint_dir="CKPT"), "checkpoint_dir or resume"),
        (dict(return_grads=True), "return_grads"),
        (dict(m=2, p=4), r"at least p − 1 = 3"),
    ],
)
def test_a_run_without_a_flush_refuses_what_needs_one(change, match, tmp_path):
    from minipipe.engine.config import RunConfig, prepare

    if change.get("checkpoint_dir"):
        change["checkpoint_dir"] = str(tmp_path / "ckpt")
    base = dict(
        schedule="pipedream-2bw",
        p=2,
        m=4,
        steps=3,
        model="mlp",
        model_args={"width": 8, "depth": 3},
        batch_size=8,
        oversubscribe=True,
    )
    with pytest.raises(ValueError, match=match):
        prepare(RunConfig(**{**base, **change}))
    plan = prepare(RunConfig(**base))
    assert (plan.schedule.steps, plan.schedule.updates.per_step, plan.config.m) == (3, 4, 4)


def test_a_hand_written_schedule_of_steps_brings_its_steps():
    from minipipe.engine.config import RunConfig, prepare

    s = make_schedule("pipedream", 2, 2, steps=3)
    common = dict(model="mlp", model_args={"width": 8, "depth": 3}, batch_size=8, oversubscribe=True)
    assert prepare(RunConfig(schedule=s, steps=3, **common)).config.m == 2
    with pytest.raises(ValueError, match="holds 3 steps, but steps=5 was given"):
        prepare(RunConfig(schedule=s, steps=5, **common))
    with pytest.raises(ValueError, match="has m=2"):
        prepare(RunConfig(schedule=s, m=6, steps=3, **common))


def test_weight_versions_are_held_from_their_update_until_superseded_and_last_used():
    """PipeDream-2BW p=2 m=2, two steps (f = 1, b = 2): rank 0 holds its first version until its
    last backward on it, a second from its first update (9) on; each rank holds none once the run ends.
    The version the run's last update makes is never held (it would read as −1 for a moment at the end)."""
    trace = simulate(make_schedule("pipedream-2bw", 2, 2, steps=2))
    assert trace.weight_versions_curve(0) == [(0.0, 0), (0.0, 1), (9.0, 2), (15.0, 1), (15.0, 0)]
    assert trace.weight_versions_curve(1) == [(0.0, 0), (0.0, 1), (7.0, 2), (13.0, 1), (13.0, 0), (13.0, 1), (15.0, 0)]
    for kind in NO_FLUSH:
        for p, m, steps in [(2, 2, 1), (3, 4, 3), (4, 8, 2)]:
            run = simulate(make_schedule(kind, p, m, steps=steps))
            for r in range(p):
                curve = run.weight_versions_curve(r)
                assert min(n for _, n in curve) == 0 and curve[-1] == (run.makespan, 0), (kind, p, m, steps, r)
    assert simulate(make_schedule("1f1b", 2, 2)).weight_versions_curve(1) == [(0.0, 1)]


# -- the figures: every point the number it claims -----------------------------------------------------
def test_weight_versions_figure_draws_each_ranks_curve_and_the_loss_and_throughput_charts_their_numbers():
    import plotly.graph_objects as go

    from minipipe.viz.inflight import weight_versions
    from minipipe.viz.no_flush import loss_curves, throughput

    p = 4
    traces = [simulate(make_schedule(kind, p, 4, steps=3)) for kind in ("1f1b", "pipedream-2bw", "pipedream")]
    fig = go.Figure(weight_versions(traces).to_dict())  # plotly accepts every property
    for c, t in enumerate(traces):
        for r in range(p):
            line = fig.data[c * p + r]
            assert max(line.y) == t.peak_weight_versions()[r] == theory.weight_versions(t.schedule.kind, p, 4, r, 3)
            curve = dict((x - t.start, n) for x, n in t.weight_versions_curve(r))
            assert list(line.y)[:-1] == list(curve.values()) and line.x[-1] == t.makespan
    assert [max(fig.data[2 * p + r].y) for r in range(p)] == [4, 3, 2, 1]  # PipeDream: p − r
    curves = go.Figure(loss_curves({"a": [3.0, 2.0, 1.5], "b": [3.0, 2.5]}).to_dict())
    assert [list(d.y) for d in curves.data] == [[3.0, 2.0, 1.5], [3.0, 2.5]] and curves.data[1].line.dash == "dash"
    bars = go.Figure(throughput({"1F1B": (100.0, 120.0), "2BW": (130.0, 150.0)}).to_dict())
    assert [list(d.y) for d in bars.data] == [[100.0, 130.0], [120.0, 150.0]]
    with pytest.raises(ValueError):
        loss_curves({})


def test_a_flushed_step_has_no_version_plan():
    from minipipe.schedule.updates import plan

    with pytest.raises(ValueError, match="a version plan needs a schedule with updates"):
        plan(make_schedule("1f1b", 2, 4))
