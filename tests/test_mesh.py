"""The mesh numbers ranks as torch's DeviceMesh does, and its groups partition the world.

torch's own `init_device_mesh` is the reference, run in this process on torch's "fake" backend
(a process group that never talks), once per rank of the world it pretends to be.
"""
from __future__ import annotations

from itertools import product

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from minipipe.parallel.mesh import AXES, Coords, Mesh, make_groups

SHAPES = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 2), (3, 2, 1), (2, 1, 3), (1, 3, 2), (4, 2, 2)]


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


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_same_numbering_and_groups_as_device_mesh(shape, fake_world):
    mesh = Mesh(*shape)
    for rank in mesh.ranks():
        fake_world(rank, mesh.world)
        torch_mesh = init_device_mesh("cpu", shape, mesh_dim_names=AXES)
        assert mesh.coords(rank) == tuple(torch_mesh.get_coordinate()), f"rank {rank} of {mesh.describe()}"
        for axis in AXES:
            torch_group = dist.get_process_group_ranks(torch_mesh.get_group(axis))
            assert list(mesh.group(rank, axis)) == torch_group, f"{axis} group of rank {rank}"
        mine = make_groups(mesh)
        assert mine.rank == rank and mine.coords == mesh.coords(rank)
        for axis in AXES:
            got = getattr(mine, axis)
            assert dist.get_process_group_ranks(got.group) == list(got.ranks) == list(mesh.group(rank, axis))
            assert got.index == mesh.coords(rank)._asdict()[axis] == dist.get_rank(got.group)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_numbering_is_arange_reshaped(shape):
    """What DeviceMesh does underneath: torch.arange(world).reshape(pp, dp, tp), sliced."""
    mesh = Mesh(*shape)
    grid = torch.arange(mesh.world).reshape(shape)
    for pp, dp, tp in product(*map(range, shape)):
        rank = mesh.rank(pp, dp, tp)
        assert rank == grid[pp, dp, tp].item()
        assert mesh.coords(rank) == Coords(pp, dp, tp)
        assert list(mesh.group(rank, "pp")) == grid[:, dp, tp].tolist()
        assert list(mesh.group(rank, "dp")) == grid[pp, :, tp].tolist()
        assert list(mesh.group(rank, "tp")) == grid[pp, dp, :].tolist()
        assert mesh.pipeline(rank) == mesh.group(rank, "pp")
        assert mesh.groups("pp")[mesh.pipeline_of(rank)] == mesh.pipeline(rank)
        for q in range(mesh.pp):
            assert mesh.pipeline_peer(rank, q) == grid[q, dp, tp].item()
        assert set(mesh.peers(rank, "tp")) == set(grid[pp, dp, :].tolist()) - {rank}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_groups_partition_the_world(shape):
    mesh = Mesh(*shape)
    assert mesh.world == shape[0] * shape[1] * shape[2]
    for axis in AXES:
        groups = mesh.groups(axis)
        assert len(groups) == mesh.world // mesh.size(axis)
        assert all(len(g) == mesh.size(axis) for g in groups)
        assert sorted(r for g in groups for r in g) == list(mesh.ranks())
        for g in groups:
            for c, rank in enumerate(g):
                assert mesh.group(rank, axis) == g
                assert mesh.coords(rank)._asdict()[axis] == c
                # a group varies one coordinate only
                others = [a for a in AXES if a != axis]
                assert {tuple(mesh.coords(r)._asdict()[a] for a in others) for r in g} == \
                       {tuple(mesh.coords(rank)._asdict()[a] for a in others)}
    assert len(mesh.groups("pp")) == mesh.n_pipelines


def test_tensor_parallel_groups_are_consecutive_ranks():
    mesh = Mesh(2, 2, 4)
    assert mesh.groups("tp")[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert mesh.groups("pp")[0] == (0, 8)


def test_printed_table_shows_every_rank_at_its_coordinates():
    mesh = Mesh(2, 3, 2)
    rows = mesh.table().splitlines()
    assert rows[0].split() == ["tp=0", "tp=1"]
    body = rows[1:]
    assert len(body) == mesh.pp * mesh.dp
    for (pp, dp), row in zip(product(range(mesh.pp), range(mesh.dp)), body):
        assert f"dp={dp}" in row and (f"pp={pp}" in row) == (dp == 0)
        assert [int(x) for x in row.split()[-mesh.tp:]] == [mesh.rank(pp, dp, t) for t in range(mesh.tp)]
    text = str(mesh)
    assert "pp=2 × dp=3 × tp=2 = 12 ranks" in text
    assert "tp groups: [0, 1] [2, 3]" in text


def test_fit_takes_dp_from_the_world():
    assert Mesh.fit(8, pp=2, tp=2) == Mesh(2, 2, 2)
    assert Mesh.fit(6, pp=3) == Mesh(3, 2, 1)
    with pytest.raises(ValueError, match=r"start a multiple of 4 processes \(e.g. 4, 8"):
        Mesh.fit(6, pp=2, tp=2)


@pytest.mark.parametrize("bad, advice", [
    (dict(pp=0), "pp must be a whole number >= 1"),
    (dict(dp=-2), "dp must be a whole number >= 1"),
    (dict(tp=1.5), "tp must be a whole number >= 1"),
    (dict(tp=True), "tp must be a whole number >= 1"),
    (dict(pp="2"), "use 1 for an axis you do not split along"),
])
def test_bad_shapes_are_refused_with_advice(bad, advice):
    with pytest.raises(ValueError, match=advice):
        Mesh(**bad)


def test_bad_ranks_axes_and_coordinates_are_refused():
    mesh = Mesh(2, 2, 1)
    with pytest.raises(ValueError, match=r"rank must be in 0..3"):
        mesh.coords(4)
    with pytest.raises(ValueError, match=r"tp coordinate must be in 0..0"):
        mesh.rank(0, 0, 1)
    with pytest.raises(ValueError, match=r"the axes are pp, dp, tp"):
        mesh.groups("cp")


def test_make_groups_refuses_a_world_of_the_wrong_size(fake_world):
    with pytest.raises(ValueError, match="needs torch.distributed to be initialised"):
        make_groups(Mesh(2, 1, 1))
    fake_world(0, 4)
    with pytest.raises(ValueError, match=r"but 4 processes were started; start 8 processes"):
        make_groups(Mesh(2, 2, 2))
