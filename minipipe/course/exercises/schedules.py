"""What the exercises share where the learner writes a schedule (GPipe, 1F1B, the deadlock,
interleaved 1F1B, ZB-H1): reading the learner's action lists with the engine's schedules out of
reach, the cases to try them on, and the properties every schedule must have.

The learner's function returns plain lists, one per rank, of actions (`F(0, 1)` or the text
"0F1"); a Schedule object is refused, since the check judges the lists themselves. Nothing is
compared with a copy of the engine's output: a schedule is checked against properties
(complete, each action on its rank, no deadlock, the step time of the textbook formula, the
micro-batches each rank holds, its warm-up). The cases are a fixed few, the typical ones first so
that a verdict shows a case worth reading, then some drawn afresh at every check, one of them
larger than any table of pasted answers would hold.
"""

from __future__ import annotations

import random

from ...schedule.ir import Schedule
from ...schedule.ops import Action
from ...schedule.validate import ScheduleError, validate
from ...sim.costs import Costs
from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from .guard import ask
from .runs import TINY, run_real
from .verdict import Mistake

COSTS = Costs(forward=1.0, backward=2.0)  # time units: a backward costs two forwards
# the large case's ranks are drawn up to LARGE_P: some 10^4 sizes or more with its micro-batches, each a
# schedule of thousands of actions, which no table made beforehand holds (the engine makes one such
# schedule in 0.1-0.8 s here; the check judges it in about a second)
LARGE_P = 48
RUN_P, RUN_M = 2, 4  # the real run


def drawn(n: int, p_range: tuple[int, int], m_of, large_p: int | None = None) -> list[tuple[int, int]]:
    """n cases (p, m) drawn afresh, and with `large_p` one more with p above p_range, up to
    large_p, and a large m: more cases than a table of pasted answers would hold. `m_of(rng, p,
    large)` draws m for a p."""
    rng = random.Random()
    out = []
    for _drawn in range(n):
        p = rng.randint(*p_range)
        out.append((p, m_of(rng, p, False)))
    if large_p:
        p = rng.randint(p_range[1] + 1, large_p)
        out.append((p, m_of(rng, p, True)))
    return out


def plain_lists(value, name: str, p: int) -> list[list[Action]]:
    """The learner's answer as one list of Actions per rank; anything else is a Mistake."""
    if isinstance(value, Schedule):
        raise Mistake(
            _(
                "{name} returned a Schedule object; return the action lists themselves, one plain list per "
                "rank (e.g. [[F(0, 0), B(0, 0)], [F(1, 0), B(1, 0)]]): the check judges your lists",
                name=name,
            )
        )
    if not isinstance(value, list):
        hint = (
            " " + _("(tuples of actions are how a Schedule keeps them: build the lists yourself)")
            if isinstance(value, tuple)
            else ""
        )
        raise Mistake(
            _(
                "{name} returned {kind} {value!r:.60}; return a list with one list of actions "
                "per rank, e.g. [[F(0, 0), B(0, 0)], [F(1, 0), B(1, 0)]] for p=2, m=1",
                name=name,
                kind=type(value).__name__,
                value=value,
            )
            + hint
        )
    if len(value) != p:
        fields = {"name": name, "n": len(value), "p": p}
        raise Mistake(
            _("{name} returned {n} list for p={p} ranks; return one list of actions per rank", **fields)
            if len(value) == 1
            else _("{name} returned {n} lists for p={p} ranks; return one list of actions per rank", **fields)
        )
    rows = []
    for r, acts in enumerate(value):
        if not isinstance(acts, list):
            raise Mistake(
                _(
                    "{name}: rank {r}'s entry is {kind} {acts!r:.40}, not a list of actions",
                    name=name,
                    r=r,
                    kind=type(acts).__name__,
                    acts=acts,
                )
            )
        row = []
        for a in acts:
            if isinstance(a, Action):
                row.append(Action(str(a.op), int(a.stage), int(a.mb)))
            elif isinstance(a, str):
                try:
                    row.append(Action.parse(str(a)))
                except ValueError as e:
                    raise Mistake(_("{name}: rank {r}: {error}", name=name, r=r, error=e)) from None
            else:
                raise Mistake(
                    _(
                        "{name}: rank {r} holds {kind} {action!r:.40}; write actions as F(stage, mb), "
                        "B(stage, mb), ... (from minipipe.schedule.ops) or as text such as '0F1'",
                        name=name,
                        r=r,
                        kind=type(a).__name__,
                        action=a,
                    )
                )
        rows.append(row)
    return rows


