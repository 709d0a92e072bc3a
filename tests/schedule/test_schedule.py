"""Actions, schedules, text round trip and the generators' parameter checks."""

import pytest

from minipipe import Action, Schedule, make_schedule


def grid_of_params():
    for p in range(1, 6):
        for m in (1, 2, 3, 4, 5, 8, 12):
            for kind in ("naive", "gpipe", "1f1b", "zb-h1"):
                yield kind, p, m, 1
            for v in (2, 3, 4):
                if m % p == 0:
                    yield "interleaved", p, m, v


def test_a_text_without_a_header_is_a_custom_schedule_sized_by_its_actions():
    text = "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n"
    s = Schedule.from_text(text)
    assert (s.kind, s.p, s.m, s.v) == ("custom", 2, 2, 1)
    assert s.to_text() == "# minipipe schedule kind=custom p=2 m=2 v=1\n" + text


@pytest.mark.parametrize("kind,p,m,v", list(grid_of_params()))
def test_text_round_trip(kind, p, m, v):
    schedule = make_schedule(kind, p, m, v)
    text = schedule.to_text()
    assert Schedule.from_text(text) == schedule
    assert text.count("\n") == p + 1


@pytest.mark.parametrize("kind,p,m,v", list(grid_of_params()))
def test_every_rank_runs_its_own_stages_once(kind, p, m, v):
    schedule = make_schedule(kind, p, m, v)
    for rank, actions in enumerate(schedule.actions):
        ops = "FIW" if kind == "zb-h1" else "FB"
        expected = {Action(op, s, mb) for s in schedule.stages_of(rank) for mb in range(m) for op in ops}
        assert sorted(actions) == sorted(expected)


def test_action_notation_matches_pytorch():
    assert str(Action("F", 2, 5)) == "2F5"
    assert Action.parse("12B30") == Action("B", 12, 30)
    assert Action.parse("3I1") == Action("I", 3, 1) and Action.parse("3W1") == Action("W", 3, 1)
    for bad in ("F2", "2X1", "2F"):
        with pytest.raises(ValueError, match="not an action"):
            Action.parse(bad)


def test_every_op_maps_onto_torchs_computation_type():
    from torch.distributed.pipelining.schedules import _Action, _ComputationType

    from minipipe import OPS

    for code, op in OPS.items():
        theirs = _Action.from_str(f"3{code}7")
        assert theirs.computation_type == getattr(_ComputationType, op.torch_name)
        assert (theirs.stage_index, theirs.microbatch_index) == (3, 7)


def test_custom_schedule_reads_p_and_m_from_the_lists():
    schedule = Schedule.custom([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]])
    assert (schedule.p, schedule.m, schedule.v, schedule.kind) == (2, 2, 1, "custom")
    assert Schedule.from_text(schedule.to_text()) == schedule


@pytest.mark.parametrize("text", ["0F0 0B0", b"0F0 0B0"])
def test_custom_given_text_points_to_from_text(text):
    with pytest.raises(ValueError) as refused:
        Schedule.custom(text)
    assert str(refused.value) == (
        "custom takes one list of actions per rank, e.g. [['0F0', '0B0'], ...], not a string "
        "(Schedule.from_text reads text: a line per rank, 'rank N:' and what rank N runs, e.g. 'rank 0: 0F0 0B0')"
    )
    assert Schedule.from_text("rank 0: 0F0 0B0") == Schedule.custom([["0F0", "0B0"]])  # as it says


@pytest.mark.parametrize("text", ["rank 0:", "rank 0:\nrank 1:", "# minipipe schedule p=2 m=1\nrank 0:\nrank 1:"])
def test_a_schedule_text_without_actions_is_refused_as_custom_refuses_empty_lists(text):
    with pytest.raises(ValueError, match="the schedule text has no actions: a line per rank"):
        Schedule.from_text(text)
    assert Schedule.from_text("rank 0:\nrank 1: 1F0 1B0").actions[0] == ()  # one rank idle: a schedule still


def test_text_without_header_is_accepted():
    schedule = Schedule.from_text("rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n")
    assert (schedule.p, schedule.m, schedule.v) == (2, 1, 1)


