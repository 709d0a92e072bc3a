"""The mesh numbers ranks as torch's DeviceMesh does, and its groups partition the world.

torch's own `init_device_mesh` is the reference, run in this process on torch's "fake" backend
(a process group that never talks), once per rank of the world it pretends to be: the world's
mesh unflattened into (pp, dp, cp, tp) for the dense layers and into (pp, edp, ep, tp) for the
experts, and dp × cp flattened, as torchtitan's ParallelDims.build_mesh does.
"""

from __future__ import annotations

from itertools import product

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from minipipe.parallel.mesh import AXES, GROUPS, WORLD_AXES, Coords, Mesh, make_groups

# (pp, dp, cp, ep, tp): the three axes alone and together, cp alone and with each, ep borrowed
# from dp, from cp and from both
SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 1, 1, 1, 1),
    (1, 2, 1, 1, 1),
    (1, 1, 1, 1, 2),
    (2, 2, 1, 1, 2),
    (3, 2, 1, 1, 1),
    (2, 1, 1, 1, 3),
    (1, 3, 1, 1, 2),
    (4, 2, 1, 1, 2),
    (1, 1, 2, 1, 1),
    (2, 1, 2, 1, 2),
    (1, 2, 3, 1, 1),
    (1, 2, 1, 2, 1),
    (1, 1, 2, 2, 1),
    (2, 2, 2, 4, 2),
    (1, 2, 2, 2, 1),
    (1, 3, 2, 3, 2),
    (2, 1, 4, 2, 1),
]
IDS = ["x".join(f"{a}{n}" for a, n in zip(AXES, s) if n > 1) or "one" for s in SHAPES]


def mesh_of(shape) -> Mesh:
    pp, dp, cp, ep, tp = shape
    return Mesh(pp, dp=dp, cp=cp, ep=ep, tp=tp)


