"""Exercise: balance the stages. The learner cuts per-layer costs into p contiguous stages so the
slowest is as light as it can be, measures what to weigh the tiny GPT's layers by, and sees the
cut measured on real processes beside the parameter cut (balance_run.py).

The optimum is the checker's own, not the engine's partitioner: found by trying every cut on the
short lists (`every_cut`), by dynamic programming on the long ones (`lightest`, checked against
every cut in the tests). Each stage costs exactly the sum of its layers' costs (`stage_costs`),
every cut whose slowest stage ties the optimum is accepted, and one whose slowest stage is heavier,
by however little, is refused. The long lists (60 to 80 layers in 10 to 16 stages: 10^10 cuts and
more) must be cut within SLACK times what the checker's own dynamic programme takes on the same
list, timed alike: trying every cut would take hours. The learner's layer costs are judged against
the checker's own clock (layer_clock.py). The engine's partitioner and profiler are out of reach
while the learner's functions run, and the cost lists are drawn afresh at every check.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import signal
import sysconfig
import threading
import time

import torch

from ...models.catalog import make_task
from ..grading.harness import harness
from ..i18n.messages import say as _
from . import layer_clock
from .balance_clock import lightest, reference_seconds, stage_costs
from .balance_run import BATCH, GPT, M, P, measured
from .guard import ask, in_sandbox
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the course models (to run the GPT's layers), not
# the engine's partitioner or profiler; reference_seconds is the checker's, called by its harness to time
# its own programme where the learner's runs (it gives away nothing but seconds: balance_clock.py)
ALLOWED = ("minipipe.models", "minipipe.course.exercises.balance_clock.reference_seconds")
LONG_LAYERS, LONG_STAGES = (60, 80), (10, 16)
SLACK, FLOOR_S = 30, 2.0  # a long cut may take SLACK times the reference's time, and FLOOR_S seconds at least


def cases(n: int = 60, seed=None) -> list[tuple[list[float], int]]:
    """A few by hand, then n drawn afresh at every check (seed None): up to 12 layers, 5 stages."""
    rng = random.Random(seed)
    out = [
        ([1.0] * 6, 3),
        ([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2),
        ([1.0, 2.0, 3.0], 3),
        ([0.0, 0.0, 4.0, 0.0], 2),
        ([2.0], 1),
    ]
    for _drawn in range(n):
        k = rng.randint(2, 12)
        out.append((_costs(rng, k), rng.randint(1, min(k, 5))))
    return out


def long_cases(n: int = 3, seed=None) -> list[tuple[list[float], int]]:
    """n long models drawn afresh: 60 to 80 layers in 10 to 16 stages, C(59, 9) > 10^10 cuts and more."""
    rng = random.Random(seed)
    return [(_costs(rng, rng.randint(*LONG_LAYERS)), rng.randint(*LONG_STAGES)) for _drawn in range(n)]


def _costs(rng: random.Random, k: int) -> list[float]:
    return [round(rng.choice([rng.uniform(0, 1), rng.uniform(0, 10), 0.0]), 3) for _layer in range(k)]


def every_cut(costs, p: int) -> tuple[float, tuple[int, ...]]:
    """The lightest slowest stage over every cut of `costs` into p contiguous, non-empty stages, and
    the first cut that reaches it: all C(n − 1, p − 1) cuts tried, so it is exact by construction."""
    n = len(costs)
    best = None
    for inner in itertools.combinations(range(1, n), p - 1):
        bounds = (0, *inner, n)
        slowest = max(stage_costs(costs, bounds))
        if best is None or slowest < best[0]:
            best = (slowest, bounds)
    return best


def optimum(costs, p: int) -> tuple[float, tuple[int, ...]]:
    """every_cut where there are few cuts to try, lightest where there are too many."""
    return every_cut(costs, p) if math.comb(len(costs) - 1, p - 1) <= 5000 else lightest(costs, p)


def ties(slowest: float, best: float) -> bool:
    """Equal but for rounding in the sums (a relative 1e-9): a cut a layer off is never this close."""
    return slowest <= best + 1e-9 * max(1.0, abs(best))


def _even(n: int, p: int) -> tuple[int, ...]:
    size, extra = divmod(n, p)
    return tuple(itertools.accumulate([0] + [size + (s < extra) for s in range(p)]))


def _shown(costs) -> str:
    if len(costs) <= 12:
        return str(costs)
    return _("<{n} costs: {first}, ...>", n=len(costs), first=", ".join(map(str, costs[:4])))


def _bounds(balance, costs, p) -> tuple[int, ...]:
    name = f"balance({_shown(costs)}, {p})"
    return _read_bounds(
        ask(balance, list(costs), p, name=name, advice=_("find the cut yourself"), take=_as_bounds), costs, p, name
    )


def _as_bounds(value):
    try:
        return tuple(int(b) for b in value)
    except (TypeError, ValueError):
        return value


def _read_bounds(value, costs, p, name: str) -> tuple[int, ...]:
    """The learner's returned value as valid bounds of p stages, or a Mistake that says what is wrong."""
    try:
        bounds = tuple(int(b) for b in value)
    except (TypeError, ValueError):
        raise Mistake(
            _(
                "{name} returned {value!r:.60}; return the bounds, p + 1 whole numbers from 0 to {n}: "
                "stage s gets layers bounds[s] .. bounds[s+1] − 1",
                name=name,
                value=value,
                n=len(costs),
            )
        ) from None
    n = len(costs)
    if len(bounds) != p + 1 or bounds[0] != 0 or bounds[-1] != n:
        raise Mistake(
            _(
                "{name} returned {bounds}; the bounds of {p} stages are {k} numbers from 0 to {n}, e.g. "
                "{even} for equal layers",
                name=name,
                bounds=bounds,
                p=p,
                k=p + 1,
                n=n,
                even=_even(n, p),
            )
        )
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise Mistake(
            _(
                "{name} returned {bounds}: the bounds must rise strictly, so that every stage gets at least one layer",
                name=name,
                bounds=bounds,
            )
        )
    return bounds


