"""Property tests: any parameters give a runnable schedule or a ValueError with a message."""

from hypothesis import given, settings
from hypothesis import strategies as st

from minipipe import Schedule, make_schedule
from minipipe.schedule.validate import ScheduleError, validate
from minipipe.sim.costs import Costs
from minipipe.sim.pipeline import simulate

kinds = st.sampled_from(["naive", "gpipe", "1f1b", "interleaved", "zb-h1", "one_f_one_b", "bogus"])
small = st.integers(min_value=-2, max_value=12)


@settings(max_examples=300, deadline=None)
@given(
    kind=kinds,
    p=small,
    m=small,
    v=st.integers(min_value=-1, max_value=5),
    layers=st.one_of(st.none(), st.integers(min_value=1, max_value=40)),
)
def test_generators_return_runnable_schedules_or_explain(kind, p, m, v, layers):
    try:
        schedule = make_schedule(kind, p, m, v, n_layers=layers)
    except ValueError as e:
        assert len(str(e)) > 20
        return
    trace = simulate(schedule, Costs(forward=1.0, backward=2.0, latency=0.1))
    ops_per_microbatch = 3 if schedule.splits_backward() else 2
    assert len(trace.events) == ops_per_microbatch * schedule.n_stages * m
    assert all(e.end > e.start for e in trace.events)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), p=st.integers(1, 4), m=st.integers(1, 5))
def test_shuffled_schedules_are_either_valid_or_rejected_with_a_grid(data, p, m):
    base = make_schedule("1f1b", p, m)
    lists = [data.draw(st.permutations(acts)) for acts in base.actions]
    schedule = Schedule.build("custom", p, m, 1, lists)
    try:
        validate(schedule)
    except ScheduleError as e:
        assert "rank" in e.reason and "step" in str(e) or "#" in str(e)
        return
    simulate(schedule)  # valid ones simulate to completion
