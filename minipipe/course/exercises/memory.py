"""Exercise: memory budget. The learner predicts each rank's peak activation bytes under GPipe
and 1F1B, checked on cases drawn afresh and against a real run's measurement, then picks the
largest m a memory budget allows. The engine's formulas, schedules and simulator are out of
reach while the learner's functions run."""

from __future__ import annotations

import functools
import random

from ...schedule.kinds import make_schedule
from ...sim.pipeline import simulate
from ..i18n.messages import say as _
from .guard import ask
from .runs import TINY, run_real
from .verdict import Mistake, verdict

# what the learner's code may call while the check calls it (grading/watch.py): nothing of minipipe's
# (the count comes from the schedules' order); GIVEN: the checker's helper the given cell hands out
ALLOWED = ()
GIVEN = ("minipipe.course.exercises.memory.bytes_per_microbatch",)
KINDS = ("gpipe", "1f1b")
RUN_P, RUN_M = 2, 4
M_MAX = 64


def bytes_per_microbatch(config) -> list[int]:
    """Bytes of activations each stage keeps for the backward of one micro-batch, counted by the
    engine's own Stage on this process (one forward per stage, no workers)."""
    from ...engine.config import prepare
    from ...engine.partition import stage_module
    from ...engine.stage import Stage
    from ...models.catalog import task_of

    plan = prepare(config)
    task, n, m = task_of(plan.config), plan.schedule.n_stages, plan.schedule.m
    layers = task.layers()
    x, y = (t.chunk(m)[0] for t in task.batch(0))
    out = []
    for s in range(n):
        stage = Stage(s, stage_module(layers, plan.partition, s), n, m, task.loss)
        x = stage.forward(0, x, y if stage.is_last else None)
        out.append(stage.bytes_per_microbatch)
    return out


def _cases(seed=None):
    rng = random.Random(seed)  # seed None: drawn afresh at every check
    out = [(kind, 4, 8, r, 1000) for kind in KINDS for r in range(4)]  # a typical case first,
    out += [(kind, 4, 2, r, 1000) for kind in KINDS for r in range(4)]  # then m < p: a known trap
    for i in range(64):  # the last few from far more sizes than a table made beforehand would hold
        p = rng.randint(1, 8) if i < 60 else rng.randint(9, 48)
        m = rng.randint(1, 16) if i < 60 else rng.randint(17, 256)
        out.append((rng.choice(KINDS), p, m, rng.randrange(p), rng.randint(1, 10**6)))
    return out


@functools.cache
def _held(kind, p, m) -> tuple[int, ...]:
    return tuple(simulate(make_schedule(kind, p, m)).peak_inflight())


def _right(kind, p, m, rank, per_mb) -> int:
    return _held(kind, p, m)[rank] * per_mb


