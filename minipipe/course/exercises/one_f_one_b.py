"""Exercise 03: write 1F1B, `one_f_one_b(p, m)` -> one list of actions per rank."""
from __future__ import annotations

from ...sim.pipeline import simulate
from . import schedules as sch
from .verdict import Mistake, verdict

# typical sizes first, so that a verdict shows a case worth reading; m < p included
CASES = [(p, m) for p in (3, 4, 2, 5, 1) for m in (6, 4, 9, 2, 3, 1)]


def _warmups(s) -> str:
    return ("forwards before the first backward, yours: " + ", ".join(f"rank {r}: {sch.warmup(s, r)}" for r in range(s.p))
            + "; 1F1B's: " + ", ".join(f"rank {r}: {min(s.p - r, s.m)}" for r in range(s.p)))


def _explain_slow(s, mine, right) -> str:
    short = [r for r in range(s.p) if sch.warmup(s, r) < min(s.p - r, s.m)]
    if short:
        r = short[0]
        return (f"Rank {r} runs {sch.warmup(s, r)} forward(s) before its first backward, then waits for a gradient "
                f"that cannot have come back yet: its warm-up is too short. In 1F1B rank r runs p − r forwards "
                f"(at most m) before its first backward: the p − r − 1 of the warm-up, then the steady state's "
                f"first.\n{_warmups(s)}")
    return ""


def _peaks(fn) -> str:
    for p, m in CASES:
        s = sch.generate(fn, p, m)
        peaks = simulate(s, sch.COSTS).peak_inflight()
        want = [min(p - r, m) for r in range(p)]
        if peaks != want:
            r = next(r for r in range(p) if peaks[r] != want[r])
            why, ahead = "", sch.warmup(s, r)
            if ahead == want[r] + 1:
                why = (f" It runs {ahead} forwards before its first backward, one too many: an off-by-one "
                       f"warm-up. Rank r's warm-up is p − r − 1 forwards, then one forward and one backward in turn.")
            elif ahead == m > want[r]:
                why = " It runs every forward before its first backward: that is GPipe's order, not 1F1B's."
            raise Mistake(f"at p={p}, m={m} rank {r} holds up to {peaks[r]} micro-batches at once; in 1F1B rank r holds "
                          f"at most min(p − r, m), here {want[r]}.{why}\n{_warmups(s)}")
    return "rank r holds at most min(p − r, m) micro-batches"


def check_one_f_one_b(one_f_one_b) -> None:
    """Check the learner's 1F1B: valid (m < p too), as fast as GPipe, each rank's peak in-flight
    micro-batches min(p − r, m), and the whole model's losses on 2 real processes."""
    verdict([
        ("valid: every forward and backward, on its rank, no deadlock", lambda: sch.valid(one_f_one_b, CASES)),
        ("makespan under a cost model", lambda: sch.makespan_like(one_f_one_b, "1f1b", CASES, _explain_slow)),
        ("peak in-flight micro-batches on each rank", lambda: _peaks(one_f_one_b)),
        ("a real run on 2 processes", lambda: sch.real_run(one_f_one_b, "your 1F1B")),
    ])
