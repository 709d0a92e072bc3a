"""Lesson 10's pictures, checked as data: f and g talk where Megatron's operators talk, and the
bucket figure draws each gradient all-reduce at the trace's own times."""

import plotly.graph_objects as go
import pytest

from minipipe import Action, Event, Trace, make_schedule
from minipipe.schedule.ops import OPS
from minipipe.trace import CollectiveEvent
from minipipe.traffic import TrafficKind, ring_bytes
from minipipe.viz.buckets import backward_end, bucket_overlap, bucket_talks
from minipipe.viz.megatron import f_and_g

TP, DP = TrafficKind.TP_ALL_REDUCE, TrafficKind.DP_ALL_REDUCE


def valid(fig: go.Figure) -> go.Figure:
    return go.Figure(fig.to_dict())  # raises if plotly rejects any property


# -- f and g ---------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [1, 2, 4])
def test_g_talks_forward_and_f_backward(t):
    fig = valid(f_and_g(t, (8, 64), (256 // t, 64), (64, 256 // t), 2048))
    named = {a.name: a.text for a in fig.layout.annotations if a.name and not a.name.startswith("arrow")}
    assert set(named) == {"f forward identity", "g forward all-reduce", "f backward all-reduce", "g backward identity"}
    sent = ring_bytes(TP, 2048, t)
    for name in ("g forward all-reduce", "f backward all-reduce"):
        assert (
            "2.0 KiB" in named[name]
            and (f"{sent / 1024:,.1f} KiB" if sent >= 1024 else f"{sent:,.0f} bytes") in named[name]
        )
    filled = [s for s in fig.layout.shapes if s.fillcolor == TP.colour]
    assert len(filled) == 2  # one all-reduce per direction, nothing else purple
    forward_top = max(s.y1 for s in fig.layout.shapes if s.fillcolor == OPS["F"].colour)
    g_forward, f_backward = sorted(filled, key=lambda s: s.y0)
    assert g_forward.y1 <= forward_top + 0.1 < f_backward.y0  # g in the forward panel, f in the backward one
    assert g_forward.x0 > f_backward.x0  # g after the lanes, f before them


@pytest.mark.parametrize("t", [1, 3])
def test_every_rank_has_its_three_pieces_in_each_direction(t):
    fig = f_and_g(t, (4, 6), (2, 6), (6, 2), 96)
    for op in "FB":
        assert sum(s.fillcolor == OPS[op].colour for s in fig.layout.shapes) == 3 * t
    lane_text = [a.text for a in fig.layout.annotations if a.text and a.text.startswith("rank ")]
    assert sorted({text.split(":")[0] for text in lane_text}) == [f"rank {i}" for i in range(t)]
    assert all("2×6" in text for text in lane_text)  # the fc shard's shape, as given


def test_arrows_run_right_forward_and_left_backward():
    fig = f_and_g(2, (8, 64), (128, 64), (64, 128), 2048)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    forward = [a for a in arrows if a.name == "arrow forward"]
    backward = [a for a in arrows if a.name == "arrow backward"]
    assert len(forward) == len(backward) == 2 * 4 + 2  # 4 links per lane, x into f, g out to y
    assert all(a.x > a.ax for a in forward) and all(a.x < a.ax for a in backward)


def test_f_and_g_refuses_no_ranks():
    with pytest.raises(ValueError, match="tensor-parallel ranks"):
        f_and_g(0, (8, 64), (64, 64), (64, 64), 2048)


# -- buckets ----------------------------------------------------------------------------------
def dp_step(t0: float = 100.0, split: bool = False) -> Trace:
    """One rank, one stage, two micro-batches; three buckets launched during the last backward."""
    schedule = make_schedule("1f1b", 1, 2)
    acts = [Action("F", 0, 0), Action("B", 0, 0), Action("F", 0, 1), Action("B", 0, 1)]
    events = [Event(0, a, t0 + 2 * i, t0 + 2 * i + 2) for i, a in enumerate(acts)]
    if split:  # the last backward's weight half ends last
        events.append(Event(0, Action("W", 0, 1), t0 + 8, t0 + 9))
    talks = [CollectiveEvent(0, DP, t0 + 6.5 + k, t0 + 12 + k, 1000.0 * (k + 1)) for k in (2, 0, 1)]
    talks.append(CollectiveEvent(0, TP, t0 + 1, t0 + 1.5, 10.0))  # not a gradient bucket
    return Trace(schedule, events, source="measured", collectives=talks)


def test_buckets_are_the_dp_all_reduces_in_launch_order():
    trace = dp_step()
    assert [c.nbytes for c in bucket_talks(trace)] == [1000.0, 2000.0, 3000.0]
    assert backward_end(trace) == 108.0
    assert backward_end(dp_step(split=True)) == 109.0


def test_each_bucket_is_drawn_from_launch_to_found_complete():
    on, off = dp_step(100.0), dp_step(50.0)
    labels = ["bucket 0: layer 5", "bucket 1: layer 4", "bucket 2: layers 0–3"]
    fig = valid(bucket_overlap({"on": on, "off": off}, labels))
    strips = [d for d in fig.data if d.name and d.name.startswith(str(DP))]
    assert len(strips) == 2
    for strip, trace in zip(strips, (on, off)):
        talks = bucket_talks(trace)
        assert list(strip.y) == labels
        assert list(strip.base) == pytest.approx([c.start - trace.start for c in talks])
        assert list(strip.x) == pytest.approx([c.end - c.start for c in talks])
    compute = [d for d in fig.data if d.y and d.y[0] == "rank 0: compute"]
    assert len(compute) == 2 * len(on.events)
    ends = [s.x0 for s in fig.layout.shapes if s.type == "line"]
    assert ends == pytest.approx([8.0, 8.0])  # the last backward's end, from each step's start
    assert fig.layout.xaxis2.title.text == "time from the step's start (ms)"


def test_bucket_overlap_says_what_is_missing():
    with pytest.raises(ValueError, match="one per bucket"):
        bucket_overlap({"on": dp_step()}, ["only one"])
    lonely = Trace(make_schedule("1f1b", 1, 2), dp_step().events, source="measured")
    with pytest.raises(ValueError, match="dp > 1"):
        bucket_overlap({"no dp": lonely})
    with pytest.raises(ValueError, match="at least one trace"):
        bucket_overlap({})
    forward_only = Trace(make_schedule("1f1b", 1, 2), [Event(0, Action("F", 0, 0), 0, 1)], source="measured")
    with pytest.raises(ValueError, match="no backward"):
        backward_end(forward_only)
