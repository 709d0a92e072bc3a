"""What a Trace writes for people and for other tools: the Chrome trace a viewer (Perfetto,
chrome://tracing) opens, the summary's per-rank lines and the terminal timeline, checked on a
measured-looking trace built by hand so that every number is known."""

import dataclasses
import json

from minipipe import Action, make_schedule
from minipipe.trace import CollectiveEvent, Event, Trace, Wait
from minipipe.traffic import TrafficKind


def by_hand() -> Trace:
    """gpipe p=2 m=1: rank 0 runs F0 [0, 1) and B0 [4, 6); rank 1 waits for F0 [0, 1), runs F0 [1, 2) and
    B0 [2, 4); rank 0 then waits on the send's completion [6, 7); both all-reduce [7, 9) sending 500 B."""
    s = make_schedule("gpipe", 2, 1)
    f0, f1, b0, b1 = Action("F", 0, 0), Action("F", 1, 0), Action("B", 0, 0), Action("B", 1, 0)
    events = [Event(0, f0, 0.0, 1.0), Event(1, f1, 1.0, 2.0), Event(1, b1, 2.0, 4.0), Event(0, b0, 4.0, 6.0)]
    waits = [Wait(1, "recv", f0, 0.0, 1.0, peer=0), Wait(0, "send", None, 6.0, 7.0)]
    dp = TrafficKind.DP_ALL_REDUCE
    collectives = [CollectiveEvent(r, dp, 7.0, 9.0, 500.0) for r in (0, 1)]
    return Trace(s, events, source="measured", waits=waits, bytes_sent=[1024, 2048], collectives=collectives)


def test_the_chrome_trace_is_what_a_viewer_reads_in_microseconds(tmp_path):
    trace = by_hand()
    doc = trace.to_chrome(str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text()) == doc  # the file holds what was returned
    assert doc["displayTimeUnit"] == "ms"
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert meta == [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "minipipe measured"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "rank 1"}},
    ]
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all({"name", "cat", "pid", "tid", "ts", "dur"} <= set(e) and e["pid"] == 0 for e in spans)
    actions = [(e["name"], e["cat"], e["tid"], e["ts"], e["dur"]) for e in spans if e["cat"] in ("F", "B")]
    assert actions == [("0F0", "F", 0, 0.0, 1000.0), ("1F0", "F", 1, 1000.0, 1000.0),
                       ("1B0", "B", 1, 2000.0, 2000.0), ("0B0", "B", 0, 4000.0, 2000.0)]  # fmt: skip
    assert [e["args"] for e in spans if e["cat"] == "B"] == [
        {"stage": 1, "microbatch": 0},
        {"stage": 0, "microbatch": 0},
    ]
    waits = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in spans if e["cat"] == "wait"]
    assert waits == [("recv 0F0 from rank 0", 1, 0.0, 1000.0), ("send completion", 0, 6000.0, 1000.0)]
    talk = [(e["name"], e["tid"], e["ts"], e["dur"], e["args"]) for e in spans if e["cat"] == "collective"]
    assert talk == [(str(TrafficKind.DP_ALL_REDUCE), r, 7000.0, 2000.0, {"bytes": 500.0}) for r in (0, 1)]


def test_a_trace_in_microseconds_is_written_as_it_is():
    trace = by_hand()
    trace.unit = "us"
    spans = [e for e in trace.to_chrome()["traceEvents"] if e["ph"] == "X" and e["cat"] == "B"]
    assert [(e["ts"], e["dur"]) for e in spans] == [(2.0, 2.0), (4.0, 2.0)]


def test_the_summary_says_what_each_rank_sent_only_when_it_was_counted():
    lines = by_hand().summary().splitlines()
    assert lines[0] == "measured gpipe  p=2 m=1 v=1"
    assert lines[2].endswith("peak in-flight 1  sent 1,024 B") and lines[3].endswith("sent 2,048 B")
    uncounted = dataclasses.replace(by_hand(), bytes_sent=[]).summary().splitlines()
    assert [line.endswith("peak in-flight 1") for line in uncounted[2:]] == [True, True]


