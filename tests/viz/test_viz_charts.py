"""The lesson charts, checked as data: every point is the number it claims to be, and plotly
accepts every figure (re-validated from its dict)."""

import math

import plotly.graph_objects as go
import pytest

from minipipe import Costs, Event, Trace, make_schedule, simulate, theory
from minipipe.planner.presets import MODELS
from minipipe.planner.shapes import training_bytes
from minipipe.viz.charts import bubble_points, bubble_vs_m, human_bytes, memory_by_kind, owner, three_ways_to_split


def valid(fig: go.Figure) -> go.Figure:
    return go.Figure(fig.to_dict())  # raises if plotly rejects any property


def series(fig, name):
    """{x: y} of the named trace; {category: value} for horizontal bars."""
    [trace] = [t for t in fig.data if t.name == name]
    return dict(zip(trace.y, trace.x)) if trace.orientation == "h" else dict(zip(trace.x, trace.y))


def slowed(trace: Trace, factor: float) -> Trace:
    """The same events, rank 1's stretched: a trace whose bubble differs from the textbook's."""
    events = [
        Event(e.rank, e.action, e.start, e.start + (e.end - e.start) * (factor if e.rank == 1 else 1))
        for e in trace.events
    ]
    return Trace(trace.schedule, events, source="measured")


def test_bubble_vs_m_draws_both_definitions_and_the_given_points():
    ms = [1, 2, 4, 8]
    sims = [simulate(make_schedule("gpipe", 4, m)) for m in ms]
    slow = [simulate(make_schedule("gpipe", 4, m), Costs(stage_scale={1: 2.0})) for m in ms]
    fig = valid(bubble_vs_m("gpipe", 4, ms, {"simulated": sims, "slow stage": slow}))
    for m in range(1, 9):  # the textbook lines at every whole m
        assert series(fig, "idle/total: textbook")[m] == pytest.approx(theory.bubble_fraction("gpipe", 4, m))
        assert series(fig, "bubble/ideal: textbook")[m] == pytest.approx(3 / m)
    for m, sim, s in zip(ms, sims, slow):
        assert series(fig, "idle/total: simulated")[m] == pytest.approx((4 - 1) / (m + 4 - 1))
        assert series(fig, "bubble/ideal: simulated")[m] == pytest.approx(3 / m)
        assert series(fig, "idle/total: slow stage")[m] == pytest.approx(s.bubble())
        assert series(fig, "bubble/ideal: slow stage")[m] == pytest.approx(s.bubble() / (1 - s.bubble()))
        assert s.bubble() > sim.bubble() or m == 1  # with one micro-batch, one rank works at a time anyway
    assert list(fig.layout.xaxis.tickvals) == ms


def test_bubble_points_are_the_median_per_m():
    base = simulate(make_schedule("gpipe", 2, 4))
    traces = [slowed(base, k) for k in (1.0, 3.0, 1.5)]
    assert bubble_points(traces) == {4: pytest.approx(traces[2].bubble())}


def test_bubble_vs_m_refuses_traces_of_another_schedule():
    with pytest.raises(ValueError, match="1f1b with p=4"):
        bubble_vs_m("gpipe", 4, [4], {"x": [simulate(make_schedule("1f1b", 4, 4))]})
    with pytest.raises(ValueError, match="ms must be"):
        bubble_vs_m("gpipe", 4, [0, 4])


def test_memory_by_kind_bars_are_the_bytes_and_their_total():
    models = {shape.name: training_bytes(shape, 1) for key, shape in MODELS.items() if key.startswith("gpt3")}
    device = 80 * 2**30
    fig = valid(memory_by_kind(models, device, "an 80 GiB GPU"))
    for kind in ["parameters", "gradients", "optimizer", "activations"]:
        assert series(fig, kind) == {name: by_kind[kind] for name, by_kind in models.items()}
    assert series(fig, "total") == {name: sum(by_kind.values()) for name, by_kind in models.items()}
    [line] = fig.layout.shapes
    assert line.x0 == line.x1 == device
    assert fig.layout.xaxis.type == "log" and "GiB" in "".join(fig.layout.xaxis.ticktext)


def test_human_bytes():
    assert human_bytes(12) == "12 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(80 * 2**30) == "80 GiB"
    assert human_bytes(3 * 2**40) == "3 TiB"
    assert human_bytes(5000 * 2**40) == "5e+03 TiB"


def test_three_ways_to_split_colours_blocks_by_owner():
    layers, columns, devices = 4, 4, 2
    fig = valid(three_ways_to_split(layers, columns, devices))
    rects = fig.layout.shapes
    assert len(rects) == layers * columns * (1 + 1 + devices)  # pipeline, tensor, and a replica per device
    # pipeline: the first half of the layers on device 0; tensor: the first half of every layer's columns
    assert [owner("pipeline", layer, 0, layers, columns, devices) for layer in range(layers)] == [0, 0, 1, 1]
    assert [owner("tensor", 0, col, layers, columns, devices) for col in range(columns)] == [0, 0, 1, 1]
    assert {owner("pipeline", layer, col, 6, 4, 3) for layer in range(6) for col in range(4)} == {0, 1, 2}
    with pytest.raises(ValueError, match="every device holds all"):
        owner("data", 0, 0, layers, columns, devices)
    colours = {r.fillcolor for r in rects}
    assert len(colours) == devices
    assert math.isclose(len([r for r in rects if r.xref == "x3"]) / len(rects), devices / (2 + devices))
