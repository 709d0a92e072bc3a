"""Data parallelism in the open: what torch's DistributedDataParallel does, one line at a time.

Every replica (one rank of the dp group) holds the same parameters and runs the same pipeline
step on its own shard of the batch. Before the optimizer steps, each gradient is averaged over
the replicas, so every replica takes the same step — the step the whole batch would give.

Averaging one parameter at a time would cost one collective per parameter, each too small to use
the network well; averaging all of them after the backward would leave the network idle during
the backward and the compute idle during the all-reduce. DDP does neither, and nor does this:

- **Buckets.** Parameters are grouped into buckets of at most `bucket_bytes`, in *reverse*
  order: backward finishes the last layers' gradients first, so they fill the first bucket.
- **Overlap.** In a pipeline step each gradient accumulates once per micro-batch (m times). When
  a parameter's gradient has accumulated for the last time in the step it is final; when every
  parameter of a bucket is final, the bucket is flattened into one buffer and its all-reduce
  starts (asynchronously) while the backward of the earlier layers goes on.
- **finish()** at the end of the step waits for every bucket, divides by the dp size (the sum
  becomes a mean; experts divide by more, see GradReducer) and writes the result back into each
  `.grad`.

Buckets are launched strictly in index order, on every replica: collectives match by the order
they are issued, so a replica that launched bucket 2 before bucket 1 would pair its bucket 2 with
its peer's bucket 1. A bucket that is ready early waits for the ones before it. So a parameter
that gets no gradient in a step (a layer forward skipped) holds back its bucket and every later
one until finish(), which sends it as zeros: correct, but without overlap. (DDP's
`find_unused_parameters=True` walks the graph after forward to mark such parameters ready early.)

`overlap=False` launches every bucket in finish(), after the backward: the same bytes, the same
result, no overlap — to show what overlap buys.

Each bucket's record (bytes, when its all-reduce was launched, when finish() began waiting for
it, when it was found complete) lets a timeline draw the collectives and compute how much of
their time hid behind the backward (`overlap_fraction`). `allreduce_bytes_per_step` is the
formula for the bytes each rank sends (traffic.ring_bytes over the buckets, which traffic.buckets
groups as the simulator does). On gloo a collective is only found
complete when waited for (`is_completed()` stays False until `wait()`), so "completed" is an
upper bound of when it really finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..traffic import DEFAULT_BUCKET_BYTES, TrafficKind, buckets, ring_bytes
from .errors import CommError, failure_reason, first_line


def assign_buckets(params: list[torch.Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[list[int]]:
    """Indices into `params`, bucket by bucket (traffic.buckets): reverse order (the last
    parameter, whose gradient backward finishes first, opens the first bucket), at most
    `bucket_bytes` a bucket unless one parameter alone is larger, and one dtype and device per
    bucket (one flat buffer each)."""
    return buckets([p.numel() * p.element_size() for p in params], bucket_bytes, [(p.dtype, p.device) for p in params])


def allreduce_bytes_per_step(params: Iterable[torch.Tensor], n: int, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> float:
    """Bytes one rank of a dp group of n sends per step to average these parameters' gradients:
    the ring formula summed over the buckets (the same as over all the bytes: it is linear)."""
    params = list(params)
    return sum(
        ring_bytes(TrafficKind.DP_ALL_REDUCE, sum(params[i].numel() * params[i].element_size() for i in b), n)
        for b in assign_buckets(params, bucket_bytes)
    )


@dataclass
class BucketRecord:
    """One bucket's all-reduce in one step. Times are the reducer's clock (seconds)."""

    index: int
    nbytes: int  # the flat buffer
    n_params: int
    sent_bytes: float  # traffic.ring_bytes of nbytes over the dp group
    launched_at: float | None = None
    in_backward: bool = False  # launched by a gradient hook (overlap), not by finish()
    waited_at: float | None = None  # finish() began waiting for it
    completed_at: float | None = None  # the wait returned


class GradReducer:
    """Averages the gradients of `params` across the data-parallel process `group`.

    Usage, per step:  backward(s) of the step ... ; reducer.finish(); optimizer.step();
    reducer.reset()  (or reset() at the start of each step).

    `microbatches` (m): how many times each gradient accumulates in one step: once per
    micro-batch, whether by one full backward or by the weight half of a split one. A parameter
    is final after its m-th accumulation. `expected` overrides m for single parameters: a
    parameter used twice in one stage (tied weights, a reused layer) accumulates once per
    micro-batch in a full backward (autograd sums both uses before it accumulates), but twice
    in a split one (minipipe.engine.stage runs each use's weight backward alone): tell the reducer 2m.
    A parameter that accumulates fewer times than expected only loses the overlap (finish()
    reduces it); one that accumulates more raises, since its bucket may have been sent.
    Parameters tied across pipeline ranks are not this class's business.
    `divide_by` (default: the group's size) is what the sum is divided by: experts averaged over
    their edp group divide by the dp × cp ranks whose tokens they saw (engine/experts.py).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        group: dist.ProcessGroup,
        microbatches: int,
        *,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        overlap: bool = True,
        timeout: float = 60.0,
        expected: dict[torch.Tensor, int] | None = None,
        name: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
        divide_by: int | None = None,
    ):
        self.params = [p for p in dict.fromkeys(params) if p.requires_grad]  # a tied parameter once
        if microbatches < 1:
            raise ValueError(f"microbatches must be >= 1, got {microbatches}")
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
        self.group = group
        self.size = dist.get_world_size(group)
        self.divisor = self.size if divide_by is None else divide_by
        self.name = name or f"dp group of ranks {dist.get_process_group_ranks(group)}"
        self.overlap, self.timeout, self.clock = overlap, timeout, clock
        expected = expected or {}
        self.expected = [expected.get(p, microbatches) for p in self.params]

        self.buckets = assign_buckets(self.params, bucket_bytes)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.buffers = [
            torch.empty(
                sum(self.params[i].numel() for i in members),
                dtype=self.params[members[0]].dtype,
                device=self.params[members[0]].device,
            )
            for members in self.buckets
        ]
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook_for(i)) for i, p in enumerate(self.params)]
        self.reset()

    # -- per step --------------------------------------------------------------------------
    def reset(self) -> None:
        """Start a new step: no gradient counted, no bucket sent."""
        self.counts = [0] * len(self.params)
        self.waiting = [len(members) for members in self.buckets]  # parameters not yet final
        self.works: list[dist.Work | None] = [None] * len(self.buckets)
        self.next_launch = 0  # buckets go out in index order
        self.finished = False
        self.finish_started_at: float | None = None
        self.records = [
            BucketRecord(
                b,
                buf.numel() * buf.element_size(),
                len(members),
                ring_bytes(TrafficKind.DP_ALL_REDUCE, buf.numel() * buf.element_size(), self.size),
            )
            for b, (members, buf) in enumerate(zip(self.buckets, self.buffers))
        ]

    def _hook_for(self, i: int):
        def hook(param: torch.Tensor) -> None:
            self._accumulated(i)

        return hook

    def _accumulated(self, i: int) -> None:
        """Called by autograd each time parameter i's .grad has accumulated a gradient."""
        if self.finished:
            raise RuntimeError(
                f"{self.name}: a gradient accumulated after finish(); call reset() before the next step's backward"
            )
        self.counts[i] += 1
        if self.counts[i] > self.expected[i]:
            raise RuntimeError(
                f"{self.name}: parameter {i} {tuple(self.params[i].shape)} accumulated a gradient "
                f"{self.counts[i]} times this step, expected {self.expected[i]}; its bucket may already "
                f"have been sent. Tied or reused parameters: pass expected={{param: count}}"
            )
        if self.counts[i] == self.expected[i]:
            b = self.bucket_of[i]
            self.waiting[b] -= 1
            if self.overlap:
                self._launch_ready(in_backward=True)

    def _launch_ready(self, in_backward: bool) -> None:
        while self.next_launch < len(self.buckets) and self.waiting[self.next_launch] == 0:
            self._launch(self.next_launch, in_backward)

    def _launch(self, b: int, in_backward: bool) -> None:
        """Flatten bucket b's gradients into its buffer and start summing it across the group."""
        buf, offset = self.buffers[b], 0
        for i in self.buckets[b]:
            p, n = self.params[i], self.params[i].numel()
            if p.grad is None:  # unused this step: still take part, every replica sends the same buckets
                buf[offset : offset + n].zero_()
            else:
                buf[offset : offset + n].copy_(p.grad.reshape(-1))
            offset += n
        record = self.records[b]
        record.launched_at, record.in_backward = self.clock(), in_backward
        if self.size > 1:
            try:
                self.works[b] = dist.all_reduce(buf, group=self.group, async_op=True)
            except RuntimeError as e:  # posting does not wait: a peer has gone
                raise CommError(
                    f"{self.name}: starting the all-reduce of bucket {b} failed (a peer may have died): "
                    f"{first_line(e)}",
                    None,
                    "lost",
                    self._ranks(),
                ) from e
        self.next_launch = b + 1

    def finish(self) -> None:
        """End of the step: send what is left, wait for every bucket, write the means into .grad."""
        if self.finished:
            raise RuntimeError(f"{self.name}: finish() called twice in one step; call reset() between steps")
        self.finish_started_at = self.clock()
        for b in range(self.next_launch, len(self.buckets)):  # not overlapped, or not every gradient came
            self._launch(b, in_backward=False)
        for b, members in enumerate(self.buckets):
            record = self.records[b]
            record.waited_at, started = self.clock(), time.monotonic()
            if self.works[b] is not None:
                try:
                    self.works[b].wait(timeout=timedelta(seconds=self.timeout))
                except RuntimeError as e:  # the launcher blames a stuck (or dead) member of the group
                    reason = failure_reason(started, self.timeout)
                    raise CommError(
                        f"{self.name}: the all-reduce of gradient bucket {b} ({record.nbytes:,} bytes) "
                        + (
                            f"did not complete within {self.timeout:g} s; a peer in the {self.name} is hung, "
                            f"or did not run the same step (raise `timeout` if it is only slow)"
                            if reason == "timeout"
                            else "lost a peer"
                        )
                        + f": {first_line(e)}",
                        None,
                        reason,
                        self._ranks(),
                    ) from e
            record.completed_at = self.clock()
            buf = self.buffers[b]
            buf.div_(self.divisor)
            offset = 0
            for i in members:
                p, n = self.params[i], self.params[i].numel()
                mean = buf[offset : offset + n].view_as(p)
                if p.grad is None:
                    p.grad = mean.clone()
                else:
                    p.grad.copy_(mean)
                offset += n
        self.works = [None] * len(self.buckets)
        self.finished = True

    def _ranks(self) -> tuple[int, ...]:
        return tuple(dist.get_process_group_ranks(self.group))

    # -- accounting ------------------------------------------------------------------------
    @property
    def sent_bytes(self) -> float:
        """Bytes this rank sent for the step's all-reduces (ring formula, launched buckets)."""
        return sum(r.sent_bytes for r in self.records if r.launched_at is not None)

    @property
    def buffer_bytes(self) -> int:
        """Memory the flat buckets hold: one more copy of the gradients (as in DDP)."""
        return sum(buf.numel() * buf.element_size() for buf in self.buffers)

    def overlap_fraction(self, until: float | None = None) -> float:
        """Of the time the step's all-reduces were in flight (launch to found complete), the share
        before `until` (default: when finish() began), i.e. hidden behind the backward and
        whatever else the rank did before finish(). Summed over buckets; 0 without overlap."""
        until = self.finish_started_at if until is None else until
        total = hidden = 0.0
        for r in self.records:
            if r.launched_at is None or r.completed_at is None:
                continue
            total += r.completed_at - r.launched_at
            hidden += max(0.0, min(until, r.completed_at) - r.launched_at)
        return hidden / total if total > 0 else 0.0

    def close(self) -> None:
        """Remove the gradient hooks (the parameters go back to plain autograd)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