def test_the_terminal_timeline_draws_one_row_per_rank_to_scale():
    rows = by_hand().ascii(width=9).splitlines()
    # 9 ms over 9 columns, one a millisecond: rank 0's F0 at 0, its B0 at 4 and 5; rank 1's F0 at 1, B0 at 2, 3
    assert rows[:2] == ["rank 0 |0   aa   |", "rank 1 | 0aa     |"]
    assert rows[2:] == ["F: 0-9 (micro-batch mod 10)   B: a-j   I: k-t   W: A-J   blank: idle"]
    wide = by_hand().ascii().splitlines()  # a terminal's 100 columns unless told: 9 ms in 100, one column each 0.09 ms
    assert [len(row) for row in wide[:2]] == [len("rank 0 ||") + 100] * 2 and wide[0][8:].startswith("0" * 11 + " ")


def test_each_ops_glyph_counts_its_micro_batches_from_its_letter_mod_10():
    from minipipe import Costs, Schedule, simulate
    from minipipe.schedule.ops import B, F, I, W

    split = Schedule.custom([[op for mb in range(12) for op in (F(0, mb), I(0, mb), W(0, mb))]])
    whole = Schedule.custom([[op for mb in range(12) for op in (F(0, mb), B(0, mb))]])
    costs = Costs(forward=1, backward=2, weight=1)
    assert simulate(split, costs).ascii(width=36).splitlines()[0] == "rank 0 |0kA1lB2mC3nD4oE5pF6qG7rH8sI9tJ0kA1lB|"
    assert simulate(whole, costs).ascii(width=36).splitlines()[0] == "rank 0 |0aa1bb2cc3dd4ee5ff6gg7hh8ii9jj0aa1bb|"


def test_gaps_are_the_idle_longer_than_min_length_the_step_s_end_included():
    """GPipe p=2 m=2, f=1, b=2: rank 0 idle [2, 5) and busy to the end; rank 1 idle [0, 1) and [7, 9) at the end.
    No gap of length 0 where a rank works to the end; one exactly min_length long is left out, a longer one kept."""
    from minipipe import Costs, simulate

    trace = simulate(make_schedule("gpipe", 2, 2), Costs(forward=1.0, backward=2.0))
    assert trace.makespan == 9.0
    assert trace.gaps(0) == [(2.0, 5.0)] and trace.gaps(1) == [(0.0, 1.0), (7.0, 9.0)]
    assert trace.gaps(1, min_length=2.0) == [] and trace.gaps(1, min_length=1.9) == [(7.0, 9.0)]
    assert trace.gaps(0, min_length=3.0) == [] and trace.gaps(0, min_length=2.9) == [(2.0, 5.0)]


def test_wait_time_is_each_ranks_time_spent_waiting():
    trace = by_hand()
    assert trace.wait_time(0) == 1.0 and trace.wait_time(1) == 1.0  # the send's [6, 7); the receive's [0, 1)
    from dataclasses import replace

    from minipipe.trace import Wait

    longer = replace(trace, waits=[*trace.waits, Wait(1, "recv", None, 7.0, 9.5)])  # rank 1's alone
    assert longer.wait_time(0) == 1.0 and longer.wait_time(1) == 3.5


def test_the_summary_breaks_a_ranks_bytes_down_by_kind_once_a_collective_sent_some():
    pp, dp = TrafficKind.PP_ACTIVATION, TrafficKind.DP_ALL_REDUCE
    traffic = [{pp: 1024.0, dp: 500.0}, {pp: 0.0, TrafficKind.PP_GRADIENT: 2048.0}]
    lines = dataclasses.replace(by_hand(), traffic=traffic).summary().splitlines()
    assert lines[2].endswith("sent 1,024 B (pp activation 1,024, dp all-reduce 500)")
    assert lines[3].endswith("sent 2,048 B")  # messages alone: the total says it all
