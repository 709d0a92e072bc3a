"""The schedule generators: pure functions `(p, m[, v]) -> Schedule`, one per kind.

They only write the lists; kinds.py registers each one with its rules (e.g. interleaving needs m
to be a multiple of p) and formulas, and `make_schedule` checks the rules, generates and
validates. Call them through `make_schedule`, which refuses what a generator would get wrong.
"""

from __future__ import annotations

from .ir import Schedule
from .ops import Action, B, F, I, W


def naive(p: int, m: int = 1) -> Schedule:
    """Model parallelism without overlap: each micro-batch runs all the way forward and back
    before the next one enters, so only one rank is ever busy."""
    actions = [[a for mb in range(m) for a in (F(r, mb), B(r, mb))] for r in range(p)]
    return Schedule.build("naive", p, m, 1, actions)


def gpipe(p: int, m: int) -> Schedule:
    """GPipe: all forwards (the pipeline fills), then all backwards (it drains).
    Every rank holds the activations of all m micro-batches at the turn."""
    actions = [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)]
    return Schedule.build("gpipe", p, m, 1, actions)


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B (PipeDream-Flush): a warm-up of forwards, then one forward / one backward in
    turn, then a cool-down of backwards. Rank r holds at most p - r micro-batches."""
    actions = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        steady = m - warmup
        acts = [F(r, mb) for mb in range(warmup)]  # warm-up
        for i in range(steady):  # steady state: 1F, 1B
            acts += [F(r, warmup + i), B(r, i)]
        acts += [B(r, mb) for mb in range(steady, m)]  # cool-down
        actions.append(acts)
    return Schedule.build("1f1b", p, m, 1, actions)


def interleaved_1f1b(p: int, m: int, v: int = 2) -> Schedule:
    """Megatron's interleaved 1F1B: each rank holds v chunks (stages r, r+p, ...). Micro-batches
    go through the chunks in groups of p, which shrinks the bubble by a factor v."""
    total = m * v  # forwards per rank, counting every chunk

    def stage(k: int, r: int, forward: bool) -> int:
        chunk = (k // p) % v  # k-th forward/backward of the rank ...
        return (chunk if forward else v - 1 - chunk) * p + r

    def mb(k: int) -> int:
        return (k // (p * v)) * p + k % p  # ... and which micro-batch it is

    actions = []
    for r in range(p):
        warmup = min((p - r - 1) * 2 + (v - 1) * p, total)
        acts = [F(stage(k, r, True), mb(k)) for k in range(warmup)]
        for i in range(total - warmup):
            acts += [F(stage(warmup + i, r, True), mb(warmup + i)), B(stage(i, r, False), mb(i))]
        acts += [B(stage(k, r, False), mb(k)) for k in range(total - warmup, total)]
        actions.append(acts)
    return Schedule.build("interleaved", p, m, v, actions)


def zb_h1(p: int, m: int) -> Schedule:
    """Zero-bubble ZB-H1 (Qi et al., 2023): 1F1B with backward split into I (input gradient,
    which the previous stage waits for) and W (weight gradient, which nobody waits for).
    Rank r runs each W r places late, so the W's fill the cool-down's idle slots; the bubble
    shrinks from (p-1)(f+b) to (p-1)(f+b-2w), and no rank holds more than p micro-batches."""
    actions: list[list[Action]] = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        waiting: list[Action] = []  # W's not yet run, oldest first

        def backward(mb: int) -> None:
            acts.append(I(r, mb))
            waiting.append(W(r, mb))
            if len(waiting) > r:  # rank r lets r of them wait
                acts.append(waiting.pop(0))  # the oldest: its activations go first

        for i in range(m - warmup):  # steady state: 1F, 1I (and a W)
            acts.append(F(r, warmup + i))
            backward(i)
        for mb in range(m - warmup, m):  # cool-down
            backward(mb)
        actions.append(acts + waiting)  # the last W's close the step
    return Schedule.build("zb-h1", p, m, 1, actions)


def breadth_first(p: int, m: int, v: int = 2) -> Schedule:
    """Breadth-first (looped) pipelining (Lamy-Poirier 2023; torch's ScheduleLoopedBFS): v chunks
    per rank placed round robin, as interleaved 1F1B places them, but each rank runs every
    micro-batch through its first chunk before its second (all forwards, chunk by chunk), then
    the backwards chunk by chunk from the last, the newest micro-batch first.

    Its fill and drain are interleaving's, (p − 1)/v chunk slots each way, for any m ≥ p; unlike
    GPipe and interleaved 1F1B it needs no m a multiple of p. What it costs is memory: like
    GPipe, a rank holds all m micro-batches (m·v chunks) at the turn. What it buys: each chunk's
    backwards end together, early for the last chunks, so a data-parallel all-reduce of a chunk's
    gradients (or an FSDP reshard) can start while the other chunks still compute, and the
    all-reduces of a step overlap more of it than depth-first schedules allow."""
    actions = []
    for r in range(p):
        chunks = [chunk * p + r for chunk in range(v)]
        acts = [F(stage, mb) for stage in chunks for mb in range(m)]
        acts += [B(stage, mb) for stage in reversed(chunks) for mb in reversed(range(m))]
        actions.append(acts)
    return Schedule.build("bfs", p, m, v, actions)


def inference(p: int, m: int, v: int = 1) -> Schedule:
    """Forward only, for serving: each micro-batch runs F on every stage in turn, and nothing is
    kept for a backward (there is none). With v = 1 every rank takes the micro-batches in order.
    With v chunks per rank (stage s on rank s % p) they go through the chunks in groups of p, as
    interleaved 1F1B's forwards do: rank r runs chunk 0 for the group, then chunk 1, ..., so the
    group's first micro-batch comes back to rank r just as its last one leaves. A last group of
    fewer than p is fine: no backward waits for it."""
    actions = []
    for r in range(p):
        acts = []
        for first in range(0, m, p):
            group = range(first, min(first + p, m))
            acts += [F(chunk * p + r, mb) for chunk in range(v) for mb in group]
        actions.append(acts)
    return Schedule.build("inference", p, m, v, actions)
