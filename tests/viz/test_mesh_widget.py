"""The mesh widget of lesson 13b: each axis's groups (the mesh's, dp's over dp × cp), the links
they need on two servers of 4, the bytes a rank sends along it (the accounting's, from the plan:
no process starts), and what it says of a choice that makes no mesh of 8 or no run."""

import pytest

from minipipe.parallel.mesh import Mesh
from minipipe.traffic import TrafficKind
from minipipe.viz.mesh_widget import MeshExplorer, axis_rows, sent_by_rank

GPT = dict(width=16, heads=2, depth=2, block=8, vocab=16)  # small: each choice prepares a plan (~1 s)


def by_axis(rows):
    return {r["axis"]: r for r in rows}


def test_rows_name_each_axis_its_groups_links_and_bytes():
    mesh = Mesh(2, cp=2, ep=2, tp=2)
    sent = sent_by_rank(2, 1, 2, 2, tuple(GPT.items()), 2, 8)
    rows = by_axis(axis_rows(mesh, sent))
    assert rows["pp"]["groups"] == [(0, 4), (1, 5), (2, 6), (3, 7)] and rows["pp"]["links"] == ["between nodes"]
    assert rows["tp"]["groups"] == [(0, 1), (2, 3), (4, 5), (6, 7)] and rows["tp"]["links"] == ["inside a node"]
    assert rows["cp"]["groups"] == rows["ep"]["groups"] == [(0, 2), (1, 3), (4, 6), (5, 7)]  # ep borrowed from cp
    # dp is 1, but the gradients are averaged over dp × cp: its row counts that all-reduce, over the cp pairs
    assert rows["dp"]["size"] == 1 and rows["dp"]["talkers"] == 2 and rows["dp"]["groups"] == rows["cp"]["groups"]
    assert rows["dp"]["bytes"] == max(s[TrafficKind.DP_ALL_REDUCE] for s in sent) > 0
    assert rows["pp"]["bytes"] == max(s[TrafficKind.PP_ACTIVATION] + s[TrafficKind.PP_GRADIENT] for s in sent) > 0
    assert rows["cp"]["bytes"] == max(s[TrafficKind.CP_RING] for s in sent) > 0
    assert rows["tp"]["bytes"] == max(s[TrafficKind.TP_ALL_REDUCE] + s[TrafficKind.TP_ALL_GATHER] for s in sent) > 0
    assert rows["ep"]["bytes"] is None  # a GPT without experts sends nothing along ep


def test_an_axis_of_one_talks_to_no_one():
    rows = by_axis(axis_rows(Mesh(1, dp=8), sent_by_rank(1, 8, 1, 1, tuple(GPT.items()), 2, 16)))
    assert all(
        rows[a]["talkers"] == 1 and rows[a]["bytes"] is None and rows[a]["links"] == [] for a in ("pp", "cp", "tp")
    )
    assert rows["dp"]["links"] == ["between nodes"]  # 8 replicas span both servers


def test_the_widget_draws_every_group_and_says_why_a_choice_is_not_a_mesh():
    w = MeshExplorer(pp=2, dp=1, cp=2, ep=1, tp=2, model_args=GPT, m=2, batch_size=8)
    assert w.error is None and w.mesh == Mesh(2, cp=2, tp=2)
    drawn = sum(len(r["groups"]) for r in w.rows if r["talkers"] > 1)
    assert len(w.figure.data) == len(w.plot.data) == drawn  # dp (over cp), cp, pp, tp: 4 groups each
    assert "<table>" in w.static_html() and "server 1" in str(w.figure.layout.annotations)
    w.select(pp=1, dp=2, cp=2, ep=4, tp=2)
    assert w.error is None and w.mesh.ep == 4 and by_axis(w.rows)["ep"]["groups"] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    good = w.mesh
    w.select(pp=2, dp=2)  # 2·2·2·2 = 16
    assert "not 8" in w.error and w.mesh is good  # the last mesh stays drawn
    w.select(pp=1, dp=1, cp=8, ep=4, tp=1)  # a GPT of 8 tokens has no 2·8 chunks
    assert "chunks" in w.error and w.mesh is good
    w.select(pp=2, dp=1, cp=2, ep=4, tp=2)
    assert "must divide" in w.error
    with pytest.raises(ValueError, match="axes are"):
        w.select(sp=2)
