"""Hand-broken schedules: each failure mode is rejected with a reason and a marked grid."""

import pytest

from minipipe import Schedule, make_schedule
from minipipe.schedule.validate import ScheduleError, validate

GOOD = ["0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"]


def broken(rank0: str = GOOD[0], rank1: str = GOOD[1], **kw) -> Schedule:
    return Schedule.custom([rank0.split(), rank1.split()], **kw)


def rejected(schedule: Schedule) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        validate(schedule)
    assert isinstance(info.value, ValueError)
    return info.value


def test_the_good_schedule_is_accepted():
    assert validate(broken()).actions == make_schedule("1f1b", 2, 4).actions


def test_swapped_actions_on_one_rank():
    error = rejected(broken(rank0="0B0 0F0 0F1 0F2 0F3 0B1 0B2 0B3"))
    assert "rank 0 runs 0B0 before 0F0" in error.reason
    assert "move 0F0 before 0B0" in error.reason
    assert ">0B0<" in str(error) and ">0F0<" in str(error)


def test_missing_backward():
    error = rejected(broken(rank0="0F0 0F1 0B0 0F2 0B1 0F3 0B2", m=4))
    assert "0B3 is missing" in error.reason and "add it to rank 0's list" in error.reason


def test_backward_on_the_wrong_rank():
    error = rejected(broken(rank0=GOOD[0] + " 1B3", rank1="1F0 1B0 1F1 1B1 1F2 1B2 1F3"))
    assert "rank 0 runs 1B3, but stage 1 lives on rank 1" in error.reason
    assert ">1B3<" in str(error)


def test_duplicate_action():
    error = rejected(broken(rank0=GOOD[0] + " 0B3"))
    assert "0B3 appears twice" in error.reason
    assert str(error).count(">0B3<") == 2


def test_cross_rank_cycle_names_both_ranks_and_the_data():
    # rank 0 wants 0B0's gradient before it sends 0F1; rank 1 wants 0F1 before it runs 1B0
    error = rejected(broken(rank0="0F0 0B0 0F1 0F2 0F3 0B1 0B2 0B3", rank1="1F0 1F1 1B0 1B1 1F2 1B2 1F3 1B3"))
    assert error.reason.startswith("deadlock")
    assert "rank 0 waits for 1B0 (to run 0B0), which rank 1 only runs after 1F1" in error.reason
    assert "rank 1 waits for 0F1 (to run 1F1), which rank 0 only runs after 0B0" in error.reason
    assert ">0B0<" in str(error) and ">1F1<" in str(error)


def test_three_rank_cycle():
    s = Schedule.custom(
        [
            "0F0 0F1 0B0 0B1".split(),
            "1F0 1B0 1F1 1B1".split(),  # 1B0 needs 2B0, but rank 2 waits for 1F1 first
            "2F0 2F1 2B0 2B1".split(),
        ]
    )
    error = rejected(s)
    assert "rank 2 waits for 1F1" in error.reason and "rank 1 waits for 2B0" in error.reason


def test_out_of_range_action():
    error = rejected(broken(rank0=GOOD[0] + " 0F9", m=4))
    assert "outside the schedule" in error.reason


def test_split_backward_needs_its_i_and_its_w():
    assert "0W1 is missing" in rejected(Schedule.custom(["0F0 0I0 0W0 0F1 0I1".split()])).reason
    assert "0I1 is missing" in rejected(Schedule.custom(["0F0 0I0 0W0 0F1 0W1".split()])).reason
    assert validate(Schedule.custom(["0F0 0I0 0W0 0F1 0I1 0W1".split()])).splits_backward()


def test_a_backward_is_either_whole_or_split_not_both():
    error = rejected(Schedule.custom(["0F0 0B0 0I0 0W0".split()]))
    assert "keep either B, or I and W" in error.reason
    assert error.marked == [(0, 1), (0, 2), (0, 3)]
    mixed = validate(Schedule.custom(["0F0 0F1 0B0 0I1 0W1".split()]))  # per micro-batch, either form
    assert mixed.splits_backward(0) and mixed.gradient_op(0, 0) == "B" and mixed.gradient_op(0, 1) == "I"


def test_weight_gradient_before_its_input_gradient_is_rejected():
    s = Schedule.custom(["0F0 0W0 0I0".split()])
    assert "rank 0 runs 0W0 before 0I0" in rejected(s).reason


def test_forward_only_schedules_validate():
    s = validate(Schedule.custom(["0F0 0F1".split(), "1F0 1F1".split()]))
    assert s.forward_only and not make_schedule("1f1b", 2, 2).forward_only


def test_messages_are_derived_from_the_schedule():
    s = make_schedule("1f1b", 2, 3)
    msgs = s.messages
    # every micro-batch: one activation forward (0F -> rank 1), one gradient back (1B -> rank 0)
    assert sorted(map(str, (d for d, _, _ in msgs))) == ["0F0", "0F1", "0F2", "1B0", "1B1", "1B2"]
    assert all(src != dst for _, src, dst in msgs)
    assert make_schedule("interleaved", 1, 2, 2).messages == ()  # one rank: nothing crosses
