"""What a failed wait on a peer becomes: a CommError that names the ranks and says why.

The pipeline's messages (engine/comm.py) and the collectives of data and tensor parallelism
(data.py, tensor.py) all wait on peers, and all turn a failed wait into a CommError, which the
launcher (engine/workers.py) reads to blame the right rank: `reason` says what happened, `peer`
the rank waited for, `group` the ranks of a collective.

Why a wait failed is not read off torch's error: on gloo (torch 2.13) a receive or collective
that timed out and one whose peer's connection closed both raise a plain RuntimeError, told
apart only by its text. minipipe bounds its waits itself, so it knows: a wait that failed once
its timeout had passed timed out ("timeout": the peer is stuck or slow); one that failed before
lost its peer ("lost": the peer died or left). A collective whose bound is the process group's
own, not told to the caller, "failed" (hung or died: the launcher checks which).
"""

from __future__ import annotations

import time

import torch.distributed as dist

REASONS = ("timeout", "lost", "failed", "order")  # "order": the ranks disagree on what to send when


class CommError(RuntimeError):
    """A receive, send or collective that timed out or lost a peer; the message names the ranks.
    `peer`: the rank waited for, when one is; `group`: the ranks of a collective that failed;
    `reason`: one of REASONS."""

    def __init__(
        self, message: str, peer: int | None = None, reason: str = "order", group: tuple[int, ...] | None = None
    ):
        if reason not in REASONS:
            raise ValueError(f"unknown CommError reason {reason!r}; choose one of {', '.join(REASONS)}")
        super().__init__(message)
        self.peer, self.reason, self.group = peer, reason, group


def failure_reason(started: float, timeout: float | None) -> str:
    """Why a wait that began at `started` (time.monotonic()) and has just failed did: "timeout"
    if it lasted (nearly) its `timeout` in seconds, "lost" if it gave up sooner, "failed" when
    no bound is known (None)."""
    if timeout is None:
        return "failed"
    return "timeout" if time.monotonic() - started >= 0.9 * timeout else "lost"


def first_line(error: BaseException) -> str:
    """The first line of an error's text, for people (gloo's next lines are a C++ stack)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def collective_failed(what: str, group, error: Exception, started: float, timeout: float | None = None) -> CommError:
    """A readable CommError for a collective (an all-reduce of tensor or data parallelism) that
    gloo or NCCL gave up on: which group, and whether it timed out or lost a rank (`started`:
    time.monotonic() when the collective began; `timeout`: its bound in seconds, None when it is
    the process group's own)."""
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
    me, reason = dist.get_rank(), failure_reason(started, timeout)
    if reason == "timeout":
        return CommError(
            f"rank {me} timed out after {timeout:g} s in {what} with ranks {list(ranks)}; one of them "
            f"may be stuck or slow (raise `timeout` if it is only slow)",
            None,
            reason,
            ranks,
        )
    if reason == "lost":
        return CommError(
            f"rank {me} lost a peer in {what} with ranks {list(ranks)}: {first_line(error)}", None, reason, ranks
        )
    return CommError(
        f"rank {me} failed after {time.monotonic() - started:.3g} s in {what} with ranks {list(ranks)} "
        f"(a peer is stuck or died): {first_line(error)}",
        None,
        reason,
        ranks,
    )