def _ask(fn, *args, name="peak_bytes"):
    value = ask(fn, *args, name=f"{name}{args}", advice=_("work it out from the schedule's order yourself"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Mistake(
            _(
                "{call} returned {kind} {value!r:.40}; return a number",
                call=f"{name}{args}",
                kind=type(value).__name__,
                value=value,
            )
        )
    return value


def _formula(peak_bytes, todo) -> str:
    for kind, p, m, rank, per_mb in todo:
        mine, right = _ask(peak_bytes, kind, p, m, rank, per_mb), _right(kind, p, m, rank, per_mb)
        if abs(mine - right) > 1e-6 * right:
            held = right // per_mb
            hint = ""
            if kind == "1f1b" and mine == (p - rank) * per_mb and m < p - rank:
                hint = " " + _("With m={m} < p − r there are only m micro-batches to hold.", m=m)
            elif kind == "1f1b" and mine in (p * per_mb, min(p, m) * per_mb):
                hint = " " + _(
                    "That is the same count on every rank; in 1F1B rank r starts its backwards after p − r "
                    "forwards, so it holds at most p − r (and never more than m)."
                )
            elif kind == "1f1b" and mine == min(p - rank - 1, m) * per_mb and p - rank - 1 < m:
                hint = " " + _(
                    "That is rank r's warm-up alone, p − r − 1 forwards; the steady state's first forward comes "
                    "before the first backward frees one, so rank r holds p − r."
                )
            elif kind == "1f1b" and mine == min(p - rank + 1, m) * per_mb and p - rank < m:
                hint = " " + _(
                    "One too many: rank r's warm-up is p − r − 1 forwards, and with the steady state's first it "
                    "holds p − r."
                )
            elif kind == "gpipe" and mine == min(p - rank, m) * per_mb:
                hint = " " + _("That is 1F1B's count; GPipe runs every forward before any backward.")
            elif mine == held:
                hint = " " + _("That is a count of micro-batches; multiply by the bytes one micro-batch keeps.")
            fields = {"kind": kind, "p": p, "m": m, "rank": rank, "per_mb": per_mb, "mine": mine, "right": right}
            said = (
                _(
                    "{kind}, p={p}, m={m}, rank {rank}, {per_mb:,} bytes per micro-batch: you say {mine:,}, the "
                    "simulated schedule holds 1 micro-batch at its peak: {right:,} bytes.",
                    **fields,
                )
                if held == 1
                else _(
                    "{kind}, p={p}, m={m}, rank {rank}, {per_mb:,} bytes per micro-batch: you say {mine:,}, the "
                    "simulated schedule holds {held} micro-batches at its peak: {right:,} bytes.",
                    held=held,
                    **fields,
                )
            )
            raise Mistake(said + hint)
    return _("{n} cases, GPipe and 1F1B, m < p too", n=len(todo))


def _measured(peak_bytes) -> str:
    from ...engine.config import RunConfig

    configs = [RunConfig(schedule=kind, p=RUN_P, m=RUN_M, **TINY) for kind in KINDS]
    per_mb = bytes_per_microbatch(configs[0])
    results = run_real(configs, [_("{kind} run", kind=kind) for kind in KINDS])
    shown = []
    for kind, res in zip(KINDS, results):
        for r in range(RUN_P):
            mine, measured = _ask(peak_bytes, kind, RUN_P, RUN_M, r, per_mb[r]), res.peak_bytes[r]
            if mine != measured:
                raise Mistake(
                    _(
                        "{kind}, p={p}, m={m}, rank {r} ({per_mb:,} bytes per micro-batch): you "
                        "predict {mine:,} bytes, the run measured {measured:,} "
                        "({held} micro-batches held at once)",
                        kind=kind,
                        p=RUN_P,
                        m=RUN_M,
                        r=r,
                        per_mb=per_mb[r],
                        mine=mine,
                        measured=measured,
                        held=res.peak_held[r],
                    )
                )
        shown.append(f"{kind} {', '.join(f'{b:,}' for b in res.peak_bytes)}")
    return _("p={p}, m={m} on the MLP, bytes per rank measured: {shown}", p=RUN_P, m=RUN_M, shown="; ".join(shown))


# (kind, p, bytes per micro-batch, budget) at the limits: a budget exactly m micro-batches' bytes and one byte
# short of it, one above M_MAX micro-batches, one below a single micro-batch
BUDGET_LIMITS = [
    ("gpipe", 4, 1000, 5000),
    ("gpipe", 4, 1000, 4999),
    ("1f1b", 4, 1000, 4000),
    ("1f1b", 4, 1000, 3999),
    ("gpipe", 3, 1000, 1000 * (M_MAX + 6)),
    ("1f1b", 2, 1000, 999),
]


def _budget_cases(rng: random.Random) -> list[tuple[str, int, int, int]]:
    drawn = []
    for _drawn in range(30):
        kind, p, per_mb = rng.choice(KINDS), rng.randint(2, 6), rng.randint(1, 1000) * 1000
        drawn.append((kind, p, per_mb, per_mb * rng.randint(1, 40) + rng.randint(0, per_mb - 1)))
    return drawn[:4] + BUDGET_LIMITS + drawn[4:]


def _budget(largest_m, peak_bytes) -> str:
    for kind, p, per_mb, budget in _budget_cases(random.Random()):
        fits = [m for m in range(1, M_MAX + 1) if all(_right(kind, p, m, r, per_mb) <= budget for r in range(p))]
        right = max(fits, default=0)
        mine = _ask(largest_m, kind, p, budget, per_mb, name="largest_m")
        if mine != right:
            hint = ""
            if kind == "1f1b" and right == M_MAX:
                hint = " " + _(
                    "1F1B's ranks hold at most p micro-batches, however large m is: once p fit, every m up to "
                    "{most} does.",
                    most=M_MAX,
                )
            elif kind == "gpipe" and mine == budget // per_mb + 1:
                hint = " " + _(
                    "One too many: GPipe's ranks hold all m micro-batches, and m·bytes must stay within the budget."
                )
            elif kind == "gpipe" and mine == budget // per_mb > M_MAX:
                hint = " " + _(
                    "The exercise asks for m up to {most}: a budget for more still gives {most}.", most=M_MAX
                )
            elif mine == right - 1 and budget % per_mb == 0:
                hint = " " + _(
                    "One too few: a budget of exactly m micro-batches' bytes holds them (within the budget means ≤)."
                )
            raise Mistake(
                _(
                    "{kind}, p={p}, {per_mb:,} bytes per micro-batch, a budget of {budget:,} bytes per rank: you "
                    "say m={mine}, the largest m (up to {most}) that fits every rank is {right}.",
                    kind=kind,
                    p=p,
                    per_mb=per_mb,
                    budget=budget,
                    mine=mine,
                    most=M_MAX,
                    right=right,
                )
                + hint
            )
    return _("GPipe's m is capped by the budget, 1F1B's is not")


def check_memory_budget(peak_bytes, largest_m) -> None:
    """Check the learner's peak_bytes(kind, p, m, rank, per_microbatch) against the simulator and a
    real run, and largest_m(kind, p, budget, per_microbatch) against a search."""
    todo = _cases()
    verdict(
        [
            (_("peak activation bytes per rank"), lambda: _formula(peak_bytes, todo)),
            (_("the largest m within a memory budget"), lambda: _budget(largest_m, peak_bytes)),
            (_("against a real run's measurement"), lambda: _measured(peak_bytes)),
        ]
    )
