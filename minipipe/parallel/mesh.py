"""The device mesh: where each process sits in pipeline × data × context × expert × tensor parallelism.

Five axes, slowest to fastest, in the order torch's `DeviceMesh` is built by torchtitan
(torchtitan/distributed/parallel_dims.py: ["pp", "dp", "cp", "tp"] for the dense layers,
["pp", ..., "ep"] for the experts) and Megatron-Core places ranks (tp fastest, then cp, dp, pp):

    pp  pipeline ranks      stages of one model copy; only activations cross (slowest links)
    dp  data-parallel       replicas, each a share of the batch; gradients averaged once a step
    cp  context-parallel    each a share of every sequence; K and V go round a ring per attention
    ep  expert-parallel     each a share of a mixture-of-experts layer's experts; tokens all-to-all
    tp  tensor-parallel     each a slice of every layer; talks inside every layer (fastest links)

The world is pp·dp·cp·tp processes, numbered row-major with tp fastest, as
`init_device_mesh(device, (pp, dp, cp, tp), mesh_dim_names=("pp", "dp", "cp", "tp"))` numbers them:

    rank = ((pp_coord · dp + dp_coord) · cp + cp_coord) · tp + tp_coord

Expert parallelism takes no processes of its own: it borrows them from dp × cp, as torchtitan
does ("dp2ep": ep = dp_shard_in_ep × cp) and Megatron-Core does (expert parallelism inside the
data-parallel ranks). Outside its experts a rank of an ep group is an ordinary dp or cp rank with
tokens of its own; inside, each holds experts/ep of the experts and the group swaps tokens. So ep
must divide dp·cp, and the ep groups are the fastest part of the dp×cp ranks, numbered
dp_coord · cp + cp_coord: ep = 2 with cp = 2 pairs the two halves of each sequence, ep = 4 with
dp = cp = 2 takes all four. Borrowing keeps all five axes on 2·2·2 = 8 processes (pp, cp, tp = 2,
ep = 2 from cp), where five factors would need 32. It does not borrow tp (torchtitan's newest
does): the course's tensor parallelism keeps every token on every tp rank, so a tp group holds
no tokens to share out.

Two more groups follow from the five, torchtitan's and Megatron's alike:

    dp_cp   the dp·cp ranks holding the same (dense) parameters and different tokens: gradients
            are averaged over them (torchtitan's "loss" and "fsdp" meshes)
    edp     the dp·cp/ep ranks holding the same experts (Megatron's expert data parallel,
            torchtitan's "efsdp"): the experts' gradients are averaged over them

A group along an axis is the ranks that differ only in that coordinate (for ep and edp: in their
place in dp×cp), ordered by it. Each (dp, cp, tp) triple is one pipeline slice: a whole pipeline of
pp ranks that runs a schedule unchanged; pipeline rank q of the slice has pp coordinate q.

`Mesh` is pure arithmetic (no processes), `print(mesh)` shows the table; `make_groups(mesh)`
runs in each worker and returns that rank's torch process groups, to be passed explicitly.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from itertools import product
from typing import NamedTuple

AXES = ("pp", "dp", "cp", "ep", "tp")  # DeviceMesh order, slowest to fastest
WORLD_AXES = ("pp", "dp", "cp", "tp")  # their product is the world; ep is borrowed from dp × cp
DERIVED = ("dp_cp", "edp")  # groups made of the axes' (see the module docstring)
GROUPS = AXES + DERIVED
_ROLE = {
    "pp": "pipeline ranks (stages of one model copy)",
    "dp": "data-parallel replicas (each a share of the batch)",
    "cp": "context-parallel ranks (each a share of every sequence)",
    "ep": "expert-parallel ranks (each a share of the experts, borrowed from dp × cp)",
    "tp": "tensor-parallel shards (each a slice of every layer)",
}


class Coords(NamedTuple):
    pp: int
    dp: int
    cp: int
    ep: int  # this rank's place in its ep group: (dp · cp_size + cp) mod ep_size
    tp: int


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_expert_split(experts: int, ep: int, holder: str) -> None:
    """ep must divide the experts: each ep rank holds experts/ep of them, contiguous
    (parallel/expert.experts_of). The one rule the engine (for each MoE layer it splits) and the
    planner (for a model's experts) check; a ValueError that names the ep that would work."""
    if experts % ep:
        options = ", ".join(str(d) for d in range(1, experts + 1) if experts % d == 0)
        raise ValueError(
            f"ep={ep} does not divide the {experts} experts of {holder}: each ep rank holds experts/ep "
            f"of them; choose ep from {options}, or change the number of experts"
        )


@dataclass(frozen=True)
class Mesh:
    """Mesh(pp, dp=..., cp=..., ep=..., tp=...): every axis but pp by name, so that no caller
    mistakes one axis for another."""

    pp: int = 1
    _: KW_ONLY
    dp: int = 1
    cp: int = 1
    ep: int = 1
    tp: int = 1

    def __post_init__(self):
        for axis in AXES:
            size = getattr(self, axis)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(
                    f"mesh {axis} must be a whole number >= 1 (the number of {_ROLE[axis]}), "
                    f"got {size!r}; use 1 for an axis you do not split along"
                )
        if (self.dp * self.cp) % self.ep:
            raise ValueError(
                f"ep={self.ep} must divide dp·cp = {self.dp}·{self.cp} = {self.dp * self.cp}: expert "
                f"parallelism borrows its ranks from the data- and context-parallel ones (as torchtitan "
                f"and Megatron-Core do), so choose ep from {_divisors(self.dp * self.cp)}, or raise dp"
            )

    @classmethod
    def fit(cls, world: int, pp: int = 1, tp: int = 1, cp: int = 1, ep: int = 1) -> Mesh:
        """The mesh of `world` processes with pp pipeline ranks, tp shards and cp sequence shares;
        the rest is dp (how torchrun's world size becomes a mesh)."""
        probe = cls(pp, cp=cp, tp=tp)  # checks pp, cp and tp first
        per = pp * cp * tp
        if isinstance(world, bool) or not isinstance(world, int) or world < 1 or world % per:
            options = [n for n in range(per, 4 * per + 1, per)]
            named = " × ".join(f"{a}={n}" for a, n in (("pp", pp), ("cp", cp), ("tp", tp)) if a != "cp" or n > 1)
            raise ValueError(
                f"a world of {world!r} processes cannot be split into {named} = {per} ranks per "
                f"replica; start a multiple of {per} processes (e.g. {', '.join(map(str, options))}) "
                f"or change {'pp, cp or tp' if cp > 1 else 'pp or tp'}"
            )
        return cls(probe.pp, dp=world // per, cp=probe.cp, ep=ep, tp=probe.tp)

    # -- sizes and coordinates --------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The world's DeviceMesh shape: (pp, dp, cp, tp)."""
        return tuple(getattr(self, a) for a in WORLD_AXES)

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.cp * self.tp

    def size(self, axis: str) -> int:
        axis = self._axis(axis)
        if axis == "dp_cp":
            return self.dp * self.cp
        if axis == "edp":
            return self.dp * self.cp // self.ep
        return getattr(self, axis)

    def rank(self, pp: int = 0, *, dp: int = 0, cp: int = 0, tp: int = 0) -> int:
        """The global rank at coordinates (pp, dp, cp, tp); ep follows from dp and cp."""
        for axis, c in zip(WORLD_AXES, (pp, dp, cp, tp)):
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.size(axis):
                raise ValueError(
                    f"{axis} coordinate must be in 0..{self.size(axis) - 1} for {self.describe()}, got {c!r}"
                )
        return ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def coords(self, rank: int) -> Coords:
        """The (pp, dp, cp, ep, tp) coordinates of a global rank."""
        self._check_rank(rank)
        rest, tp = divmod(rank, self.tp)
        rest, cp = divmod(rest, self.cp)
        pp, dp = divmod(rest, self.dp)
        return Coords(pp, dp, cp, (dp * self.cp + cp) % self.ep, tp)

    def ranks(self) -> range:
        return range(self.world)

    # -- groups -----------------------------------------------------------------------------
    def _place(self, rank: int, axis: str) -> tuple[tuple[int, ...], int]:
        """(what the ranks of `rank`'s group along `axis` share, `rank`'s index in that group)."""
        c = self.coords(rank)
        flat = c.dp * self.cp + c.cp  # the place in dp × cp, cp fastest
        return {
            "pp": ((c.dp, c.cp, c.tp), c.pp),
            "dp": ((c.pp, c.cp, c.tp), c.dp),
            "cp": ((c.pp, c.dp, c.tp), c.cp),
            "tp": ((c.pp, c.dp, c.cp), c.tp),
            "ep": ((c.pp, flat // self.ep, c.tp), flat % self.ep),
            "edp": ((c.pp, flat % self.ep, c.tp), flat // self.ep),
            "dp_cp": ((c.pp, c.tp), flat),
        }[axis]

    def groups(self, axis: str) -> list[tuple[int, ...]]:
        """Every group along `axis` (one of GROUPS): the ranks that differ only in that
        coordinate, each ordered by it (so group[c] has coordinate c), the groups in row-major
        order of what their ranks share. Every process computes the same list, which is what
        dist.new_group needs."""
        axis = self._axis(axis)
        found: dict[tuple, dict[int, int]] = {}
        for r in self.ranks():
            shared, index = self._place(r, axis)
            found.setdefault(shared, {})[index] = r
        return [tuple(at[i] for i in range(len(at))) for _, at in sorted(found.items())]

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        """The group along `axis` that `rank` is in (itself included, at its own coordinate)."""
        axis, c = self._axis(axis), self.coords(rank)
        if axis in WORLD_AXES:
            at = {a: getattr(c, a) for a in WORLD_AXES}
            return tuple(self.rank(**{**at, axis: i}) for i in range(self.size(axis)))
        flat = c.dp * self.cp + c.cp
        places = {
            "dp_cp": range(self.dp * self.cp),
            "ep": range(flat - flat % self.ep, flat - flat % self.ep + self.ep),
            "edp": range(flat % self.ep, self.dp * self.cp, self.ep),
        }[axis]
        return tuple(self.rank(c.pp, dp=f // self.cp, cp=f % self.cp, tp=c.tp) for f in places)

    def index(self, rank: int, axis: str) -> int:
        """`rank`'s place in its group along `axis`."""
        return self._place(rank, self._axis(axis))[1]

    def peers(self, rank: int, axis: str) -> tuple[int, ...]:
        """The other ranks of `rank`'s group along `axis`."""
        return tuple(r for r in self.group(rank, axis) if r != rank)

    # -- pipelines --------------------------------------------------------------------------
    @property
    def n_pipelines(self) -> int:
        return self.dp * self.cp * self.tp

    def pipeline_of(self, rank: int) -> int:
        """Which pipeline slice `rank` is in: its index in groups("pp"), (dp·cp_size + cp)·tp_size + tp."""
        c = self.coords(rank)
        return (c.dp * self.cp + c.cp) * self.tp + c.tp

    def pipeline_ranks(self, pipeline: int) -> tuple[int, ...]:
        """The global ranks of pipeline slice `pipeline`, in pipeline order (groups("pp")[pipeline])."""
        if isinstance(pipeline, bool) or not isinstance(pipeline, int) or not 0 <= pipeline < self.n_pipelines:
            raise ValueError(f"pipeline must be in 0..{self.n_pipelines - 1} for {self.describe()}, got {pipeline!r}")
        rest, tp = divmod(pipeline, self.tp)
        dp, cp = divmod(rest, self.cp)
        return tuple(self.rank(q, dp=dp, cp=cp, tp=tp) for q in range(self.pp))

    def pipeline(self, rank: int) -> tuple[int, ...]:
        """The global ranks of `rank`'s pipeline slice, in pipeline order: entry q is pipeline rank q."""
        return self.group(rank, "pp")

    def pipeline_peer(self, rank: int, q: int) -> int:
        """The global rank of pipeline rank q in `rank`'s slice (how the executor addresses a stage)."""
        c = self.coords(rank)
        return self.rank(q, dp=c.dp, cp=c.cp, tp=c.tp)

    # -- printing ---------------------------------------------------------------------------
    def describe(self) -> str:
        """'mesh pp=2 × dp=2 × tp=2 = 8 ranks'; cp and ep named where they are split."""
        axes = " × ".join(f"{a}={getattr(self, a)}" for a in WORLD_AXES if a != "cp" or self.cp > 1)
        borrowed = f", ep={self.ep} of its dp·cp" if self.ep > 1 else ""
        return f"mesh {axes} = {self.world} ranks{borrowed}"

    def label(self, rank: int) -> str:
        """A rank's coordinates for people: 'pp=1 dp=0 tp=1', with cp and ep where they are split."""
        c = self.coords(rank)
        return " ".join(f"{a}={getattr(c, a)}" for a in AXES if a in ("pp", "dp", "tp") or self.size(a) > 1)

    def table(self) -> str:
        """Global ranks by coordinates: one row per (pp, dp, cp), one column per tp; a row's ep
        place at its end where ep > 1."""
        cell = max(len(str(self.world - 1)), len(f"tp={self.tp - 1}"))
        rows = list(product(range(self.pp), range(self.dp), range(self.cp)))

        def label(pp, dp, cp):
            first = (dp, cp) == (0, 0)
            head = f"pp={pp} " if first else " " * len(f"pp={pp} ")
            head += (f"dp={dp} " if cp == 0 else " " * len(f"dp={dp} ")) if self.cp > 1 else f"dp={dp}"
            return head + (f"cp={cp}" if self.cp > 1 else "")

        left = max(len(label(*row)) for row in rows)
        lines = [" " * left + "".join(f"  {f'tp={t}':>{cell}}" for t in range(self.tp))]
        for pp, dp, cp in rows:
            cells = "".join(f"  {self.rank(pp, dp=dp, cp=cp, tp=t):>{cell}}" for t in range(self.tp))
            ep = f"   ep={(dp * self.cp + cp) % self.ep}" if self.ep > 1 else ""
            lines.append(f"{label(pp, dp, cp):<{left}}" + cells + ep)
        return "\n".join(lines)

    def __str__(self) -> str:
        shown = (
            ["pp", "dp"]
            + ["cp"] * (self.cp > 1)
            + ["ep"] * (self.ep > 1)
            + ["tp"]
            + ["dp_cp"] * (self.dp > 1 and self.cp > 1)
            + ["edp"] * (1 < self.ep < self.dp * self.cp)
        )
        groups = [
            f"{axis} groups: " + " ".join("[" + ", ".join(map(str, g)) + "]" for g in self.groups(axis))
            for axis in shown
        ]
        return "\n".join(
            [self.describe() + " (tp fastest: a tensor-parallel group is consecutive ranks)", self.table(), *groups]
        )

    # -- checks -----------------------------------------------------------------------------
    def _axis(self, axis: str) -> str:
        if axis not in GROUPS:
            raise ValueError(
                f"unknown mesh axis {axis!r}; the axes are {', '.join(AXES)} "
                f"(and the groups made of them: {', '.join(DERIVED)})"
            )
        return axis

    def _check_rank(self, rank: int):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world:
            raise ValueError(f"rank must be in 0..{self.world - 1} for {self.describe()}, got {rank!r}")


# -- torch process groups (in a worker) -----------------------------------------------------
@dataclass(frozen=True)
class AxisGroup:
    """One rank's group along one axis: the torch group and who is in it."""

    axis: str
    ranks: tuple[int, ...]  # global ranks; ranks[c] has coordinate c on this axis
    index: int  # this rank's coordinate on the axis (its rank inside `group`)
    group: object  # torch.distributed.ProcessGroup

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class MeshGroups:
    """This process's place in the mesh and its group along every axis (and the two groups made of
    them, dp_cp and edp); pass it to whatever talks."""

    mesh: Mesh
    rank: int
    pp: AxisGroup
    dp: AxisGroup
    cp: AxisGroup
    ep: AxisGroup
    tp: AxisGroup
    dp_cp: AxisGroup
    edp: AxisGroup

    @property
    def coords(self) -> Coords:
        return Coords(self.pp.index, self.dp.index, self.cp.index, self.ep.index, self.tp.index)


def make_groups(mesh: Mesh, timeout: float | None = None) -> MeshGroups:
    """Create the process groups of every axis and return this rank's. Call it in every process
    of an initialised default group of mesh.world processes, at the same point: dist.new_group is
    collective over the whole world, so every process creates every group, in the same order
    (Mesh.groups gives them all the same list), and keeps the ones it is in. Groups that hold
    the same ranks as one already made (dp_cp is dp when cp = 1, ...) share its torch group."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ValueError(
            "make_groups needs torch.distributed to be initialised first (dist.init_process_group in every worker)"
        )
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != mesh.world:
        raise ValueError(
            f"{mesh.describe()}, but {world} processes were started; start {mesh.world} "
            f"processes or choose a mesh whose pp·dp·cp·tp is {world}"
        )
    kwargs = {} if timeout is None else {"timeout": timedelta(seconds=timeout)}
    made: dict[tuple[tuple[int, ...], ...], dict] = {}  # a family of groups, once: its groups by ranks
    mine = {}
    for axis in GROUPS:
        family = tuple(mesh.groups(axis))
        if family not in made:
            made[family] = {ranks: dist.new_group(list(ranks), **kwargs) for ranks in family}
        for ranks, group in made[family].items():
            if rank in ranks:
                mine[axis] = AxisGroup(axis, ranks, ranks.index(rank), group)
    return MeshGroups(mesh, rank, **mine)
