"""Exercise: beat the search. The learner writes `my_schedule(p, m, cap)` -> one list of actions per
rank on the V placement (stage s on rank s, then back up: rank r holds stages r and 2p − 1 − r),
every rank holding at most `cap` micro-batches' activations. Judged on three challenges where the
engine's search (the zero-bubble paper's heuristic and the hand-written kinds, without the exact
MILP) is known not to be optimal, and on a case drawn afresh: valid, under the cap on every rank (the
simulator's Trace), no slower than the engine's search on each challenge (the simulator), and the
whole model's losses on 2 real processes. The learner's best on each challenge is kept in a small
leaderboard, a JSON file beside the notebook, which a restarted kernel reads back.

While the check runs the learner's function, it may call what ALLOWED names (the actions, the
validator, the simulator and the V's placement, on its own lists): the engine's search (schedule/search.py,
its greedy and its MILP) and its hand-written schedules are refused (grading/watch.py). The bars
are the search's, computed here, in the judge.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import time
from dataclasses import dataclass

from ...schedule.ir import Schedule
from ...schedule.validate import ScheduleError, validate
from ...schedule.vshape import v_placement
from ...sim.costs import Costs
from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from . import schedules as sch
from .guard import ask
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the actions, the validator and the simulator on
# the learner's own lists, and the V's placement
ALLOWED = (
    "minipipe.schedule.ops",
    "minipipe.schedule.ir.Schedule",
    "minipipe.schedule.validate.validate",
    "minipipe.schedule.validate.ScheduleError",
    "minipipe.sim.pipeline.simulate",
    "minipipe.sim.costs.Costs",
    "minipipe.trace.Trace",
    "minipipe.schedule.vshape.v_placement",
)

COSTS = Costs(forward=1.0, backward=2.0, weight=1.0)  # F = I = W = 1 a rank's share, 1/2 a chunk's


@dataclass(frozen=True)
class Challenge:
    p: int
    m: int
    cap: float
    optimum: float  # the exact search's (schedule/milp.py), checked by tests/course/test_exercise_search.py

    @property
    def name(self) -> str:
        return f"p={self.p} m={self.m} cap={self.cap:g}"


CHALLENGES = (Challenge(2, 3, 1.0, 12.5), Challenge(3, 3, 1.5, 14.0), Challenge(2, 4, 1.5, 13.5))
BOARD = "16_beat_the_search.board.json"  # beside the notebook, in the folder it runs in


@functools.cache  # deterministic: each check of a session asks the same three
def the_search(c: Challenge) -> float:
    """The bar: the engine's search on the V placement, its heuristic and the hand-written kinds there."""
    from ...schedule.search import search

    return search(c.p, c.m, COSTS, c.cap, exact=False, placements=("v",)).makespan


def yours(fn, p: int, m: int, cap: float) -> Schedule:
    name = f"{getattr(fn, '__name__', _('your function'))}({p}, {m}, {cap:g})"
    rows = ask(
        fn,
        p,
        m,
        cap,
        name=name,
        advice=_("find the order yourself (the simulator and the validator are yours to use)"),
        take=lambda value: sch.plain_lists(value, name, p),
    )
    return Schedule.build("yours", p, m, 2, rows, v_placement(p))


def peaks(s: Schedule) -> list[float]:
    """Micro-batches' activations each rank holds at most (a chunk is half of one)."""
    return [x / s.v for x in simulate(s, COSTS).peak_inflight()]


class Board:
    """The learner's best makespan on each challenge, in a JSON file that outlives the kernel."""

    def __init__(self, path: str = BOARD):
        self.path = path

    def read(self) -> dict:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # a damaged board is started afresh rather than stop the check
        return data if isinstance(data, dict) else {}

    def record(self, results: dict[str, float]) -> dict:
        board = self.read()
        now = time.strftime("%Y-%m-%d %H:%M")
        for name, span in results.items():
            tries = board.get(name, {}).get("tries", [])
            tries = (tries + [{"makespan": span, "when": now}])[-20:]
            best = min(t["makespan"] for t in tries)
            board[name] = {"best": min(best, board.get(name, {}).get("best", math.inf)), "tries": tries}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(board, f, indent=1)
        os.replace(tmp, self.path)  # a check stopped half-way leaves the old board whole
        return board

    def table(self, bars: dict[str, float]) -> str:
        board = self.read()
        lines = [f"{'challenge':<22}{'your best':>10}{'the search':>11}{'optimum':>9}  tries"]
        for c in CHALLENGES:
            mine = board.get(c.name, {})
            best = mine.get("best")
            mark = " ★ optimal" if best is not None and best <= c.optimum + 1e-9 else ""
            lines.append(
                f"{c.name:<22}{'—' if best is None else f'{best:g}':>10}{bars[c.name]:>11g}{c.optimum:>9g}  "
                f"{len(mine.get('tries', []))}{mark}"
            )
        return "\n".join(lines)


