"""Exercise 08's clock: the checker times the layers itself, and the learner's costs must order the
kinds of layer (the embedding, the blocks, the head) as that measurement does, where it tells them
far apart.

On a shared machine a layer's time swings from run to run: another process takes the core, and a
0.3 ms layer looks like a 2 ms one; a long layer is hit hardest (under load, a 5 ms head is cut by
the scheduler in nearly every run, a 1.5 ms block is not). What does not swing is that a layer doing
ten times the work of another takes longer. So the checker compares orders, not numbers, and only
of the pairs whose work the GPT's shapes set far apart (PAIRS: 5 to 26 times), never of two kinds
close in work (lesson 06's head and blocks, 3 times apart). It times each layer's forward and
backward itself, twice (before and after the learner's function runs, each the fastest of ROUNDS
rounds taken in turn over the layers), and judges a pair when both timings find it at least RATIO
apart (otherwise this machine is too busy to vouch for it just now); the learner's costs (a kind's
cost: the median of its layers') must then say the same kind is heavier.

Measured on this course's 2-core machine, busy with other sessions (load 5 to 15,
benchmarks/layer_clock_noise.py; the table in exercises/README.md, "How exercise 08 is judged"):
the solution's timing (the median of 5 runs) was refused in none of 200 checks, a sloppy one (one
run per layer, no warm-up) in 9 of 100; typed-in and guessed costs in every one.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..i18n.messages import say as _
from .verdict import Mistake

RATIO = 3.0
ROUNDS = 5

# the lesson's GPT, and two whose layers weigh otherwise: a list typed in, or a guess at the
# model's shape ("the head is the heaviest"), cannot be right for all three
GPTS = {
    "lesson 06's GPT": dict(vocab=1536, width=32, block=64, depth=3),
    "a GPT with a vocabulary of 8192": dict(vocab=8192, width=32, block=64, depth=2),
    "a GPT with wide blocks and a vocabulary of 64": dict(vocab=64, width=128, block=64, depth=2),
}
# (heavier, lighter) kinds each GPT's shapes set far apart. Per token, a block multiplies and adds
# 12w² + 2tw times (w the width, t the tokens), the head w·vocab; the embedding only looks up: its
# time is its gradient's vocab × w buffer. Lesson 06's: the blocks 16k, the head 49k (3×: not
# judged); vocabulary 8192: the head 262k, 16 blocks' worth; wide blocks: a block 213k, 26 heads.
PAIRS = {
    "lesson 06's GPT": [("Block", "Embedding"), ("Readout", "Embedding")],
    "a GPT with a vocabulary of 8192": [("Readout", "Block"), ("Readout", "Embedding")],
    "a GPT with wide blocks and a vocabulary of 64": [("Block", "Readout"), ("Block", "Embedding")],
}


def inputs(layers, sample) -> list[torch.Tensor]:
    """What each layer is fed: the sample, then each previous layer's output."""
    out, x = [], sample
    with torch.no_grad():
        for layer in layers:
            out.append(x)
            x = layer(x)
    return out


def _once(layer, x) -> float:
    if x.is_floating_point():
        x = x.detach().requires_grad_()  # a later stage computes its input's gradient too
    start = time.perf_counter()
    out = layer(x)
    wrt = [t for t in (x, *layer.parameters()) if t.requires_grad]
    torch.autograd.grad(out, wrt, grad_outputs=torch.ones_like(out), allow_unused=True)  # leaves no .grad
    return time.perf_counter() - start


def measure(layers, sample, rounds: int = ROUNDS) -> list[float]:
    """Seconds of each layer's forward and backward: the fastest of `rounds`, after one warm-up."""
    xs = inputs(layers, sample)
    best = [float("inf")] * len(layers)
    for round_ in range(rounds + 1):
        for i, (layer, x) in enumerate(zip(layers, xs)):
            took = _once(layer, x)
            if round_:  # the warm-up's time counts for nothing (allocations, a cold cache)
                best[i] = min(best[i], took)
    return best


