"""Weight stashing: one stage's weight versions under a schedule without a flush (schedule/updates.py).

The stage's module holds the live weights, the newest version, and the stage's optimizer steps
them. A micro-batch's forward runs on a *snapshot* of the version the schedule says it uses: a copy
of the module whose parameters share that version's storage. Autograd's backward walks the graph
that forward built, so the backward computes with the forward's weights even after the live ones
moved on (PipeDream's weight stashing; a backward with the newest weights would compute a gradient
no forward ever had).

Nothing is copied until an update would overwrite a version that a micro-batch still needs: then
the live weights move to other storage first and the old storage stays with the snapshot. A
version's storage is let go when it is superseded and its last user's backward is done, and kept
for the next move (a fresh allocation each update costs a page fault per page touched: measured
here at 5-10 times the optimizer step itself). So the memory holds exactly the versions the rule
needs (PipeDream-2BW: two), and `allocated` counts the copies of the weights it ever made.

After each backward the micro-batch's gradients move from its snapshot into the sum of its update
(in place, as autograd sums a flushed step's); an update is made when its last gradient is in (one
optimizer step on the live weights, in the schedule's order of updates).
"""

from __future__ import annotations

import copy
from collections import Counter

import torch
from torch import nn

from ..schedule.updates import VersionPlan


class WeightStash:
    def __init__(self, stage: int, module: nn.Module, versions: VersionPlan, optimizer: torch.optim.Optimizer):
        self.stage, self.module, self.optimizer = stage, module, optimizer
        self.live = list(module.parameters())
        self.uses, self.into = versions.uses[stage], versions.into[stage]
        self.users = Counter(self.uses)  # version -> micro-batches whose backward with it is still to run
        self.left = Counter(self.into)  # update -> gradients still to come
        self.sums: dict[int, list] = {}  # update -> the summed gradients so far, one per parameter
        self.newest = 0
        self.snapshots: dict[int, nn.Module] = {}  # version -> a module on that version's storage
        self.spare: list[nn.Module] = []  # snapshots let go, kept to be pointed at a later version
        self.storage: list[list[torch.Tensor]] = []  # a version's tensors let go, for the live weights' next move
        self.ran_on: dict[int, nn.Module] = {}  # micro-batch -> the snapshot its forward ran on
        self.peak_versions = 1
        self.allocated = 0  # copies of the weights made besides the live ones
        self.bytes_per_version = sum(p.numel() * p.element_size() for p in self.live)

    def module_for(self, mb: int) -> nn.Module:
        """The module micro-batch mb's forward runs on: a snapshot of the version it uses."""
        v = self.uses[mb]
        snap = self.snapshots.get(v)
        if snap is None:
            if v != self.newest:  # the validator proves every version is made, and kept while used
                raise RuntimeError(
                    f"stage {self.stage}: micro-batch {mb} uses weight version {v}, but the stage holds "
                    f"{sorted(self.snapshots)} and the newest, {self.newest}"
                )
            snap = self.snapshots[v] = self._snapshot()
        self.ran_on[mb] = snap
        return snap

    def backward_done(self, mb: int) -> None:
        """Micro-batch mb's backward ran: add its gradients to its update's sum, make the updates
        that are now whole, let go of the versions nobody needs any more."""
        grads = []
        for p in self.ran_on.pop(mb).parameters():
            grads.append(p.grad)
            p.grad = None
        k = self.into[mb]
        total = self.sums.get(k)
        if total is None:
            self.sums[k] = grads
        else:
            self.sums[k] = [g if t is None else t if g is None else t.add_(g) for t, g in zip(total, grads)]
        self.users[self.uses[mb]] -= 1
        self.left[k] -= 1
        self._let_go_unused()
        while self.left.get(self.newest) == 0:  # updates are made in order, each when whole
            self._update()
            self._let_go_unused()

    def _let_go_unused(self) -> None:
        for v in [v for v in self.snapshots if v < self.newest and self.users[v] == 0]:
            self._let_go(v)

    def _update(self) -> None:
        """Update number `newest`: one optimizer step on the live weights makes version newest + 1."""
        k = self.newest
        if self.users[k] > 0:  # still to be used: keep this version's storage for its snapshot
            if k not in self.snapshots:
                self.snapshots[k] = self._snapshot()
            self._move_live()
        elif k in self.snapshots:
            self._let_go(k)
        for p, g in zip(self.live, self.sums.pop(k)):
            p.grad = g
        self.optimizer.step()
        for p in self.live:
            p.grad = None
        self.newest = k + 1
        held = len(self.snapshots) + 1  # the stashed versions, and the live weights
        self.peak_versions = max(self.peak_versions, held)

    def _move_live(self) -> None:
        """The live weights onto other storage, a copy of them: their old storage is a snapshot's now."""
        if self.storage:
            room = self.storage.pop()
        else:
            room = [torch.empty_like(p) for p in self.live]
            self.allocated += 1
        for p, t in zip(self.live, room):
            t.copy_(p.data)
            p.data = t

    def _snapshot(self) -> nn.Module:
        """A module on the live weights' storage (the newest version), without copying it."""
        snap = self.spare.pop() if self.spare else copy.deepcopy(self.module)
        for mine, live in zip(snap.parameters(), self.live):
            mine.data = live.data
        return snap

    def _let_go(self, version: int) -> None:
        snap = self.snapshots.pop(version)
        params = list(snap.parameters())
        if version < self.newest:  # its own storage (the newest shares the live weights')
            self.storage.append([p.data for p in params])
        for p in params:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        self.spare.append(snap)

    @property
    def stashed_bytes(self) -> int:
        """Bytes of the copies of the weights made besides the live ones: each a whole copy of the
        stage's weights, kept from the first time it was needed."""
        return self.allocated * self.bytes_per_version
