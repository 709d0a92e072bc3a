"""What moving bytes costs: links inside a node and between nodes, and the collectives on them.

A GPU cluster has two kinds of link: a fast one inside a node (NVLink) and a slower one between
nodes (InfiniBand, one network card per GPU in a DGX-style node). Which one a group of ranks uses
follows from where the ranks sit: global rank r lives on node r // gpus_per_node (torchrun and
Slurm number the processes of a node consecutively), and a group whose ranks are all on one node
talks over the inside link, any other group over the link between nodes — a ring is as slow as
its slowest hop. With the mesh's rank order (parallel/mesh.py: tp fastest, pp slowest) a tensor-parallel
group of tp <= gpus_per_node ranks stays inside a node.

The costs, with a link of `bandwidth` (bytes per unit time, each direction, per GPU) and
`latency` (per message, or per step of a ring):

    point to point          latency + bytes / bandwidth
    ring all-reduce         2(n−1) steps, each latency + (bytes/n) / bandwidth
                            = 2(n−1)·latency + 2(n−1)/n · bytes / bandwidth
    ring all-gather         (n−1) steps of bytes/n each (bytes: the whole gathered result)
    ring reduce-scatter     the same as an all-gather (bytes: the whole input)

2(n−1)/n·bytes is also what each rank sends in a ring all-reduce (traffic.ring_bytes, which the
engine and the accounting count), so a collective takes (bytes sent) / bandwidth plus its steps'
latency. Pure arithmetic: no torch,
no processes; any unit of time, as long as bandwidth and latency use the same one (the simulator
uses milliseconds, the planner seconds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..traffic import TrafficKind, ring_attention_steps, ring_steps


@dataclass(frozen=True)
class Link:
    """One kind of link: bandwidth in bytes per unit time (each direction, per GPU), latency per
    message or ring step in the same unit."""

    bandwidth: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        if not self.bandwidth > 0 or not self.latency >= 0 or math.isnan(self.latency):
            raise ValueError(
                f"a link needs bandwidth > 0 and latency >= 0, got bandwidth={self.bandwidth!r}, "
                f"latency={self.latency!r}"
            )

    def send(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Network:
    """The links of a cluster: `inside` a node, `between` nodes, `gpus_per_node` ranks per node
    (None: every rank on one node). One link for everything (one machine, or a calibrated run):
    Network.uniform(link). `axes`: links of their own for the talk of some mesh axes, whatever
    the ranks' places (a calibrated run's: ring attention's steps, timed apart from the rest)."""

    inside: Link
    between: Link
    gpus_per_node: int | None = 8
    axes: tuple[tuple[str, Link], ...] = ()

    def __post_init__(self) -> None:
        g = self.gpus_per_node
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise ValueError(f"gpus_per_node must be a whole number >= 1 (or None: one node), got {g!r}")

    @classmethod
    def uniform(cls, link: Link, axes: dict[str, Link] | None = None) -> Network:
        """Every rank on one node: one link for all groups (but those of `axes`)."""
        return cls(link, link, gpus_per_node=None, axes=tuple((axes or {}).items()))

    # -- which link ----------------------------------------------------------------------------
    def node(self, rank: int) -> int:
        return 0 if self.gpus_per_node is None else rank // self.gpus_per_node

    def link(self, ranks: Iterable[int], axis: str | None = None) -> Link:
        """The link a group talks over: `axis`'s own if it has one, else inside a node when all its
        ranks share one."""
        for name, own in self.axes:
            if name == axis:
                return own
        return self.inside if len({self.node(r) for r in ranks}) <= 1 else self.between

    def where(self, ranks: Iterable[int]) -> str:
        return "inside a node" if self.link(ranks) is self.inside else "between nodes"

    # -- what it costs -------------------------------------------------------------------------
    def send(self, nbytes: float, src: int, dst: int) -> float:
        """One point-to-point message from global rank src to dst (between pipeline stages)."""
        return self.link((src, dst), "pp").send(nbytes)

    def collective(self, kind: TrafficKind | str, nbytes: float, ranks: Sequence[int]) -> float:
        """Time of one ring collective over `ranks` (`kind`: a collective TrafficKind or name):
        `nbytes` is the buffer all-reduced, the whole result of an all-gather, or the whole input
        of a reduce-scatter."""
        return ring(kind, nbytes, len(ranks), self.link(ranks, kind.axis if isinstance(kind, TrafficKind) else None))

    def all_reduce(self, nbytes: float, ranks: Sequence[int]) -> float:
        return self.collective("all-reduce", nbytes, ranks)

    def all_gather(self, nbytes: float, ranks: Sequence[int]) -> float:
        return self.collective("all-gather", nbytes, ranks)

    def ring_step(self, nbytes: float, ranks: Sequence[int]) -> float:
        """One step of ring attention over `ranks`: each sends `nbytes` to the next at once, so
        the step takes a message's time on the group's link (a ring is as slow as its slowest hop)."""
        return self.link(ranks, "cp").send(nbytes) if len(ranks) > 1 else 0.0

    def talk(self, kind: TrafficKind, nbytes: float, ranks: Sequence[int]) -> float:
        """What an action's collective or ring attention step of `nbytes` costs over `ranks`."""
        return self.collective(kind, nbytes, ranks) if kind.is_collective else self.ring_step(nbytes, ranks)


def ring_attention_time(phase: str, kv_bytes: float, cp: int, link: Link) -> float:
    """Ring attention's exchange in one attention layer's `phase` for one micro-batch (`kv_bytes`:
    a rank's K and V blocks): its steps (traffic.ring_attention_steps) one after another on `link`."""
    return sum(link.send(nbytes) for nbytes in ring_attention_steps(phase, kv_bytes, cp))


def ring(kind: TrafficKind | str, nbytes: float, n: int, link: Link) -> float:
    """One ring collective of n ranks on `link`: its steps, each latency + (nbytes/n)/bandwidth."""
    if n <= 1:
        return 0.0
    return ring_steps(kind, n) * (link.latency + nbytes / n / link.bandwidth)