def kinds(layers) -> dict[str, list[int]]:
    """The layers by kind, in order: two layers of one kind and shape do the same work, so the
    checker compares kinds (the embedding, the blocks, the head), never two blocks."""
    out: dict[str, list[int]] = {}
    for i, layer in enumerate(layers):
        out.setdefault(type(layer).__name__, []).append(i)
    return out


def apart(layers, pairs, *measurements: list[float], ratio: float = RATIO) -> list[tuple[str, str, float]]:
    """(heavier kind, lighter kind, how many times): those of `pairs` that every measurement finds
    at least `ratio` apart (each kind timed as its fastest layer), the widest first."""
    by_kind = kinds(layers)
    fastest = [{kind: min(t[i] for i in at) for kind, at in by_kind.items()} for t in measurements]
    found = [(a, b, min(f[a] / f[b] for f in fastest)) for a, b in pairs if all(f[a] >= ratio * f[b] for f in fastest)]
    return sorted(found, key=lambda pair: -pair[2])


def label(gpt: str) -> str:
    """One of GPTS's labels as the learner reads it (the labels themselves stay the keys)."""
    return {
        "lesson 06's GPT": _("lesson 06's GPT"),
        "a GPT with a vocabulary of 8192": _("a GPT with a vocabulary of 8192"),
        "a GPT with wide blocks and a vocabulary of 64": _("a GPT with wide blocks and a vocabulary of 64"),
    }.get(gpt, gpt)


def named(layers, kind: str) -> str:
    at = kinds(layers)[kind]
    many = len(at) > 1
    if kind == "Embedding":
        what = _("the embedding")
    elif kind == "Readout":
        what = _("the head")
    elif kind == "Block":
        what = _("the blocks") if many else _("the block")
    else:
        what = _("the {kind}s", kind=kind.lower()) if many else _("the {kind}", kind=kind.lower())
    numbers = ", ".join(map(str, at))
    return _("{what} (layers {at})", what=what, at=numbers) if many else _("{what} (layer {at})", what=what, at=numbers)


@dataclass
class Weighed:
    """One GPT: its layers, the learner's costs of them, and the checker's two timings (seconds)."""

    label: str
    layers: list
    costs: list[float]
    before: list[float]
    after: list[float]


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2g} ms" if seconds < 1e-3 else f"{1e3 * seconds:.1f} ms"


def _parameters(layers) -> list[float]:
    return [float(sum(t.numel() for t in layer.parameters())) for layer in layers]


def judge(seen: list[Weighed]) -> str:
    """A Mistake unless, for every GPT, the learner's costs order each of its PAIRS of kinds as both
    of the checker's timings do, where those find them RATIO apart (a kind's cost, the learner's: the
    median of its layers'); the note names the widest such pair."""
    first = seen[0]
    shown = ", ".join(f"{c:.3g}" for c in first.costs)
    params = _parameters(first.layers)
    if first.costs == params:
        raise Mistake(
            _(
                "your costs ({costs}) are the layers' parameter counts. The embedding holds {params:,} parameters "
                "but only looks rows up, and the head does more math than a block: a cut balanced in parameters is "
                "not balanced in time. Weigh the layers by what the pipeline waits for: the time of each layer's "
                "forward and backward",
                costs=shown,
                params=int(params[0]),
            )
        )
    for gpt in seen:
        if max(gpt.costs) - min(gpt.costs) <= 1e-12 * max(1.0, max(gpt.costs)):
            raise Mistake(
                _(
                    "{gpt}: your costs ({costs}) make every layer cost the same; the embedding, the blocks and the "
                    "head are not alike. Measure them: time each layer's forward and backward",
                    gpt=label(gpt.label),
                    costs=", ".join(f"{c:.3g}" for c in gpt.costs),
                )
            )
    judged, widest = 0, None
    for k, gpt in enumerate(seen):
        pairs = apart(gpt.layers, PAIRS[gpt.label], gpt.before, gpt.after)
        judged += len(pairs)
        mine = {kind: statistics.median(gpt.costs[i] for i in at) for kind, at in kinds(gpt.layers).items()}
        for heavy, light, _times in pairs:
            if mine[heavy] <= mine[light]:
                raise Mistake(_flipped(gpt, heavy, light, mine, seen[:k]))
        if pairs and widest is None:
            widest = (gpt, *pairs[0])
    if widest is None:
        return _(
            "no two kinds of layer far enough apart on this machine's clock just now to judge; the machine is very "
            "busy: check again when it is quieter"
        )
    gpt, heavy, light, times = widest
    return _(
        "{n} GPTs, {judged} pairs of kinds of layer timed at least {ratio:g}× apart here, each ordered as yours "
        "orders them: e.g. in {gpt}, {heavy} {times:.0f}× {light}",
        n=len(seen),
        judged=judged,
        ratio=RATIO,
        gpt=label(gpt.label),
        heavy=named(gpt.layers, heavy),
        times=times,
        light=named(gpt.layers, light),
    )


