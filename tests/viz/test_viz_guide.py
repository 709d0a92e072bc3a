"""Lesson 12's map, checked as data: each cell says its layout's degrees and takes its family's colour."""

from types import SimpleNamespace as L

import plotly.graph_objects as go
import pytest

from minipipe.viz.guide import FAMILIES, family, label, layout_map


def lay(tp=1, pp=1, dp=1, zero=0):
    return L(tp=tp, pp=pp, dp=dp, zero=zero)


@pytest.mark.parametrize(
    "layout,expected",
    [
        (lay(4, 8, 2, 3), "pipeline, with tensor and data"),  # a pipeline first, whatever else it has
        (lay(2, 1, 32, 3), "tensor, with data"),
        (lay(1, 1, 64, 3), "sharded data (FSDP, ZeRO-3)"),
        (lay(1, 1, 64, 1), "data"),
        (lay(1, 1, 1, 3), "data"),  # ZeRO-3 over one replica shards nothing
        (None, "nothing fits"),
    ],
)
def test_family_is_the_split_that_shapes_the_layout_most(layout, expected):
    assert family(layout) == expected


def test_labels_name_the_degrees_above_one():
    assert label(lay(4, 8, 2, 3)) == "TP 4 · PP 8 · DP 2 · ZeRO 3"
    assert label(lay(1, 1, 512, 0)) == "DP 512"
    assert label(lay()) == "1 GPU" and label(None) == "—"


def test_each_cell_is_its_layout_in_its_familys_colour():
    grid = {"small": {8: lay(1, 1, 8, 3), 64: lay(1, 1, 64, 0)}, "large": {8: None, 64: lay(4, 8, 2, 1)}}
    fig = go.Figure(layout_map(grid, hover={"large": {64: "step 3.0 s"}}).to_dict())
    heat = fig.data[0]
    names = list(FAMILIES)
    assert list(heat.y) == ["small", "large"] and list(heat.x) == ["8 GPUs", "64 GPUs"]
    assert [[names[z] for z in row] for row in heat.z] == [
        ["sharded data (FSDP, ZeRO-3)", "data"],
        ["nothing fits", "pipeline, with tensor and data"],
    ]
    assert [list(row) for row in heat.text] == [["DP 8 · ZeRO 3", "DP 64"], ["—", "TP 4 · PP 8 · DP 2 · ZeRO 1"]]
    assert heat.customdata[1][1] == "step 3.0 s" and heat.customdata[0][0] == ""
    for i, colour in enumerate(FAMILIES.values()):  # each family's colour over its own band of z
        band = [c for edge, c in heat.colorscale if i / len(FAMILIES) <= edge <= (i + 1) / len(FAMILIES)]
        assert colour in band
    assert [d.name for d in fig.data[1:]] == names  # the legend: every family, in order


def test_layout_map_wants_every_cell():
    with pytest.raises(ValueError, match="missing"):
        layout_map({"a": {8: None, 64: None}, "b": {8: None}})
    with pytest.raises(ValueError, match="at least one"):
        layout_map({})
