"""Whom to blame when a run fails: a pure function of what the watchdog saw.

When one rank fails, the others notice soon after: a peer's connection closes under them, or a
wait for it times out. Each rank that notices reports its own error and exits, so the caller
sees several reports and exit codes, in an order that timing sets. `blame(seen, jobs, settled)`
decides from those facts alone, the same way whatever order they came in:

1. A rank that died without a report (killed, `os._exit`, a crash) caused it: nothing in the
   run stops a rank that way. Several such ranks: the lowest is named and the others listed.
2. Else a rank that reported an error of its own (it raised, or timed out waiting on a peer)
   caused it: the first such report, errors before timeouts, since a rank that times out
   usually waits on another that failed. A timeout names its peer when that peer was busy in
   its own work ("stopped responding").
3. Else wait (return None) until the facts settle: every rank has exited and every report is
   in, or the caller says so. A report that only may come from a peer's death (torch.distributed
   raises a plain RuntimeError either way) may yet be explained by a death not seen yet, and one
   that says "lost a peer" surely is. Then name a rank that exited without its report arriving
   (the peer a report lost, if it is one of them), else the first report that may be its own
   error, else the first report.

A rank that exited with REPORTED has sent its report; until it arrives the verdict waits. The
watchdog (workers.launch) gathers the facts, calls `blame` as they come, and raises its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

STATES = ("starting", "compute", "wait", "barrier", "done")
REPORTED = 1  # the exit code of a worker that reported its error first (workers._worker)


class WorkerError(RuntimeError):
    """A worker failed; `rank`, `step` and `action` say where."""

    def __init__(self, message: str, rank: int | None = None, step: int | None = None, action: str | None = None):
        super().__init__(message)
        self.rank, self.step, self.action = rank, step, action


@dataclass(frozen=True)
class Seen:
    """What the watchdog knows about a failing group of processes, at one moment."""

    exits: tuple  # per rank: its exit code, or None while it runs
    finished: tuple  # per rank: True once it returned every job's result
    reports: tuple = ()  # the error reports received, in arrival order (workers._worker writes them)
    status: tuple = ()  # the shared status array: per rank (job, step, action index, state index)

    def dead(self, rank: int) -> bool:
        code = self.exits[rank]
        return code is not None and code != 0 and not self.finished[rank]

    @property
    def failing(self) -> bool:
        return bool(self.reports) or any(self.dead(r) for r in range(len(self.exits)))


LOST, MAYBE, OWN = "lost", "maybe", "own"


def kind_of(report: dict) -> str:
    """LOST: the rank noticed another's failure (CommError.reason: a wait that gave up early, or a
    collective that failed); MAYBE: a plain RuntimeError, which torch.distributed also raises for a
    peer's death (workers._report sets `peer_may_have_died`); OWN: an error of the rank's own."""
    if report.get("reason") in ("lost", "failed"):
        return LOST
    return MAYBE if report.get("peer_may_have_died") else OWN


def blame(seen: Seen, jobs, settled: bool) -> WorkerError | None:
    """The error to raise for this failure, or None while the facts may still change the answer
    (`settled`: they will not, stop waiting). See the module docstring for the rules."""
    world = len(seen.exits)
    reporters = {rep["rank"] for rep in seen.reports}
    unreported = [r for r in range(world) if seen.dead(r) and r not in reporters]
    silent = [r for r in unreported if seen.exits[r] != REPORTED]
    if silent:
        return died(seen, jobs, silent[0], silent[1:])
    own = [rep for rep in seen.reports if kind_of(rep) == OWN]
    if own:
        first = min(own, key=lambda rep: rep.get("reason") == "timeout")  # stable: arrival order within each
        return failed(seen, jobs, first)
    everything_in = all(code is not None for code in seen.exits) and not unreported
    if not (settled or everything_in):
        return None  # a report is on its way, or the rank that died first is not seen yet
    if unreported:  # exited as if it had reported, but no report of its own ever came
        named = [rep.get("peer") for rep in seen.reports if rep.get("peer") in unreported][:1] or unreported[:1]
        return died(seen, jobs, named[0], [r for r in unreported if r != named[0]])
    maybe = [rep for rep in seen.reports if kind_of(rep) == MAYBE]
    return failed(seen, jobs, (maybe or list(seen.reports))[0]) if seen.reports else None


def died(seen: Seen, jobs, rank: int, others) -> WorkerError:
    job, step, index, state = status_of(seen.status, rank)
    where = doing(jobs, seen.status, rank) + (" (its own output above says why)" if state == "starting" else "")
    also = "".join(f"; {who(jobs, r)} also died ({_how(seen.exits[r])})" for r in others)
    return WorkerError(
        f"{who(jobs, rank)} died ({_how(seen.exits[rank])}) {where}{also}.\n"
        + status_table(seen.status, jobs, len(seen.exits)),
        rank=rank,
        step=step,
        action=action_at(jobs[job], rank, index),
    )


def failed(seen: Seen, jobs, data: dict) -> WorkerError:
    """The error a rank reported; a timeout waiting on a peer stuck in its own work blames the peer."""
    world, peer = len(seen.exits), data.get("peer")
    table = status_table(seen.status, jobs, world)
    hung = data.get("reason") in ("timeout", "failed")
    if hung and peer is None and data.get("group"):
        # a collective timed out: blame a member of its group that is stuck in its own work
        stuck = [r for r in data["group"] if r != data["rank"] and status_of(seen.status, r)[3] == "compute"]
        peer = stuck[0] if stuck else None
    if hung and peer is not None:
        job, step, index, state = status_of(seen.status, peer)
        action = action_at(jobs[job], peer, index)
        if state == "compute":
            return WorkerError(
                f"{who(jobs, peer)} stopped responding in step {step} at action {action}: {data['message']}\n{table}",
                rank=peer,
                step=step,
                action=action,
            )
    where = f" in step {data['step']} at action {data['action']}" if data.get("action") else ""
    trace = "" if data.get("plain") else f"\n\n--- traceback of rank {data['rank']} ---\n{data['traceback']}"
    return WorkerError(
        f"{who(jobs, data['rank'])} failed{where}: {data['error']}\n{table}{trace}",
        rank=data["rank"],
        step=data.get("step"),
        action=data.get("action"),
    )


def stalled(status, jobs, world: int, seconds: float) -> WorkerError:
    """No rank moved for longer than any wait may take: blame a rank stuck in its own work."""
    states = [status_of(status, r) for r in range(world)]
    table = status_table(status, jobs, world)
    busy = [r for r in range(world) if states[r][3] == "compute"]
    if busy:
        job, step, index, _ = states[busy[0]]
        action = action_at(jobs[job], busy[0], index)
        return WorkerError(
            f"{who(jobs, busy[0])} stopped responding in step {step} at action {action}: no rank made "
            f"progress for {seconds:.0f} s; stopped the run.\n{table}",
            rank=busy[0],
            step=step,
            action=action,
        )
    starting = [r for r in range(world) if states[r][3] == "starting"]
    if starting:
        names = f"rank {starting[0]}" if len(starting) == 1 else f"ranks {', '.join(map(str, starting))}"
        return WorkerError(
            f"{names} did not finish starting up: no rank made progress for {seconds:.0f} s "
            f"(startup_timeout {max(j.startup_timeout for j in jobs):g} s); stopped the run. Raise "
            f"startup_timeout if starting is only slow on this machine.\n{table}",
            rank=starting[0] if len(starting) == 1 else None,
        )
    return WorkerError(f"no rank made progress for {seconds:.0f} s; stopped the run.\n{table}")


# -- what each rank was doing, in words --------------------------------------------------------
def _how(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def status_of(status, rank: int) -> tuple[int, int, int, str]:
    job, step, index, state = status[4 * rank : 4 * rank + 4]
    return int(job), int(step), int(index), STATES[int(state)]


def action_at(job, rank: int, index: int) -> str | None:
    if job.schedule is None:
        return None
    acts = job.schedule.actions[job.mesh.coords(rank).pp if job.mesh is not None else rank]
    return str(acts[index]) if 0 <= index < len(acts) else None


def who(jobs, rank: int) -> str:
    """'rank 5', and on a mesh with more axes than pp its coordinates: 'rank 5 (pp=1 dp=0 tp=1)' (cp
    and ep where they are split)."""
    mesh = jobs[0].mesh
    if mesh is None or mesh.world == mesh.pp:
        return f"rank {rank}"
    return f"rank {rank} ({mesh.label(rank)})"


def doing(jobs, status, rank: int) -> str:
    job, step, index, state = status_of(status, rank)
    action = action_at(jobs[job], rank, index)
    return {
        "compute": f"in step {step}, running {action}",
        "wait": f"in step {step}, waiting for data to run {action}" if action else f"finishing step {step}'s sends",
        "barrier": f"at the start of step {step}, waiting for the other ranks",
        "starting": "while starting up",
        "done": "after finishing",
    }[state]


def status_table(status, jobs, world: int) -> str:
    return "\n".join(["where each rank was:"] + [f"  {who(jobs, r)}: {doing(jobs, status, r)}" for r in range(world)])