def _flipped(gpt: Weighed, heavy: str, light: str, mine: dict, earlier: list[Weighed]) -> str:
    by_kind = kinds(gpt.layers)
    fastest = {kind: min(min(gpt.before[i], gpt.after[i]) for i in at) for kind, at in by_kind.items()}

    def cost(kind):
        if len(by_kind[kind]) > 1:
            return _("{cost:.3g} (the median of theirs)", cost=mine[kind])
        return f"{mine[kind]:.3g}"

    fields = dict(
        gpt=label(gpt.label),
        costs=", ".join(f"{c:.3g}" for c in gpt.costs),
        light=named(gpt.layers, light),
        light_cost=cost(light),
        heavy=named(gpt.layers, heavy),
        heavy_cost=cost(heavy),
        rounds=ROUNDS,
        heavy_ms=_ms(fastest[heavy]),
        light_ms=_ms(fastest[light]),
        times=fastest[heavy] / fastest[light],
    )
    if len(by_kind[heavy]) == 1:
        say = _(
            "{gpt}: your costs ({costs}) put {light} at {light_cost}, as heavy as {heavy} or heavier, at "
            "{heavy_cost}; timed here (forward and backward, the fastest of {rounds} runs, before and after yours "
            "ran), {heavy} takes {heavy_ms} and {light} {light_ms}: {times:.0f} times as long.",
            **fields,
        )
    else:
        say = _(
            "{gpt}: your costs ({costs}) put {light} at {light_cost}, as heavy as {heavy} or heavier, at "
            "{heavy_cost}; timed here (forward and backward, the fastest of {rounds} runs, before and after yours "
            "ran), {heavy} take {heavy_ms} and {light} {light_ms}: {times:.0f} times as long.",
            **fields,
        )
    same = next((other for other in earlier if other.costs == gpt.costs), None)
    if same is not None:
        return (
            say
            + " "
            + _(
                "They are the numbers you gave for {other}, whose layers are not these: typed in or guessed, not "
                "measured. Time the layers you are given",
                other=label(same.label),
            )
        )
    if gpt.costs == _parameters(gpt.layers):
        return say + " " + _("Those are its parameter counts: weigh the layers by time")
    if "Readout" in (heavy, light):
        return (
            say
            + " "
            + _(
                "The head's work grows with the vocabulary, a block's with the width: no fixed guess at which is "
                "heavier holds for every GPT. Time the layers you are given, forward and backward, several times, "
                "and keep the median"
            )
        )
    return (
        say
        + " "
        + _(
            "Measure each layer's forward and backward, several times, and keep the median: one run on a busy "
            "machine can be several times too slow"
        )
    )
