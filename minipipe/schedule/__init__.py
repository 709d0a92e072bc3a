"""The schedule IR: a pipeline schedule is data, one ordered list of actions per rank.

    ops.py         `OpType` (torch's _ComputationType: F, B, I, W, the sends and receives, FSDP's
                   unshard, reshard and gradient reduction), `Action`, and what each op needs and keeps
    ir.py          `Schedule`: the per-rank lists, their text form and the grid
    generators.py  naive, GPipe, 1F1B, interleaved, ZB-H1, breadth-first, inference: pure (p, m[, v]) -> Schedule
    vshape.py      the V placement's kinds: ZB-V, DualPipe-V
    kinds.py       the registry: each kind's generator, rules and textbook formulas, declared once
    makespans.py   the built-in kinds' step-time formulas, each saying where it holds
    rounds.py      `Rounds`: a forward-only schedule repeated, each round fed the last stage's output (generation)
    replay.py      running the lists in dependency order on paper (the validator's and simulator's core)
    validate.py    completeness, placement, deadlock freedom; written sends, receives and FSDP actions
    deadlock.py    the replay with a deadlock explained: the cycle of waits, in words and marked
    errors.py      `ScheduleError`: the reason, and the grid with the actions it names marked
    lowering.py    the derived sends, receives and FSDP actions written out (torch's lowering passes)
    theory.py      the textbook formulas, read from the registry
    search.py      the shortest schedule under a memory cap: the hand-written kinds that fit, the heuristic
                   (zb_greedy.py: the zero-bubble paper's greedy) and, where small, the optimum (milp.py, SciPy)

Nothing here imports torch or starts a process.
"""

from . import kinds, theory
from .ir import Schedule, grid
from .kinds import Kind, make_schedule, register
from .ops import OPS, Action, OpType
from .validate import ScheduleError, validate

__all__ = [
    "Action",
    "OPS",
    "OpType",
    "Schedule",
    "grid",
    "Kind",
    "kinds",
    "make_schedule",
    "register",
    "theory",
    "ScheduleError",
    "validate",
]