def drawn() -> tuple[int, int, float]:
    """A case that is not one of the challenges (a table of their answers must not answer it)."""
    rng = random.Random()
    while True:
        p = rng.randint(2, 4)
        case = (p, rng.randint(p, 2 * p + 2), rng.choice([1.0, 1.5, 2.0]))
        if case not in {(c.p, c.m, c.cap) for c in CHALLENGES}:
            return case


def check_beat_the_search(my_schedule, board: str = BOARD) -> None:
    """Check the learner's schedules on the challenges and one drawn case; keep the best in `board`."""
    made: dict = {}
    bars = {c.name: the_search(c) for c in CHALLENGES}
    extra = drawn()

    def get(p, m, cap):
        if (p, m, cap) not in made:
            made[p, m, cap] = yours(my_schedule, p, m, cap)
        return made[p, m, cap]

    cases = [(c.p, c.m, c.cap) for c in CHALLENGES] + [extra]

    def valid():
        for case in cases:
            try:
                validate(get(*case))
            except ScheduleError as e:
                raise Mistake(
                    _(
                        "at p={p}, m={m}, cap={cap:g} the validator rejects it:\n{error}",
                        p=case[0],
                        m=case[1],
                        cap=case[2],
                        error=e,
                    )
                ) from None
        return _(
            "the three challenges and p={p}, m={m}, cap={cap:g}, drawn afresh", p=extra[0], m=extra[1], cap=extra[2]
        )

    def under_cap():
        for p, m, cap in cases:
            held = peaks(get(p, m, cap))
            over = [r for r in range(p) if held[r] > cap + 1e-9]
            if over:
                r = over[0]
                raise Mistake(
                    _(
                        "at p={p}, m={m} rank {r} holds {held:g} micro-batches' activations at once (a "
                        "chunk's are half of one, held from its F until its W), over the cap of {cap:g}: run "
                        "a W sooner, or let a micro-batch in later",
                        p=p,
                        m=m,
                        r=r,
                        held=held[r],
                        cap=cap,
                    )
                )
        return _("every rank, every case")

    def no_slower():
        lines = []
        for c in CHALLENGES:
            span = simulate(get(c.p, c.m, c.cap), COSTS).makespan
            if span > bars[c.name] + 1e-9:
                raise Mistake(
                    _(
                        "on {challenge} yours takes {span:g}, the engine's search {bar:g}: {longer:g} longer. Look "
                        "at the timeline for the idle gaps, and at which rank waits on which: a W can fill a gap, "
                        "and it frees memory for the next F",
                        challenge=c.name,
                        span=span,
                        bar=bars[c.name],
                        longer=span - bars[c.name],
                    )
                )
            lines.append(f"{c.name}: {span:g}" + (" " + _("(the optimum)") if span <= c.optimum + 1e-9 else ""))
        return "; ".join(lines)

    def real():
        c = CHALLENGES[2]  # m = 4: the real run's batch of 16 splits into it
        return sch.real_run(lambda p, m: get(p, m, c.cap), _("your schedule"), c.p, c.m)

    verdict(
        [
            (_("valid: every F, I and W on its rank of the V, no deadlock"), valid),
            (_("never above the cap"), under_cap),
            (_("no slower than the engine's search on each challenge"), no_slower),
            (_("a real run on 2 processes: the whole model's losses"), real),
        ]
    )
    Board(board).record({c.name: simulate(get(c.p, c.m, c.cap), COSTS).makespan for c in CHALLENGES})
    print(Board(board).table(bars))
