"""The figures, checked as data (no browser): bars are the trace's actions at the trace's times,
the animation's frames end at the full timeline, memory and comparison views read the same trace."""

import math

import plotly.graph_objects as go
import pytest

from minipipe import Action, Costs, Event, Schedule, Trace, Wait, make_schedule, simulate, theory
from minipipe.trace import CollectiveEvent
from minipipe.traffic import KINDS, TrafficKind
from minipipe.viz import animate, compare, memory, timeline
from minipipe.viz.bars import CHUNK_PATTERN, OP_COLOR, chunk_of
from minipipe.viz.style import INK, OKABE_ITO
from minipipe.viz.timeline import extent, frame_times, phase, stats_text

CASES = [
    ("naive", 3, 2, 1),
    ("gpipe", 4, 8, 1),
    ("1f1b", 4, 8, 1),
    ("1f1b", 8, 32, 1),
    ("interleaved", 4, 8, 2),
    ("interleaved", 2, 4, 4),
]


def action_traces(fig):
    return [t for t in fig.data if t.meta and t.meta["kind"] == "action"]


def bars(fig):
    """(rank, action, start, end) of every action bar in the figure, from its drawn extent."""
    out = []
    for t in action_traces(fig):
        for ident, y, base, x in zip(t.ids, t.y, t.base, t.x):
            rank, action = ident.split(":")
            assert int(rank) == y
            out.append((y, action, base, base + x))
    return out


def events_of(trace):
    return [(e.rank, str(e.action), e.start - trace.start, e.end - trace.start) for e in trace.events]


def same_bars(got, want):
    assert len(got) == len(want)
    got, want = sorted(got), sorted(want)
    for g, w in zip(got, want):
        assert g[:2] == w[:2]
        assert g[2] == pytest.approx(w[2], abs=1e-9) and g[3] == pytest.approx(w[3], abs=1e-9)


def measured_like(trace, offset=1000.0):
    """A simulated trace disguised as a measurement: shifted start, and some comm waits."""
    events = [Event(e.rank, e.action, e.start + offset, e.end + offset) for e in trace.events]
    waits = [Wait(r, "recv", Action("F", r - 1, 0), offset, offset + 0.5 * r, r - 1) for r in range(1, trace.p)]
    return Trace(trace.schedule, events, source="measured", waits=waits)


@pytest.mark.parametrize("kind,p,m,v", CASES)
def test_one_bar_per_action_at_the_event_times(kind, p, m, v):
    trace = simulate(make_schedule(kind, p, m, v), Costs(forward=1.0, backward=2.5, latency=0.1))
    fig = timeline(trace)
    assert sum(len(t.x) for t in action_traces(fig)) == len(trace.events) == 2 * p * v * m
    same_bars(bars(fig), events_of(trace))
    for t in action_traces(fig):  # the label on a bar is its micro-batch
        assert list(t.text) == [ident.split(":")[1].split(t.meta["op"])[1] for ident in t.ids]