def _valid(balance, todo) -> str:
    for costs, p in todo:
        _bounds(balance, costs, p)
    return _("{n} cases, up to 12 layers and 5 stages", n=len(todo))


def judge(mine: tuple[int, ...], costs, p: int) -> None:
    """A Mistake unless the cut `mine` (valid bounds) has the lightest slowest stage there is."""
    slow = max(stage_costs(costs, mine))
    best, cut = optimum(costs, p)
    if not ties(slow, best):
        shown = lambda bounds: ", ".join(f"{c:g}" for c in stage_costs(costs, bounds))  # noqa: E731
        hint = ""
        if mine == _even(len(costs), p) and cut != mine:
            hint = " " + _("Yours cuts by the number of layers, as if every layer cost the same.")
        if len(costs) > 12:
            raise Mistake(
                _(
                    "costs {costs}, p={p}: your cut {mine} has its slowest stage at {slow:g}; the cut {cut} gets it "
                    "down to {best:g}.",
                    costs=_shown(costs),
                    p=p,
                    mine=mine,
                    slow=slow,
                    cut=cut,
                    best=best,
                )
                + hint
            )
        raise Mistake(
            _(
                "costs {costs}, p={p}: your cut {mine} gives stages costing {stages}, the slowest {slow:g}; the cut "
                "{cut} gets the slowest down to {best:g} ({best_stages}).",
                costs=costs,
                p=p,
                mine=mine,
                stages=shown(mine),
                slow=slow,
                cut=cut,
                best=best,
                best_stages=shown(cut),
            )
            + hint
        )


def _optimal(balance, todo) -> str:
    for costs, p in todo:
        judge(_bounds(balance, costs, p), costs, p)
    return _("the slowest stage as light as the best cut's, every case")


# -- long models: only an algorithm that does not try every cut finishes --------------------------------
@harness
class _TooSlow(BaseException):
    """Raised into the learner's code when its time is up: a BaseException, so that the learner's own
    `except Exception:` cannot swallow it."""