class Yours:
    """The learner's generator `fn(p, m)` (or `fn(p, m, v)` for cases of three), called once per
    case with every engine schedule and formula out of reach. `placement(p, v)`, the learner's
    too when given, says which rank owns each stage (default: round robin)."""

    def __init__(self, fn, fixed: list, placement=None):
        self.fn, self.fixed, self.placement = fn, set(fixed), placement
        self.made: dict = {}

    def __call__(self, *case) -> Schedule:
        if case not in self.made:
            p, m, v = (*case, 1)[:3]
            name = f"{getattr(self.fn, '__name__', _('your function'))}({', '.join(map(str, case))})"
            rows = ask(
                self.fn,
                *case,
                name=name,
                advice=_("write the order yourself (F, B and the lists are yours to use)"),
                take=lambda value: plain_lists(value, name, p),
            )
            placement = self.placement(p, v) if self.placement else None
            self.made[case] = Schedule.build("yours", p, m, v, rows, placement)
        return self.made[case]


def _shown(case) -> str:
    return ", ".join(f"{k}={x}" for k, x in zip("pmv", case))


def valid(yours: Yours, cases) -> str:
    """Every case gives a schedule the validator accepts; a rejection shows its marked grid."""
    for case in cases:
        try:
            validate(yours(*case))
        except ScheduleError as e:
            raise Mistake(_("at {case} the validator rejects it:\n{error}", case=_shown(case), error=e)) from None
    fields = {"n": len(cases), "p": max(c[0] for c in cases), "m": max(c[1] for c in cases)}
    if len(cases[0]) > 2:
        return _("{n} cases, p up to {p}, m up to {m}, v up to {v}", v=max(c[2] for c in cases), **fields)
    return _("{n} cases, p up to {p}, m up to {m}", **fields)


def warmup(s: Schedule, rank: int) -> int:
    """Forwards a rank runs before its first backward."""
    acts = s.actions[rank]
    return next((i for i, a in enumerate(acts) if a.op != "F"), len(acts))


def fill_and_drain(p: int, m: int, v: int = 1, costs: Costs = COSTS) -> float:
    """The textbook step time: m micro-batches of work per rank plus p − 1 fill-and-drain slots,
    each a chunk (1/v of a rank's share) long."""
    return (m + (p - 1) / v) * (costs.forward + costs.backward)


def makespan_is(yours: Yours, cases, formula, formula_text: str, explain, costs: Costs = COSTS) -> str:
    """Under `costs` every case takes `formula(*case)`; `explain(s, mine, right)` names a known
    mistake (or returns "")."""
    for case in cases:
        s = yours(*case)
        mine, right = simulate(s, costs).makespan, formula(*case)
        if abs(mine - right) > 1e-9 * max(1.0, right):
            fields = {"case": _shown(case), "f": costs.forward, "b": costs.backward, "mine": mine, "right": right}
            said = (
                _(
                    "at {case} (forward {f:g}, backward {b:g} time units, of it weight gradient {w:g}) yours "
                    "takes {mine:g}, where {formula} = {right:g}.",
                    w=costs.weight,
                    formula=formula_text,
                    **fields,
                )
                if costs.weight is not None
                else _(
                    "at {case} (forward {f:g}, backward {b:g} time units) yours takes {mine:g}, where "
                    "{formula} = {right:g}.",
                    formula=formula_text,
                    **fields,
                )
            )
            raise Mistake(f"{said} {explain(s, mine, right) or out_of_order(s)}".rstrip())
    return _("{formula} in every case", formula=formula_text)


def out_of_order(s: Schedule) -> str:
    """Names a rank that runs one stage's forwards out of micro-batch order (the next stage then
    waits for the one it needs first), or ""."""
    for r, acts in enumerate(s.actions):
        last: dict[int, int] = {}
        for a in acts:
            if a.op == "F":
                if a.mb < last.get(a.stage, -1):
                    return _(
                        "Rank {r} runs F({stage}, {before}) before {action}: the next stage waits for "
                        "micro-batch {mb} first. Keep each stage's forwards in micro-batch order.",
                        r=r,
                        stage=a.stage,
                        before=last[a.stage],
                        action=a,
                        mb=a.mb,
                    )
                last[a.stage] = a.mb
    return ""


def real_run(yours: Yours, label: str, *case) -> str:
    from ...engine.config import RunConfig

    s = yours(*(case or (RUN_P, RUN_M)))
    config = RunConfig(schedule=s, **TINY)
    result = run_real([config], [label])[0]
    return _(
        "{case}, {steps} steps on the MLP: losses {losses}, the same as the whole model's",
        case=_shown(case or (RUN_P, RUN_M)),
        steps=config.steps,
        losses=", ".join(f"{x:.4f}" for x in result.losses),
    )
