"""The message plan: every cross-rank dependency becomes one send and one receive, in an order
both ranks of a pair agree on (NCCL), or in two lanes that gloo may match by tag."""

import pytest

from minipipe import make_schedule
from minipipe.engine.comm import message_plan

SCHEDULES = [
    ("gpipe", 2, 4, 1),
    ("1f1b", 4, 8, 1),
    ("interleaved", 2, 4, 2),
    ("interleaved", 4, 8, 2),
    ("zb-h1", 4, 8, 1),
    ("naive", 3, 2, 1),
]


@pytest.mark.parametrize("kind,p,m,v", SCHEDULES)
def test_issue_order_is_mirrored_between_every_pair(kind, p, m, v):
    s = make_schedule(kind, p, m, v)
    plan = message_plan(s, in_order=True)
    flip = {"send": "recv", "recv": "send"}
    for rank in range(p):
        for peer, lanes in plan[rank].items():
            assert len(lanes) == 1
            mirrored = [(flip[kind_], producer) for kind_, producer in plan[peer][rank][0]]
            assert lanes[0] == mirrored, f"ranks {rank} and {peer} disagree on the order of their messages"


@pytest.mark.parametrize("kind,p,m,v", SCHEDULES)
def test_tag_lanes_hold_the_same_messages_split_by_kind(kind, p, m, v):
    s = make_schedule(kind, p, m, v)
    ordered, lanes = message_plan(s, in_order=True), message_plan(s, in_order=False)
    expected = {(src, dst, producer) for producer, src, dst in s.messages}
    seen = set()
    for rank in range(p):
        assert set(lanes[rank]) == set(ordered[rank])
        for peer, (sends, recvs) in lanes[rank].items():
            assert {k for k, _ in sends} <= {"send"} and {k for k, _ in recvs} <= {"recv"}
            in_order = ordered[rank][peer][0]
            assert sends == [op for op in in_order if op[0] == "send"]  # each lane keeps its order
            assert recvs == [op for op in in_order if op[0] == "recv"]
            seen |= {(rank, peer, producer) for _, producer in sends}
    assert seen == expected


def test_a_failed_wait_says_why_by_how_long_it_took_not_by_torchs_text():
    import time

    from minipipe.engine.workers import _report
    from minipipe.parallel.errors import CommError, failure_reason

    now = time.monotonic()
    assert failure_reason(now - 5.0, timeout=5.0) == "timeout"  # it ran out its bound: the peer is stuck
    assert failure_reason(now - 0.1, timeout=5.0) == "lost"  # it gave up early: the peer went away
    assert failure_reason(now, timeout=None) == "failed"  # the bound is the process group's own
    with pytest.raises(ValueError, match="unknown CommError reason"):
        CommError("x", reason="Timed out")
    # what the launcher is told: a verdict, or an error that may come from a peer's death
    assert _report(CommError("late", 1, "timeout"), 0, 0, None)["peer_may_have_died"] is False
    assert _report(CommError("gone", 1, "lost"), 0, 0, None)["peer_may_have_died"] is True
    assert _report(RuntimeError("Connection closed by peer"), 0, 0, None)["peer_may_have_died"] is True
    assert _report(ValueError("bad shape"), 0, 0, None)["peer_may_have_died"] is False
    assert _report(CommError("a: b", 1, "timeout"), 0, 0, None)["message"] == "a: b"


def _offsets(rank, world, boot_keys):
    from minipipe.engine import comm

    comm._boot_key = lambda: boot_keys[rank]  # what each rank's machine says it booted as
    return comm.clock_offset(rank, world)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_ranks_on_rank_0s_machine_read_its_clock_as_it_is_and_others_are_estimated():
    from minipipe.engine.comm import _boot_key
    from tests.support.spawn import run_ranks

    here = _boot_key()
    assert here >= 0 and here == _boot_key()  # Linux: one boot id, read the same each time
    same = run_ranks(_offsets, 3, [here, here, here])
    assert same == [0.0, 0.0, 0.0]  # exact, not an estimate near 0
    # rank 2 "on another machine": its offset is estimated (this machine's clocks agree, so it is
    # small but, from the round trip's noise, almost never exactly 0); rank 1 still reads 0
    mixed = run_ranks(_offsets, 3, [here, here, here + 1])
    assert mixed[:2] == [0.0, 0.0] and abs(mixed[2]) < 0.05 and mixed[2] != 0.0
    unknown = run_ranks(_offsets, 2, [-1.0, -1.0])  # no boot id to compare: estimated
    assert unknown[0] == 0.0 and abs(unknown[1]) < 0.05 and unknown[1] != 0.0