def test_non_default_placement_round_trips():
    # a "V" placement: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2
    schedule = Schedule.build(
        "custom", 2, 1, 2, [["0F0", "3F0", "3B0", "0B0"], ["1F0", "2F0", "2B0", "1B0"]], placement=(0, 1, 1, 0)
    )
    assert Schedule.from_text(schedule.to_text()) == schedule


@pytest.mark.parametrize(
    "text,message",
    [
        ("rank 0: 0F0\nrank 2: 1F0", "in order"),
        ("hello", "expected 'rank N"),
        ("", "the schedule text has no actions: a line per rank"),
        (3, r"^from_text reads a schedule's text \(a string, as to_text writes it\), got int$"),
    ],
)
def test_bad_text_says_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        Schedule.from_text(text)


def test_interleaved_places_stages_round_robin():
    schedule = make_schedule("interleaved", 4, 8, 2)
    assert schedule.placement == (0, 1, 2, 3, 0, 1, 2, 3)
    assert schedule.stages_of(1) == [1, 5]


@pytest.mark.parametrize(
    "args,message",
    [
        (("gpipe", 0, 4), "p \\(ranks\\) must be a whole number >= 1"),
        (("gpipe", 2, 0), "m \\(micro-batches\\) must be"),
        (("interleaved", 2, 4, 0), "v \\(stages per rank\\) must be"),
        (("gpipe", 2.0, 4), "whole number"),
        (("1f1b", 2, 4, 2), "1f1b: v=2 stages per rank does not apply.*interleaved"),
        (("interleaved", 4, 8, 1), "needs v >= 2"),
        (("interleaved", 4, 6, 2), "use m=4 or m=8"),
        (("interleaved", 4, 2, 2), "use m=4"),
        (("zigzag", 2, 2), "unknown schedule 'zigzag'; choose one of"),
        (("1f1b", 4, 4, 1, 3), "only 3 layers"),
    ],
)
def test_invalid_parameters_raise_value_error_with_advice(args, message):
    with pytest.raises(ValueError, match=message):
        make_schedule(*args)


def test_grid_shows_the_fill_and_drain():
    lines = str(make_schedule("gpipe", 3, 2)).splitlines()
    assert lines[0].split() == ["step", "rank", "0", "rank", "1", "rank", "2"]
    assert lines[1].split() == ["0", "0F0", ".", "."]  # only rank 0 works at first
    assert lines[-1].split() == [str(len(lines) - 2), "0B1", ".", "."]  # and last
    assert len(lines) - 1 == 2 * (2 + 3 - 1)  # (m + p - 1) slots each way


def test_an_overlapped_pair_is_timed_by_the_rank_that_runs_it():
    """replay's pair(rank, forward, backward): DualPipe-V's overlapped pairs, each asked of its own rank,
    and the pair's time is what the rank spends on it."""
    from minipipe.schedule.replay import replay

    s = make_schedule("dualpipe-v", 2, 4)
    asked = []

    def pair(rank, f, b):
        asked.append((rank, s.placement[f.stage], s.placement[b.stage]))
        return 10.0 * (rank + 1)

    times = replay(s, pair=pair)
    assert asked and all(rank == fr == br for rank, fr, br in asked)
    for r, row in enumerate(times):
        assert row[-1][1] >= 10.0 * (r + 1)  # at least one pair of that rank's length


@pytest.mark.parametrize(("f", "b", "parts"), [(1.0, 3.0, (2.0, 6.0)), (0.0, 0.0, (4.0, 4.0))])
def test_an_overlapped_pair_is_shown_as_its_forward_then_its_backward_each_its_share(f, b, parts):
    """A pair of 8 is split by the two ops' own times (1 and 3: 2 then 6), in halves where both are 0."""
    from minipipe.schedule.replay import replay

    s = make_schedule("dualpipe-v", 2, 4)
    times = replay(s, lambda r, a: f if a.op == "F" else b, pair=lambda r, fw, bw: 8.0)
    assert s.pair_starts
    for r, i in s.pair_starts:
        (start, middle), (middle_again, end) = times[r][i], times[r][i + 1]
        assert (middle - start, middle_again, end - middle) == (parts[0], middle, parts[1])
