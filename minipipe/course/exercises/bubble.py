"""Exercise 01: bubble arithmetic. The learner writes makespan, bubble and message count of GPipe,
1F1B and interleaved 1F1B as functions of p, m, v, f, b; checked against the simulator on random
cases, with the engine's own formulas (and schedules) out of reach while the learner's code runs."""

from __future__ import annotations

import random

from ...schedule.kinds import make_schedule
from ...sim.costs import Costs
from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from .guard import ask
from .verdict import Mistake, close, verdict

# what the learner's code may call while the check calls it (grading/watch.py): nothing of minipipe's
# (the answer comes from p, m, v, f and b); their cells may try the simulator and the engine's schedules
# (a table made there does not cover what the check draws: one case is past the notebook's sizes)
ALLOWED = ()
KINDS = ("gpipe", "1f1b", "interleaved")


def cases(kind: str, n: int = 40, seed=None) -> list[tuple]:
    """(p, m, v, f, b): drawn afresh at every check (seed None), so that a verdict shows a typical case
    first; then one past the sizes the notebook tries (p from 9, m from 17), which no table of
    those holds, and the edges last (one rank, one micro-batch)."""
    rng = random.Random(None if seed is None else f"{seed}-{kind}")
    out = []
    for i in range(n):
        large = i == n - 3
        p = 1 if i == n - 1 else rng.randint(9, 32) if large else rng.randint(2, 8)
        v = rng.randint(2, 4) if kind == "interleaved" else 1
        if kind == "interleaved":
            m = p * (rng.randint(5, 8) if large else rng.randint(1, 4))
        else:
            m = 1 if i == n - 2 else rng.randint(17, 256) if large else rng.randint(1, 16)
        f = round(rng.uniform(0.5, 2.0), 2)
        out.append((p, m, v, f, round(f * rng.uniform(1.0, 3.0), 2)))
    return out


def _ask(fn, name, *args):
    value = ask(
        fn,
        *args,
        name=f"{name}{args}",
        advice=_("work it out from p, m, v, f and b yourself — the simulator will check it"),
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Mistake(
            _(
                "{call} returned {kind} {value!r:.40}; return a number",
                call=f"{name}{args}",
                kind=type(value).__name__,
                value=value,
            )
        )
    return float(value)


def _simulated(kind, p, m, v, f, b):
    return simulate(make_schedule(kind, p, m, v), Costs(forward=f, backward=b))


def _check_makespan(fn, kind: str, todo: dict) -> str:
    for p, m, v, f, b in todo[kind]:
        mine, right = _ask(fn, "makespan", kind, p, m, v, f, b), _simulated(kind, p, m, v, f, b).makespan
        if not close(mine, right):
            hint = ""
            if close(mine, (m + p - 1) * (f + b)) and v > 1:
                hint = " " + _(
                    "That is 1F1B's step on the same model. With v chunks per rank each chunk costs f/v and "
                    "b/v, and the fill and drain are made of chunks."
                )
            elif v > 1 and close(mine, (m + (p - 1) // v) * (f + b)):
                hint = " " + _(
                    "That rounds (p − 1)/v down (// in Python): the fill and the drain are (p − 1)/v slots, a "
                    "fraction of a micro-batch's time when v does not divide p − 1."
                )
            elif close(mine, (m + p) * (f + b)) or close(mine, (m + p - 2) * (f + b)):
                hint = " " + _(
                    "Count the fill and drain again: the last micro-batch enters p − 1 slots after the first."
                )
            elif close(mine, m * (f + b)):
                hint = " " + _("That is each rank's work alone, with no bubble: add the fill and the drain.")
            raise Mistake(
                _(
                    "{kind}, p={p}, m={m}, v={v}, f={f}, b={b}: you say {mine:g}, the simulator says {right:g}.",
                    kind=kind,
                    p=p,
                    m=m,
                    v=v,
                    f=f,
                    b=b,
                    mine=mine,
                    right=right,
                )
                + hint
            )
    return _("{n} cases drawn at random", n=len(todo[kind]))


def _check_bubble(fn, todo: dict) -> str:
    for kind in KINDS:
        for p, m, v, f, b in todo[kind]:
            mine, right = _ask(fn, "bubble", kind, p, m, v, f, b), _simulated(kind, p, m, v, f, b).bubble()
            if not close(mine, right):
                ideal = right / (1 - right)  # right < 1: every rank works m·(f + b) > 0
                hint = ""
                if close(mine, ideal):
                    hint = " " + _(
                        "That is idle time over the ideal (bubble-free) time, (p − 1)/m for 1F1B, the Ultra-Scale "
                        "Playbook's definition. This course's bubble is idle over total: the share of all ranks' "
                        "time spent idle."
                    )
                elif close(mine, 100 * right):
                    hint = " " + _("That is a percentage: return a fraction between 0 and 1.")
                raise Mistake(
                    _(
                        "{kind}, p={p}, m={m}, v={v}, f={f}, b={b}: you say {mine:g}, the simulator's idle share "
                        "of all ranks' time is {right:g}.",
                        kind=kind,
                        p=p,
                        m=m,
                        v=v,
                        f=f,
                        b=b,
                        mine=mine,
                        right=right,
                    )
                    + hint
                )
    return _("idle / total, every kind")


def _check_messages(fn, todo: dict) -> str:
    for kind in KINDS:
        for p, m, v, _f, _b in todo[kind][-15:]:
            mine, right = _ask(fn, "messages", kind, p, m, v), len(make_schedule(kind, p, m, v).messages)
            if mine != right:
                hint = ""
                if p == 1:
                    hint = " " + _("With p=1 every stage lives on the one rank: nothing crosses between ranks.")
                elif v > 1 and mine == 2 * m * (p - 1):
                    hint = " " + _(
                        "That counts p − 1 = {edges} stage boundaries; with v={v} chunks per rank there are "
                        "p·v − 1 = {all_edges}, and each is crossed between two ranks.",
                        edges=p - 1,
                        v=v,
                        all_edges=p * v - 1,
                    )
                elif mine == m * (p * v - 1):
                    hint = " " + _("That counts the activations going forward; the gradients come back the same way.")
                raise Mistake(
                    _(
                        "{kind}, p={p}, m={m}, v={v}: you say {mine:g} messages per training step, the "
                        "schedule sends {right}.",
                        kind=kind,
                        p=p,
                        m=m,
                        v=v,
                        mine=mine,
                        right=right,
                    )
                    + hint
                )
    return _("activations forward and gradients back, every kind")


def check_bubble_arithmetic(makespan, bubble, messages) -> None:
    """Check the learner's makespan(kind, p, m, v, f, b), bubble(kind, p, m, v, f, b) and
    messages(kind, p, m, v) against the simulator on random cases."""
    todo = {kind: cases(kind) for kind in KINDS}
    verdict(
        [
            (_("makespan of GPipe"), lambda: _check_makespan(makespan, "gpipe", todo)),
            (_("makespan of 1F1B"), lambda: _check_makespan(makespan, "1f1b", todo)),
            (_("makespan of interleaved 1F1B"), lambda: _check_makespan(makespan, "interleaved", todo)),
            (_("bubble"), lambda: _check_bubble(bubble, todo)),
            (_("messages per step"), lambda: _check_messages(messages, todo)),
        ]
    )