def as_rank(rank: int, world: int):
    """A default group of `world` fake processes, seen from `rank`."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


@pytest.fixture
def fake_world():
    yield as_rank
    if dist.is_initialized():
        dist.destroy_process_group()


def torch_groups(mesh: Mesh) -> dict[str, list[int]]:
    """This rank's group along every axis, as torch's DeviceMesh makes them (torchtitan's way)."""
    world = init_device_mesh("cpu", (mesh.world,), mesh_dim_names=("world",))
    dense = world._unflatten(0, mesh.shape, WORLD_AXES)
    sparse = world._unflatten(0, (mesh.pp, mesh.size("edp"), mesh.ep, mesh.tp), ("pp", "edp", "ep", "tp"))
    found = {axis: dense.get_group(axis) for axis in WORLD_AXES}
    found |= {axis: sparse.get_group(axis) for axis in ("edp", "ep")}
    found["dp_cp"] = dense["dp", "cp"]._flatten("dp_cp").get_group()
    return {axis: dist.get_process_group_ranks(g) for axis, g in found.items()}, dense, sparse


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_same_numbering_and_groups_as_device_mesh(shape, fake_world):
    mesh = mesh_of(shape)
    for rank in mesh.ranks():
        fake_world(rank, mesh.world)
        groups, dense, sparse = torch_groups(mesh)
        c = mesh.coords(rank)
        assert (c.pp, c.dp, c.cp, c.tp) == tuple(dense.get_coordinate()), f"rank {rank} of {mesh.describe()}"
        assert c.ep == sparse.get_coordinate()[2]
        for axis in GROUPS:
            assert list(mesh.group(rank, axis)) == groups[axis], f"{axis} group of rank {rank}"
        mine = make_groups(mesh)
        assert mine.rank == rank and mine.coords == c
        for axis in GROUPS:
            got = getattr(mine, axis)
            assert dist.get_process_group_ranks(got.group) == list(got.ranks) == list(mesh.group(rank, axis))
            assert got.index == mesh.index(rank, axis) == dist.get_rank(got.group)
            if axis in AXES:
                assert got.index == c._asdict()[axis]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_numbering_is_arange_reshaped(shape):
    """What DeviceMesh does underneath: torch.arange(world).reshape(pp, dp, cp, tp), sliced; the
    experts' view is the same ranks reshaped (pp, dp·cp/ep, ep, tp)."""
    mesh = mesh_of(shape)
    grid = torch.arange(mesh.world).reshape(mesh.shape)
    experts = grid.reshape(mesh.pp, mesh.size("edp"), mesh.ep, mesh.tp)
    for pp, dp, cp, tp in product(*map(range, mesh.shape)):
        rank = mesh.rank(pp, dp=dp, cp=cp, tp=tp)
        assert rank == grid[pp, dp, cp, tp].item()
        edp, ep = divmod(dp * mesh.cp + cp, mesh.ep)
        assert mesh.coords(rank) == Coords(pp, dp, cp, ep, tp)
        assert list(mesh.group(rank, "pp")) == grid[:, dp, cp, tp].tolist()
        assert list(mesh.group(rank, "dp")) == grid[pp, :, cp, tp].tolist()
        assert list(mesh.group(rank, "cp")) == grid[pp, dp, :, tp].tolist()
        assert list(mesh.group(rank, "tp")) == grid[pp, dp, cp, :].tolist()
        assert list(mesh.group(rank, "ep")) == experts[pp, edp, :, tp].tolist()
        assert list(mesh.group(rank, "edp")) == experts[pp, :, ep, tp].tolist()
        assert list(mesh.group(rank, "dp_cp")) == grid[pp, :, :, tp].flatten().tolist()
        assert mesh.pipeline(rank) == mesh.group(rank, "pp") == mesh.pipeline_ranks(mesh.pipeline_of(rank))
        assert mesh.groups("pp")[mesh.pipeline_of(rank)] == mesh.pipeline(rank)
        for q in range(mesh.pp):
            assert mesh.pipeline_peer(rank, q) == grid[q, dp, cp, tp].item()
        assert set(mesh.peers(rank, "tp")) == set(grid[pp, dp, cp, :].tolist()) - {rank}


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_groups_partition_the_world(shape):
    mesh = mesh_of(shape)
    assert mesh.world == shape[0] * shape[1] * shape[2] * shape[4]
    for axis in GROUPS:
        groups = mesh.groups(axis)
        assert len(groups) == mesh.world // mesh.size(axis)
        assert all(len(g) == mesh.size(axis) for g in groups)
        assert sorted(r for g in groups for r in g) == list(mesh.ranks())
        for g in groups:
            for i, rank in enumerate(g):
                assert mesh.group(rank, axis) == g and mesh.index(rank, axis) == i
    for axis in WORLD_AXES:  # a group of a world axis varies that coordinate only
        others = [a for a in WORLD_AXES if a != axis]
        for g in mesh.groups(axis):
            assert len({tuple(mesh.coords(r)._asdict()[a] for a in others) for r in g}) == 1
            assert [mesh.coords(r)._asdict()[axis] for r in g] == list(range(len(g)))
    assert len(mesh.groups("pp")) == mesh.n_pipelines


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_expert_groups_are_borrowed_from_data_and_context_ranks(shape):
    """An ep group lies inside one dp_cp group (the same parameters outside the experts, other
    tokens), and its edp group holds the ranks with the same experts: each ep group meets each
    edp group of its dp_cp group in exactly one rank."""
    mesh = mesh_of(shape)
    for rank in mesh.ranks():
        ep, edp, dp_cp = (set(mesh.group(rank, a)) for a in ("ep", "edp", "dp_cp"))
        assert ep <= dp_cp and edp <= dp_cp and ep & edp == {rank}
        assert len(ep) * len(edp) == len(dp_cp)
        assert {mesh.coords(r).ep for r in edp} == {mesh.coords(rank).ep}


def test_tensor_parallel_groups_are_consecutive_ranks():
    mesh = Mesh(2, dp=2, tp=4)
    assert mesh.groups("tp")[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert mesh.groups("pp")[0] == (0, 8)
    with_cp = Mesh(2, cp=2, tp=2)  # cp next: a node of 4 holds a tp × cp block
    assert with_cp.groups("cp")[:2] == [(0, 2), (1, 3)]
    assert with_cp.groups("ep") == [(r,) for r in range(8)]


def test_all_five_axes_on_eight_processes():
    mesh = Mesh(2, cp=2, ep=2, tp=2)
    assert mesh.world == 8 and all(mesh.size(a) == 2 for a in ("pp", "cp", "ep", "tp"))
    assert mesh.groups("ep") == mesh.groups("cp")  # borrowed from cp: the two halves of each sequence


def test_printed_table_shows_every_rank_at_its_coordinates():
    mesh = Mesh(2, dp=3, tp=2)
    rows = mesh.table().splitlines()
    assert rows[0].split() == ["tp=0", "tp=1"]
    body = rows[1:]
    assert len(body) == mesh.pp * mesh.dp
    for (pp, dp), row in zip(product(range(mesh.pp), range(mesh.dp)), body):
        assert f"dp={dp}" in row and (f"pp={pp}" in row) == (dp == 0)
        assert [int(x) for x in row.split()[-mesh.tp :]] == [mesh.rank(pp, dp=dp, tp=t) for t in range(mesh.tp)]
    text = str(mesh)
    assert "pp=2 × dp=3 × tp=2 = 12 ranks" in text
    assert "tp groups: [0, 1] [2, 3]" in text
    assert "cp groups" not in text and "ep groups" not in text


def test_printed_table_with_context_and_expert_ranks():
    mesh = Mesh(1, dp=2, cp=2, ep=2, tp=2)
    body = mesh.table().splitlines()[1:]
    assert len(body) == mesh.dp * mesh.cp
    for (dp, cp), row in zip(product(range(mesh.dp), range(mesh.cp)), body):
        assert f"cp={cp}" in row and (f"dp={dp}" in row) == (cp == 0) and row.endswith(f"ep={cp}")
        cells = [int(x) for x in row.split()[-mesh.tp - 1 : -1]]
        assert cells == [mesh.rank(0, dp=dp, cp=cp, tp=t) for t in range(mesh.tp)]
    text = str(mesh)
    assert "mesh pp=1 × dp=2 × cp=2 × tp=2 = 8 ranks, ep=2 of its dp·cp" in text
    for line in (
        "cp groups: [0, 2] [1, 3]",
        "ep groups: [0, 2] [1, 3]",
        "dp_cp groups: [0, 2, 4, 6] [1, 3, 5, 7]",
        "edp groups: [0, 4] [1, 5] [2, 6] [3, 7]",
    ):
        assert line in text


def test_fit_takes_dp_from_the_world():
    assert Mesh.fit(8, pp=2, tp=2) == Mesh(2, dp=2, tp=2)
    assert Mesh.fit(6, pp=3) == Mesh(3, dp=2)
    assert Mesh.fit(8, cp=2, ep=4) == Mesh(1, dp=4, cp=2, ep=4)
    with pytest.raises(ValueError, match=r"start a multiple of 4 processes \(e.g. 4, 8"):
        Mesh.fit(6, pp=2, tp=2)
    with pytest.raises(ValueError, match=r"pp=1 × cp=2 × tp=2 = 4 .* change pp, cp or tp"):
        Mesh.fit(6, cp=2, tp=2)


@pytest.mark.parametrize(
    "bad, advice",
    [
        (dict(pp=0), "pp must be a whole number >= 1"),
        (dict(dp=-2), "dp must be a whole number >= 1"),
        (dict(tp=1.5), "tp must be a whole number >= 1"),
        (dict(tp=True), "tp must be a whole number >= 1"),
        (dict(pp="2"), "use 1 for an axis you do not split along"),
        (dict(cp=0), "cp must be a whole number >= 1 .*share of every sequence"),
        (dict(ep=2.0), "ep must be a whole number >= 1"),
        # ep borrows from dp × cp: at the limit (ep = dp·cp) it fits, one past it does not
        (dict(dp=2, cp=2, ep=3), r"ep=3 must divide dp·cp = 2·2 = 4.*choose ep from 1, 2, 4"),
        (dict(dp=2, cp=2, ep=8), r"ep=8 must divide dp·cp = 2·2 = 4"),
        (dict(tp=2, ep=2), r"ep=2 must divide dp·cp = 1·1 = 1"),
    ],
)
def test_bad_shapes_are_refused_with_advice(bad, advice):
    with pytest.raises(ValueError, match=advice):
        Mesh(**bad)


def test_expert_parallelism_at_its_limit_fits():
    assert Mesh(dp=2, cp=2, ep=4).groups("ep") == [(0, 1, 2, 3)]
    assert Mesh(dp=2, cp=2, ep=4).groups("edp") == [(0,), (1,), (2,), (3,)]


def test_axes_are_named_not_positional():
    with pytest.raises(TypeError):
        Mesh(2, 2, 2)  # which of dp, cp, ep, tp would the second 2 be?
    with pytest.raises(TypeError):
        Mesh(2, dp=2).rank(0, 1)


def test_bad_ranks_axes_and_coordinates_are_refused():
    mesh = Mesh(2, dp=2)
    with pytest.raises(ValueError, match=r"rank must be in 0..3"):
        mesh.coords(4)
    with pytest.raises(ValueError, match=r"tp coordinate must be in 0..0"):
        mesh.rank(0, tp=1)
    with pytest.raises(ValueError, match=r"the axes are pp, dp, cp, ep, tp \(and the groups made of them: dp_cp, edp"):
        mesh.groups("sp")
    with pytest.raises(ValueError, match=r"pipeline must be in 0..1"):
        mesh.pipeline_ranks(2)


def test_make_groups_refuses_a_world_of_the_wrong_size(fake_world):
    with pytest.raises(ValueError, match="needs torch.distributed to be initialised"):
        make_groups(Mesh(2))
    fake_world(0, 4)
    with pytest.raises(ValueError, match=r"but 4 processes were started; start 8 processes .* pp·dp·cp·tp is 4"):
        make_groups(Mesh(2, dp=2, tp=2))
