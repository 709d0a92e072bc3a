"""The device mesh: where each process sits in pipeline × data × tensor parallelism.

A run with pp pipeline ranks, dp data-parallel replicas and tp tensor-parallel shards has
world = pp·dp·tp processes. Each has a global rank and coordinates (pp, dp, tp), numbered
row-major with tp fastest, as torch's `init_device_mesh(device, (pp, dp, tp),
mesh_dim_names=("pp", "dp", "tp"))` and Megatron number them:

    rank = (pp_coord · dp + dp_coord) · tp + tp_coord

so a tensor-parallel group is tp consecutive ranks (one node: TP talks inside every layer and
needs the fastest links), and the pipeline axis is the slowest (across nodes: it sends only
activations, between stages). A group along an axis is the ranks whose other two coordinates
are equal. Each (dp, tp) pair is one pipeline slice: a whole pipeline of pp ranks that runs a
schedule unchanged; pipeline rank q of the slice is the global rank with pp coordinate q.

`Mesh` is pure arithmetic (no processes), `print(mesh)` shows the table; `make_groups(mesh)`
runs in each worker and returns that rank's torch process groups, to be passed explicitly.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from itertools import product
from typing import NamedTuple

AXES = ("pp", "dp", "tp")
_ROLE = {"pp": "pipeline ranks (stages of one model copy)",
         "dp": "data-parallel replicas (each a share of the batch)",
         "tp": "tensor-parallel shards (each a slice of every layer)"}


class Coords(NamedTuple):
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True)
class Mesh:
    pp: int = 1
    dp: int = 1
    tp: int = 1

    def __post_init__(self):
        for axis in AXES:
            size = getattr(self, axis)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"mesh {axis} must be a whole number >= 1 (the number of {_ROLE[axis]}), "
                                 f"got {size!r}; use 1 for an axis you do not split along")

    @classmethod
    def fit(cls, world: int, pp: int = 1, tp: int = 1) -> "Mesh":
        """The mesh of `world` processes with pp pipeline ranks and tp shards; the rest is dp
        (how torchrun's world size becomes a mesh)."""
        probe = cls(pp, 1, tp)   # checks pp and tp first
        if isinstance(world, bool) or not isinstance(world, int) or world < 1 or world % (pp * tp):
            options = [n for n in range(pp * tp, 4 * pp * tp + 1, pp * tp)]
            raise ValueError(f"a world of {world!r} processes cannot be split into pp={pp} × tp={tp} = "
                             f"{pp * tp} ranks per replica; start a multiple of {pp * tp} processes "
                             f"(e.g. {', '.join(map(str, options))}) or change pp or tp")
        return cls(probe.pp, world // (pp * tp), probe.tp)

    # -- sizes and coordinates --------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.pp, self.dp, self.tp)

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.tp

    def size(self, axis: str) -> int:
        return getattr(self, self._axis(axis))

    def rank(self, pp: int = 0, dp: int = 0, tp: int = 0) -> int:
        """The global rank at coordinates (pp, dp, tp)."""
        for axis, c in zip(AXES, (pp, dp, tp)):
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.size(axis):
                raise ValueError(f"{axis} coordinate must be in 0..{self.size(axis) - 1} for {self.describe()}, "
                                 f"got {c!r}")
        return (pp * self.dp + dp) * self.tp + tp

    def coords(self, rank: int) -> Coords:
        """The (pp, dp, tp) coordinates of a global rank."""
        self._check_rank(rank)
        rest, tp = divmod(rank, self.tp)
        pp, dp = divmod(rest, self.dp)
        return Coords(pp, dp, tp)

    def ranks(self) -> range:
        return range(self.world)

    # -- groups -----------------------------------------------------------------------------
    def groups(self, axis: str) -> list[tuple[int, ...]]:
        """Every group along `axis`: the ranks that differ only in that coordinate, each ordered
        by it (so group[c] has coordinate c), the groups in row-major order of the other two
        coordinates. Every process computes the same list, which is what dist.new_group needs."""
        axis = self._axis(axis)
        others = [a for a in AXES if a != axis]
        out = []
        for fixed in product(*(range(self.size(a)) for a in others)):
            at = dict(zip(others, fixed))
            out.append(tuple(self.rank(**at, **{axis: c}) for c in range(self.size(axis))))
        return out

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        """The group along `axis` that `rank` is in (itself included, at its own coordinate)."""
        at = self.coords(rank)._asdict()
        axis = self._axis(axis)
        return tuple(self.rank(**{**at, axis: c}) for c in range(self.size(axis)))

    def peers(self, rank: int, axis: str) -> tuple[int, ...]:
        """The other ranks of `rank`'s group along `axis`."""
        return tuple(r for r in self.group(rank, axis) if r != rank)

    # -- pipelines --------------------------------------------------------------------------
    @property
    def n_pipelines(self) -> int:
        return self.dp * self.tp

    def pipeline_of(self, rank: int) -> int:
        """Which pipeline slice `rank` is in: its index in groups("pp"), dp_coord · tp + tp_coord."""
        c = self.coords(rank)
        return c.dp * self.tp + c.tp

    def pipeline(self, rank: int) -> tuple[int, ...]:
        """The global ranks of `rank`'s pipeline slice, in pipeline order: entry q is pipeline rank q."""
        return self.group(rank, "pp")

    def pipeline_peer(self, rank: int, q: int) -> int:
        """The global rank of pipeline rank q in `rank`'s slice (how the executor addresses a stage)."""
        c = self.coords(rank)
        return self.rank(q, c.dp, c.tp)

    # -- printing ---------------------------------------------------------------------------
    def describe(self) -> str:
        return f"mesh pp={self.pp} × dp={self.dp} × tp={self.tp} = {self.world} ranks"

    def table(self) -> str:
        """Global ranks by coordinates: one row per (pp, dp), one column per tp."""
        cell = max(len(str(self.world - 1)), len(f"tp={self.tp - 1}"))
        left = len(f"pp={self.pp - 1} dp={self.dp - 1}")
        lines = [" " * left + "".join(f"  {f'tp={t}':>{cell}}" for t in range(self.tp))]
        for pp, dp in product(range(self.pp), range(self.dp)):
            label = (f"pp={pp} " if dp == 0 else " " * len(f"pp={pp} ")) + f"dp={dp}"
            lines.append(f"{label:<{left}}" + "".join(f"  {self.rank(pp, dp, t):>{cell}}" for t in range(self.tp)))
        return "\n".join(lines)

    def __str__(self) -> str:
        groups = [f"{axis} groups: " + " ".join("[" + ", ".join(map(str, g)) + "]" for g in self.groups(axis))
                  for axis in AXES]
        return "\n".join([self.describe() + " (tp fastest: a tensor-parallel group is consecutive ranks)",
                          self.table(), *groups])

    # -- checks -----------------------------------------------------------------------------
    def _axis(self, axis: str) -> str:
        if axis not in AXES:
            raise ValueError(f"unknown mesh axis {axis!r}; the axes are {', '.join(AXES)}")
        return axis

    def _check_rank(self, rank: int):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world:
            raise ValueError(f"rank must be in 0..{self.world - 1} for {self.describe()}, got {rank!r}")


# -- torch process groups (in a worker) -----------------------------------------------------
@dataclass(frozen=True)
class AxisGroup:
    """One rank's group along one axis: the torch group and who is in it."""
    axis: str
    ranks: tuple[int, ...]   # global ranks; ranks[c] has coordinate c on this axis
    index: int               # this rank's coordinate on the axis (its rank inside `group`)
    group: object            # torch.distributed.ProcessGroup

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class MeshGroups:
    """This process's place in the mesh and its three groups; pass it to whatever talks."""
    mesh: Mesh
    rank: int
    pp: AxisGroup
    dp: AxisGroup
    tp: AxisGroup

    @property
    def coords(self) -> Coords:
        return Coords(self.pp.index, self.dp.index, self.tp.index)


def make_groups(mesh: Mesh, timeout: float | None = None) -> MeshGroups:
    """Create the process groups of every axis and return this rank's. Call it in every process
    of an initialised default group of mesh.world processes, at the same point: dist.new_group is
    collective over the whole world, so every process creates every group, in the same order
    (Mesh.groups gives them all the same list), and keeps the ones it is in."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ValueError("make_groups needs torch.distributed to be initialised first "
                         "(dist.init_process_group in every worker)")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != mesh.world:
        raise ValueError(f"{mesh.describe()}, but {world} processes were started; start {mesh.world} "
                         f"processes or choose a mesh whose pp·dp·tp is {world}")
    kwargs = {} if timeout is None else {"timeout": timedelta(seconds=timeout)}
    mine = {}
    for axis in AXES:
        for ranks in mesh.groups(axis):
            group = dist.new_group(list(ranks), **kwargs)
            if rank in ranks:
                mine[axis] = AxisGroup(axis, ranks, ranks.index(rank), group)
    return MeshGroups(mesh, rank, **mine)
