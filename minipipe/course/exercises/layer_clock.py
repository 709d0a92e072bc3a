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
    for _ in range(rounds + 1):
        for i, (layer, x) in enumerate(zip(layers, xs)):
            best[i] = min(best[i], _once(layer, x))
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


def named(layers, kind: str) -> str:
    at = kinds(layers)[kind]
    what = {"Embedding": "the embedding", "Readout": "the head"}.get(
        kind, f"the {kind.lower()}s" if len(at) > 1 else f"the {kind.lower()}"
    )
    return f"{what} (layer{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})"


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
            f"your costs ({shown}) are the layers' parameter counts. The embedding holds "
            f"{int(params[0]):,} parameters but only looks rows up, and the head does more math than a "
            f"block: a cut balanced in parameters is not balanced in time. Weigh the layers by what the "
            f"pipeline waits for: the time of each layer's forward and backward"
        )
    for gpt in seen:
        if max(gpt.costs) - min(gpt.costs) <= 1e-12 * max(1.0, max(gpt.costs)):
            raise Mistake(
                f"{gpt.label}: your costs ({', '.join(f'{c:.3g}' for c in gpt.costs)}) make every layer cost "
                f"the same; the embedding, the blocks and the head are not alike. Measure them: time each "
                f"layer's forward and backward"
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
        return (
            "no two kinds of layer far enough apart on this machine's clock just now to judge; the machine is very "
            "busy: check again when it is quieter"
        )
    gpt, heavy, light, times = widest
    return (
        f"{len(seen)} GPTs, {judged} pairs of kinds of layer timed at least {RATIO:g}× apart here, each ordered as "
        f"yours orders them: e.g. in {gpt.label}, {named(gpt.layers, heavy)} {times:.0f}× "
        f"{named(gpt.layers, light)}"
    )


def _flipped(gpt: Weighed, heavy: str, light: str, mine: dict, earlier: list[Weighed]) -> str:
    by_kind = kinds(gpt.layers)
    fastest = {kind: min(min(gpt.before[i], gpt.after[i]) for i in at) for kind, at in by_kind.items()}

    def cost(kind):
        return f"{mine[kind]:.3g}" + (" (the median of theirs)" if len(by_kind[kind]) > 1 else "")

    say = (
        f"{gpt.label}: your costs ({', '.join(f'{c:.3g}' for c in gpt.costs)}) put {named(gpt.layers, light)} at "
        f"{cost(light)}, as heavy as {named(gpt.layers, heavy)} or heavier, at {cost(heavy)}; timed here (forward "
        f"and backward, the fastest of {ROUNDS} runs, before and after yours ran), {named(gpt.layers, heavy)} "
        f"take{'s' if len(by_kind[heavy]) == 1 else ''} {_ms(fastest[heavy])} and {named(gpt.layers, light)} "
        f"{_ms(fastest[light])}: {fastest[heavy] / fastest[light]:.0f} times as long."
    )
    same = next((other for other in earlier if other.costs == gpt.costs), None)
    if same is not None:
        return (
            f"{say} They are the numbers you gave for {same.label}, whose layers are not these: typed in or "
            f"guessed, not measured. Time the layers you are given"
        )
    if gpt.costs == _parameters(gpt.layers):
        return f"{say} Those are its parameter counts: weigh the layers by time"
    if "Readout" in (heavy, light):
        return (
            f"{say} The head's work grows with the vocabulary, a block's with the width: no fixed guess at which "
            f"is heavier holds for every GPT. Time the layers you are given, forward and backward, several "
            f"times, and keep the median"
        )
    return (
        f"{say} Measure each layer's forward and backward, several times, and keep the median: one run on a "
        f"busy machine can be several times too slow"
    )