@harness
@contextlib.contextmanager
def _deadline(seconds: float):
    """Interrupt the block after `seconds` (SIGALRM, where this runs on the main thread); elsewhere
    the block runs to its end and is timed. Never inside the sandbox's watch: an exception out of a
    profile function switches the profiler off, which the watch refuses as the learner's doing; a
    signal that lands there rings again a millisecond later."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    grading = os.path.dirname(os.path.abspath(harness.__code__.co_filename)) + os.sep
    library = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep

    def ring(signum, frame):
        # the innermost frames: the watch's (and the standard library it calls), above the learner's
        while frame is not None and frame.f_code.co_filename.startswith((grading, library)):
            if frame.f_code.co_filename.startswith(grading):
                signal.setitimer(signal.ITIMER_REAL, 1e-3)
                return
            frame = frame.f_back
        raise _TooSlow()

    before = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@harness
def _cut_in_time(balance, costs, p) -> dict:
    """In the sandbox: the checker's programme timed on the list, then the learner's cut of it,
    stopped after SLACK times that (FLOOR_S at least); what it returned (None if stopped) and the
    seconds each took."""
    reference = reference_seconds(costs, p)
    allowed = max(FLOOR_S, SLACK * reference)
    start = time.perf_counter()
    try:
        with _deadline(allowed):
            value = balance(list(costs), p)
            try:
                value = tuple(int(b) for b in value)
            except (TypeError, ValueError):
                value = repr(value)[:60]
    except _TooSlow:
        value = None
    return {"value": value, "took": time.perf_counter() - start, "reference": reference, "allowed": allowed}


def _timed_bounds(balance, costs, p) -> tuple[tuple[int, ...], float, float]:
    """The learner's cut of a long list, within SLACK times the reference's time (at least FLOOR_S),
    both timed where the learner's code runs; returns it, the learner's seconds and the reference's."""
    name = f"balance({_shown(costs)}, {p})"
    got = in_sandbox(_cut_in_time, [balance], list(costs), p, name=name, advice=_("find the cut yourself"))
    took, reference, allowed = got["took"], got["reference"], got["allowed"]
    if got["value"] is None or took > allowed:
        n = len(costs)
        raise Mistake(
            _(
                "{name}, a model of {n} layers in {p} stages, did not finish within {allowed:.1f} s ({slack}× what a "
                "dynamic programme takes here, {reference:.0f} ms, and at least {floor:g} s). Trying every cut "
                "means C({n1}, {p1}) = {cuts:.2g} cuts: hours. Build the best cuts of the first j layers into s "
                "stages from those into s − 1 (dynamic programming, p·n² steps), or search for the smallest cost "
                "limit that p stages can keep (a binary search, each try one pass over the layers)",
                name=name,
                n=n,
                p=p,
                allowed=allowed,
                slack=SLACK,
                reference=1e3 * reference,
                floor=FLOOR_S,
                n1=n - 1,
                p1=p - 1,
                cuts=math.comb(n - 1, p - 1),
            )
        )
    return _read_bounds(got["value"], costs, p, name), took, reference


def _long(balance, todo) -> str:
    slowest = 0.0
    for costs, p in todo:
        mine, took, reference = _timed_bounds(balance, costs, p)
        judge(mine, costs, p)
        slowest = max(slowest, took / reference)
    return _(
        "{n} models of {fewest} to {most} layers, up to {p} stages, the best cut each time, in at most "
        "{slowest:.1f}× the reference's time",
        n=len(todo),
        fewest=min(len(c) for c, _p in todo),
        most=max(len(c) for c, _p in todo),
        p=max(p for _c, p in todo),
        slowest=slowest,
    )


def _gpt(args: dict = GPT):
    task = make_task("gpt", batch_size=BATCH, **args)
    layers = task.layers()
    return layers, task.batch(0)[0][: BATCH // M]


def _gpt_costs(layer_costs, layers=None, sample=None) -> list[float]:
    if layers is None:
        layers, sample = _gpt()
    value = ask(
        layer_costs,
        layers,
        sample,
        name="layer_costs",
        advice=_("time each layer's forward and backward yourself (time.perf_counter)"),
        take=lambda v: list(v) if isinstance(v, (list, tuple)) else v,
    )
    try:
        costs = [float(c) for c in value]
    except (TypeError, ValueError):
        raise Mistake(_("layer_costs returned {value!r:.60}; return one number per layer", value=value)) from None
    if len(costs) != len(layers):
        raise Mistake(
            _(
                "layer_costs returned {k} numbers for {n} layers; return one per layer",
                k=len(costs),
                n=len(layers),
            )
        )
    return costs


def _weighs_time(layer_costs) -> str:
    """The learner's costs of three GPTs, each between two of the checker's own timings of it."""
    seen = []
    for label, args in layer_clock.GPTS.items():
        layers, sample = _gpt(args)
        before = layer_clock.measure(layers, sample)
        costs = _gpt_costs(layer_costs, layers, sample)
        seen.append(layer_clock.Weighed(label, layers, costs, before, layer_clock.measure(layers, sample)))
    return layer_clock.judge(seen)


def _measured(balance, layer_costs) -> str:
    return measured(_bounds(balance, _gpt_costs(layer_costs), P))


def check_balance(balance, layer_costs) -> None:
    """Check the learner's balance(costs, p) -> bounds against the exact optimum, their layer_costs
    (layers, sample) for the tiny GPT, and run their cut beside the parameter cut."""
    torch.set_num_threads(1)  # as each worker runs: layer times measured here are the workers'
    todo = cases()
    verdict(
        [
            (_("valid bounds"), lambda: _valid(balance, todo)),
            (_("the slowest stage as light as it can be"), lambda: _optimal(balance, todo)),
            (
                _("long models cut in time: 60 to 80 layers, 10 to 16 stages"),
                lambda: _long(balance, long_cases()),
            ),
            (_("the GPTs' layers weighed by time"), lambda: _weighs_time(layer_costs)),
            (
                _("a measured run on 2 processes, beside the parameter cut"),
                lambda: _measured(balance, layer_costs),
            ),
        ]
    )