def test_bars_are_coloured_by_op_and_patterned_by_chunk():
    trace = simulate(make_schedule("interleaved", 4, 8, 2))
    fig = timeline(trace)
    chunks = chunk_of(trace)
    assert chunks == {s: s // 4 for s in range(8)}  # round robin: chunk = stage // p
    seen = set()
    for t in action_traces(fig):
        op, chunk = t.meta["op"], t.meta["chunk"]
        assert t.marker.color == OP_COLOR[op]
        assert t.marker.pattern.shape == CHUNK_PATTERN[chunk]
        for ident in t.ids:
            stage = int(ident.split(":")[1].split(op)[0])
            assert chunks[stage] == chunk
        seen.add((op, chunk))
    assert seen == {("F", 0), ("F", 1), ("B", 0), ("B", 1)}
    assert len({OP_COLOR[op] for op in "FBIW"}) == 4
    assert set(OP_COLOR.values()) <= set(OKABE_ITO.values())  # the colour-blind-safe palette


def test_split_backward_schedule_gets_i_and_w_bars():
    schedule = Schedule.custom([["0F0", "0I0", "0W0"], ["1F0", "1I0", "1W0"]])
    fig = timeline(simulate(schedule))
    ops = {t.meta["op"]: len(t.x) for t in action_traces(fig)}
    assert ops == {"F": 2, "I": 2, "W": 2}


def test_title_gives_makespan_bubble_textbook_and_peak():
    trace = simulate(make_schedule("1f1b", 4, 8))
    title = timeline(trace).layout.title.text
    assert f"makespan {trace.makespan:.4g} ms" in title
    assert f"bubble {100 * trace.bubble():.1f}%" in title
    assert f"(textbook {100 * theory.bubble_fraction('1f1b', 4, 8):.1f}%)" in title
    assert "peak in-flight 4 micro-batches (rank 0)" in title
    assert "textbook" not in timeline(trace, theory=False).layout.title.text
    custom = simulate(Schedule.custom([["0F0", "0B0"], ["1F0", "1B0"]]))
    assert "textbook" not in stats_text(custom)  # no formula for a hand-written schedule


def test_ranks_are_rows_top_down_with_their_idle_share():
    trace = simulate(make_schedule("gpipe", 3, 4), Costs(stage_scale={1: 2.0}))
    y = timeline(trace).layout.yaxis
    assert list(y.tickvals) == [0, 1, 2] and list(y.range) == [2.5, -0.5]  # rank 0 on top
    for label, idle in zip(y.ticktext, trace.bubble_per_rank()):
        assert label.endswith(f"idle {100 * idle:.0f}%")
    assert timeline(trace).layout.xaxis.range[1] >= trace.makespan


def test_measured_trace_same_code_path_with_waits():
    sim = simulate(make_schedule("1f1b", 3, 4))
    measured = measured_like(sim)
    fig = timeline(measured)
    same_bars(bars(fig), events_of(sim))  # drawn from the step's own start
    waits = [t for t in fig.data if t.meta["kind"] == "wait"]
    assert len(waits) == 1 and len(waits[0].x) == len(measured.waits)
    assert list(waits[0].base) == [0.0, 0.0] and list(waits[0].x) == [0.5, 1.0]
    assert waits[0].visible is True
    assert timeline(measured, show_waits=False).data[-1].visible == "legendonly"
    assert "measured 1f1b" in fig.layout.title.text
    assert not [t for t in timeline(sim).data if t.meta["kind"] == "wait"]


def test_theme_is_transparent_with_grey_ink():
    layout = timeline(simulate(make_schedule("1f1b", 2, 2))).layout
    assert layout.template.layout.paper_bgcolor == "rgba(0,0,0,0)"
    assert layout.template.layout.plot_bgcolor == "rgba(0,0,0,0)"
    assert layout.template.layout.font.color == INK


@pytest.mark.parametrize(
    "make",
    [
        lambda t: timeline(t),
        lambda t: animate(t, frames=5),
        lambda t: memory([t, t]),
        lambda t: compare([t, t]),
        lambda t: timeline(measured_like(t)),
        lambda t: animate(measured_like(t), frames=3),
    ],
)
def test_figures_pass_plotly_validation(make):
    """The figures are built unvalidated (for speed); plotly must accept every property."""
    fig = make(simulate(make_schedule("interleaved", 2, 4, 2)))
    go.Figure(fig.to_dict())  # raises on any invalid property


# -- the animation --------------------------------------------------------------------------
@pytest.mark.parametrize("kind,p,m,v", CASES)
def test_animation_frames_end_at_the_full_timeline(kind, p, m, v):
    trace = simulate(make_schedule(kind, p, m, v))
    full, fig = timeline(trace), animate(trace)
    assert len(fig.frames) == 40  # fixed, whatever the size
    assert len(fig.layout.sliders[0].steps) == 40
    last = fig.frames[-1]
    assert list(last.traces) == list(range(len(full.data)))
    for frame_bar, bar in zip(last.data, full.data):
        assert list(frame_bar.x) == list(bar.x)
    for start_bar, bar in zip(fig.data, full.data):  # the start: nothing drawn yet
        assert list(start_bar.base) == list(bar.base)
        assert all(x is None for x in start_bar.x)


def test_each_frame_reveals_the_started_actions_up_to_its_time():
    trace = simulate(make_schedule("1f1b", 4, 8))
    fig, full = animate(trace, frames=12), timeline(trace)
    times = frame_times(trace, 12)
    drawn_before = -1
    for frame, t in zip(fig.frames, times):
        drawn = 0
        for bar, full_bar, frame_bar in zip(fig.data, full.data, frame.data):
            for base, full_x, x in zip(bar.base, full_bar.x, frame_bar.x):
                if base < t:
                    assert x == pytest.approx(min(full_x, t - base))  # partly drawn up to t
                    drawn += 1
                else:
                    assert x is None
        assert drawn >= drawn_before  # the picture only grows
        drawn_before = drawn
        assert frame.layout.shapes[0].x0 == pytest.approx(t)  # the time cursor
    assert drawn == len(trace.events)


def test_animation_controls_and_phases():
    trace = simulate(make_schedule("1f1b", 4, 8))
    fig = animate(trace, frames=10, frame_ms=50)
    play, pause, restart = fig.layout.updatemenus[0].buttons
    assert play.method == "animate" and play.args[0] is None and play.args[1]["frame"]["duration"] == 50
    assert list(pause.args[0]) == [None] and list(restart.args[0]) == ["0"]
    assert [list(s.args[0]) for s in fig.layout.sliders[0].steps] == [[str(k)] for k in range(10)]
    # 1F1B, p=4, f=1, b=2: rank 3 starts at t=3, rank 3 finishes its last backward at t=27
    assert phase(trace, 1.5) == "pipeline filling"
    assert phase(trace, 10) == "steady state"
    assert phase(trace, 30) == "pipeline draining"
    assert phase(trace, 0) == "start" and phase(trace, trace.makespan) == "done"
    assert "pipeline filling" in animate(trace, frames=34).frames[2].layout.annotations[0].text
    with pytest.raises(ValueError, match="at least 2 frames"):
        animate(trace, frames=1)


def test_animation_of_a_big_trace_stays_small():
    trace = simulate(make_schedule("interleaved", 8, 32, 4))
    fig = animate(trace, frames=30)
    assert len(fig.frames) == 30
    # a frame only carries the bar widths: no labels, hover texts or ids repeated 30 times
    assert set(fig.frames[5].data[0].to_plotly_json()) == {"type", "x"}


# -- memory and comparison ------------------------------------------------------------------
def test_memory_view_shows_gpipe_holding_m_and_1f1b_p_minus_rank():
    p, m = 4, 8
    gp, ofob = simulate(make_schedule("gpipe", p, m)), simulate(make_schedule("1f1b", p, m))
    fig = memory([gp, ofob])
    assert len(fig.data) == 2 * p
    # one column per trace, one row per rank: the curves come column by column
    for r in range(p):
        assert max(fig.data[r].y) == m == gp.peak_inflight()[r]
        assert max(fig.data[p + r].y) == p - r == ofob.peak_inflight()[r]
    # the step line ends at the makespan, and every step matches the trace's curve
    curve = dict((t - gp.start, n) for t, n in gp.inflight_curve(0))
    assert list(fig.data[0].x)[:-1] == list(curve) and list(fig.data[0].y)[:-1] == list(curve.values())
    assert fig.data[0].x[-1] == gp.makespan
    assert one_time_axis(fig)
    notes = [a.text for a in fig.layout.annotations]
    assert "peak 8" in notes and "peak 1" in notes


def test_comparison_shares_one_time_axis():
    kinds = [("naive", 1), ("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]
    traces = [simulate(make_schedule(k, 4, 8, v)) for k, v in kinds]
    fig = compare(traces)
    assert sum(len(t.x) for t in action_traces(fig)) == sum(len(t.events) for t in traces)
    drawn = bars_with_axis(fig)
    for i, trace in enumerate(traces, 1):
        axis = "x" if i == 1 else f"x{i}"
        same_bars([b[1:] for b in drawn if b[0] == axis], events_of(trace))
    longest = max(t.makespan for t in traces)
    for key in [k for k in fig.layout if k.startswith("xaxis")]:
        assert fig.layout[key].range[1] >= longest  # same scale for every row
    assert one_time_axis(fig)
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert len(names) == len(set(names))  # one legend entry per group
    titles = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("simulated naive") and "bubble 75.0%" in t for t in titles)


def one_time_axis(fig) -> bool:
    """Every x axis but one follows that one (plotly's `matches`): zooming one zooms all."""
    matches = [fig.layout[k].matches for k in fig.layout if k.startswith("xaxis")]
    free = [k for k in fig.layout if k.startswith("xaxis") and fig.layout[k].matches is None]
    return len(free) == 1 and set(matches) - {None} == {free[0].replace("axis", "")}


def bars_with_axis(fig):
    out = []
    for t in action_traces(fig):
        for ident, y, base, x in zip(t.ids, t.y, t.base, t.x):
            out.append((t.xaxis, y, ident.split(":")[1], base, base + x))
    return out


def test_empty_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="at least one trace"):
        compare([])
    with pytest.raises(ValueError, match="at least one trace"):
        memory([])


def test_makespan_of_the_drawn_bars_is_the_traces():
    trace = simulate(make_schedule("1f1b", 3, 6), Costs(latency=0.25))
    ends = [b[3] for b in bars(timeline(trace))]
    assert math.isclose(max(ends), trace.makespan)


# -- collectives ----------------------------------------------------------------------------
def with_collectives(trace, offset=1000.0):
    """A measured-looking trace with collectives: one tp all-reduce inside each rank's first action,
    and a dp all-reduce on rank 0 that ends after the last action (a gradient bucket after backward)."""
    measured = measured_like(trace, offset)
    talks = [
        CollectiveEvent(e.rank, TrafficKind.TP_ALL_REDUCE, e.start + 0.25, e.start + 0.5, 96.0)
        for e in (measured.rank_events(r)[0] for r in range(trace.p))
    ]
    end = measured.start + measured.makespan
    talks.append(CollectiveEvent(0, TrafficKind.DP_ALL_REDUCE, end - 1.0, end + 2.0, 4096.0))
    measured.collectives = talks
    return measured


def test_collectives_are_thin_strips_in_colours_of_their_own():
    trace = with_collectives(simulate(make_schedule("1f1b", 3, 4)))
    fig = timeline(trace)
    strips = {t.name: t for t in fig.data if t.meta["kind"] == "collective"}
    assert list(strips) == ["tp all-reduce", "dp all-reduce"]  # the kinds present, in a fixed order
    tp, dp = strips["tp all-reduce"], strips["dp all-reduce"]
    firsts = [trace.rank_events(r)[0].start - trace.start for r in range(3)]
    assert list(tp.y) == [0, 1, 2] and list(tp.base) == pytest.approx([t + 0.25 for t in firsts])
    assert list(tp.x) == pytest.approx([0.25] * 3)
    assert list(dp.base) == [trace.makespan - 1.0] and list(dp.x) == pytest.approx([3.0])
    action_width = action_traces(fig)[0].width
    assert tp.width < action_width / 3 and tp.offset + tp.width <= action_width / 2  # inside the row, at its bottom
    colours = {tp.marker.color, dp.marker.color}
    assert colours == {TrafficKind.TP_ALL_REDUCE.colour, TrafficKind.DP_ALL_REDUCE.colour}
    collective_colours = {k.colour for k in KINDS if k.is_collective}
    assert len(collective_colours) == 4 and collective_colours <= set(OKABE_ITO.values())
    assert len({k.colour for k in KINDS}) == len(KINDS)  # every kind of traffic tellable from the others
    assert not collective_colours & set(OP_COLOR.values())  # drawn over the actions: no op's colour
    assert "4,096 bytes sent" in dp.hovertext[0]
    assert fig.layout.xaxis.range[1] >= trace.makespan + 2.0  # the all-reduce after the last action shows
    assert extent(trace) == pytest.approx(trace.makespan + 2.0)
    assert not [t for t in timeline(simulate(make_schedule("1f1b", 3, 4))).data if t.meta["kind"] == "collective"]


def test_collectives_in_comparison_and_animation():
    trace = with_collectives(simulate(make_schedule("1f1b", 2, 4)))
    fig = compare([trace, trace])
    strips = [t for t in fig.data if t.meta["kind"] == "collective"]
    assert [t.xaxis for t in strips] == ["x", "x", "x2", "x2"]
    assert [t.name for t in strips if t.showlegend] == ["tp all-reduce", "dp all-reduce"]  # one legend entry each
    assert fig.layout.xaxis.range[1] >= extent(trace)
    movie = animate(trace, frames=4)
    last = [bar.x for bar, full in zip(movie.frames[-1].data, movie.data) if full.meta["kind"] == "collective"]
    assert [list(x) for x in last] == [list(t.x) for t in timeline(trace).data if t.meta["kind"] == "collective"]
    for make in (timeline, animate, lambda t: compare([t, t])):
        go.Figure(make(trace).to_dict())  # plotly's own validation


def test_a_simulated_mesh_step_draws_its_collectives():
    from minipipe.parallel.mesh import Mesh
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Link, Network
    from minipipe.traffic import Traffic

    traffic = Traffic(
        tp=[{"F": [(TrafficKind.TP_ALL_REDUCE, 1e3)] * 2, "B": [(TrafficKind.TP_ALL_REDUCE, 1e3)] * 2}] * 2,
        grads=[[4096] * 4] * 2,
        bucket_bytes=8192,
    )
    trace = simulate_mesh(
        make_schedule("1f1b", 2, 4),
        Costs(forward=1.0, backward=2.0),
        Mesh(2, dp=2, tp=2),
        Network.uniform(Link(1e4, 0.01)),
        traffic,
    )
    drawn = {t.name: len(t.x) for t in timeline(trace).data if t.meta["kind"] == "collective"}
    counted = {}
    for c in trace.collectives:
        counted[str(c.kind)] = counted.get(str(c.kind), 0) + 1
    assert drawn == counted and drawn["tp all-reduce"] == 2 * 4 * 2 * 2 and drawn["dp all-reduce"] > 0
