"""Ranks as threads of this process, for checking a learner's collectives in seconds, before any
worker process starts.

While `ThreadWorld.run(body)` runs `body(rank)` on `size` threads, `torch.distributed.all_reduce`
(and `get_rank`, `get_world_size`) are played by the world: each rank's tensor waits at a barrier
for the others', and every rank gets their sum, in place, as gloo would give it. It logs each
rank's collectives (`calls[rank]`: the number of elements of each all-reduce, in order), so a
checker can see how the learner's code talks, not only what it computes. A rank that all-reduces
while another does not is reported as such, after `timeout` seconds, instead of hanging.

The learner's code must call the collective through the module (`dist.all_reduce(...)` with
`import torch.distributed as dist`, or `torch.distributed.all_reduce(...)`), which is how the
world stands in for it; a name imported beforehand reaches torch's own, which says that no process
group exists, and `run` says how to call it instead. `ThreadWorld.group` is what a checker hands the
learner's code as its process group (not None: a learner's code may rightly insist on one).
"""

from __future__ import annotations

import threading
from unittest import mock

import torch
import torch.distributed as dist

from ..grading.harness import harness
from ..i18n.messages import say as _
from .verdict import Mistake, Unfinished


@harness
class _Done:
    """What an async all-reduce returns here: it has already completed."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


class _RankStuck(Exception):
    pass


class _Group:
    """What the world hands the learner's code as its process group: the ranks of this world, as
    torch's ProcessGroup says them (size(), rank())."""

    def __init__(self, world: ThreadWorld):
        self.world = world

    def size(self) -> int:
        return self.world.size

    def rank(self) -> int:
        return self.world.local.rank

    def __repr__(self) -> str:
        return f"<the checker's group of {self.world.size} ranks (threads)>"


class ThreadWorld:
    def __init__(self, size: int, timeout: float = 5.0):
        self.size, self.timeout = size, timeout
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.slots: list = [None] * size
        self.calls: list[list[int]] = [[] for _ in range(size)]
        self.local = threading.local()
        self.group = _Group(self)  # pass it where the learner's code takes a group

    # -- the stand-ins (the learner's code calls them: the checker's harness, grading/harness.py) ----
    @harness
    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        rank = self.local.rank
        if op != dist.ReduceOp.SUM:
            raise Mistake(
                _(
                    "rank {rank} all-reduced with op={op}; gloo (the CPU backend) only sums here: all-reduce "
                    "with the default op, the sum, and divide afterwards where a mean is wanted",
                    rank=rank,
                    op=op,
                )
            )
        if not torch.is_tensor(tensor):
            raise Mistake(
                _(
                    "rank {rank} all-reduced {kind} {tensor!r:.40}; all_reduce takes a tensor and sums it in place",
                    rank=rank,
                    kind=type(tensor).__name__,
                    tensor=tensor,
                )
            )
        self.calls[rank].append(tensor.numel())
        self.slots[rank] = tensor.detach().clone()
        self._meet(rank)
        shapes = {tuple(t.shape) for t in self.slots}
        if len(shapes) > 1:
            self._meet(rank)
            raise Mistake(
                _(
                    "the ranks all-reduced tensors of different shapes together ({shapes}): every rank must run "
                    "the same collectives, on tensors of the same shape, in the same order",
                    shapes=", ".join(map(str, shapes)),
                )
            )
        total = torch.stack(self.slots).sum(dim=0)
        self._meet(rank)
        with torch.no_grad():
            tensor.copy_(total)
        return _Done() if async_op else None

    @harness
    def _meet(self, rank):
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise _RankStuck() from None

    @harness
    def get_rank(self, group=None):
        return self.local.rank

    @harness
    def get_world_size(self, group=None):
        return self.size

    # -- running -----------------------------------------------------------------------------
    def run(self, body, what: str, learner: str = "") -> list:
        """`body(rank)` on every rank's thread; their results, in rank order. `what` names the run
        in messages, `learner` the learner's code that `body` calls (for "not done yet"; "your code" if not
        given)."""
        results, errors = [None] * self.size, [None] * self.size

        def rank_main(rank):
            self.local.rank = rank
            try:
                results[rank] = body(rank)
            except BaseException as e:  # kept for the caller, who raises the first that matters
                errors[rank] = e
                self.barrier.abort()  # a peer waiting for this rank's collective stops waiting

        patches = [
            mock.patch.object(dist, name, getattr(self, name)) for name in ("all_reduce", "get_rank", "get_world_size")
        ]
        for patch in patches:
            patch.start()
        try:
            threads = [
                threading.Thread(target=rank_main, args=(r,), name=f"rank {r}", daemon=True) for r in range(self.size)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=10 * self.timeout)
            if any(t.is_alive() for t in threads):
                raise Mistake(
                    _(
                        "{what}: a rank did not finish within {limit:g} s; does your code loop forever?",
                        what=what,
                        limit=10 * self.timeout,
                    )
                )
        finally:
            for patch in patches:
                patch.stop()
        real = [(r, e) for r, e in enumerate(errors) if e is not None and not isinstance(e, _RankStuck)]
        if real:
            rank, first = real[0]
            if isinstance(first, NotImplementedError):
                raise Unfinished(learner or _("your code"))
            if isinstance(first, (Mistake, Unfinished)) or not isinstance(first, Exception):
                raise first  # a checker's verdict, or the guard's: an engine answer was reached
            if "process group" in str(first).lower():
                raise Mistake(
                    _(
                        "{what}: {kind}: {error}. Call the collective through the module, "
                        "dist.all_reduce(tensor, group=group) (import torch.distributed as dist), so that this "
                        "check can stand in for the other ranks",
                        what=what,
                        kind=type(first).__name__,
                        error=first,
                    )
                ) from None
            raise Mistake(
                _(
                    "{what}: on rank {rank} your code raised {kind}: {error}",
                    what=what,
                    rank=rank,
                    kind=type(first).__name__,
                    error=first,
                ),
                raised=first,
            ) from None
        if any(isinstance(e, _RankStuck) for e in errors):
            counts = ", ".join(_("rank {r} {n}", r=r, n=len(c)) for r, c in enumerate(self.calls))
            raise Mistake(
                _(
                    "{what}: the ranks did not run the same collectives (all-reduces so far: {counts}); one "
                    "waited {timeout:g} s for a partner that never came. Every rank must all-reduce the "
                    "same tensors in the same order",
                    what=what,
                    counts=counts,
                    timeout=self.timeout,
                )
            )
        return results
