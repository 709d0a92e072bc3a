"""Schedules on the V placement: two chunks per rank, the second mirrored back (ZB-V, DualPipe-V).

    stage     0  1  2  3 | 4  5  6  7          p = 4 ranks, 2p = 8 stages
    rank      0  1  2  3 | 3  2  1  0

Rank r holds stage r and stage 2p − 1 − r, so rank 0 holds the model's first and last stage: a
micro-batch's forward goes down the ranks and comes back up, and its loss is computed on the rank
that started it. Two things follow. The turn at the bottom (stages p − 1 and p, both on rank p − 1)
needs no message; and a rank's two chunks are a fill and a drain apart, so when the warm-up of one
chunk ends the other has work at once — which is how ZB-V gets its bubble to zero while holding no
more activations than 1F1B, and DualPipe-V halves DualPipe's parameters.

Both generators follow the order of the published schedules (Qi et al. 2024, "Pipeline Parallelism
with Controllable Memory", §6 of the zero-bubble paper; DeepSeek-V3 §3.2.1 and deepseek-ai/DualPipe's
DualPipeV), as PyTorch ships them (`ScheduleZBVZeroBubble`, `ScheduleDualPipeV`);
tests/schedule/test_field_schedules.py checks each order against torch's own, action for action.
"""

from __future__ import annotations

from collections import defaultdict

from .ir import Schedule
from .ops import BACKWARD_INPUT, BACKWARD_WEIGHT, FULL_BACKWARD, Action, OpType


def v_placement(p: int) -> tuple[int, ...]:
    """Stage s on rank s for the first p stages, then back up: stage 2p − 1 − r on rank r."""
    return tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))


class _Lists:
    """One rank's list being written: `add(op, stage)` appends the next micro-batch of that op on
    that stage (each (op, stage) counts its own micro-batches from 0)."""

    def __init__(self) -> None:
        self.acts: list[Action] = []
        self.next: dict[tuple[str, int], int] = defaultdict(int)

    def add(self, op: str, stage: int) -> Action:
        a = Action(OpType(op), stage, self.next[op, stage])
        self.next[op, stage] += 1
        self.acts.append(a)
        return a

    def count(self, op: str, stage: int) -> int:
        return self.next[op, stage]


def zb_v(p: int, m: int, v: int = 2) -> Schedule:
    """ZB-V (Qi et al.): the V placement with every backward split into I and W.

    Rank r's list, with chunk 0 its first stage (r) and chunk 1 its second (2p − 1 − r):

        warm-up     2(p − r) − 1 forwards of chunk 0; then r times: F chunk 1, F chunk 0;
                    then p − r times: F, I, W of chunk 1
        steady      F, I, W of chunk 0, then F, I, W of chunk 1, until every forward ran
        cool-down   r times: I chunk 0, I chunk 1 (their W's wait); p − r times: I, W of chunk 0;
                    then the W's still waiting, chunk 1's first

    With F, I and W each costing the same, every slot of the steady state is full and the W's fill
    the warm-up's and cool-down's holes: the bubble goes to zero once m ≥ 2p − 1. Rank 0 holds at
    most 2p chunks — p micro-batches of its whole share — like 1F1B's first rank. The order is
    written for at least 2p − 1 micro-batches; with fewer, the ones that do not exist are dropped
    (as torch does), which leaves holes but no deadlock."""
    n = max(m, 2 * p - 1)
    lists: list[list[Action]] = []
    for r in range(p):
        first, second = r, 2 * p - 1 - r
        w = _Lists()
        for _ in range(2 * (p - r) - 1):
            w.add("F", first)
        for _ in range(r):
            w.add("F", second)
            w.add("F", first)
        for _ in range(p - r):
            for op in "FIW":
                w.add(op, second)
        while w.count("F", second) < w.count("F", first) or w.count("F", first) < n:
            if w.count("F", first) < n:
                w.add("F", first)
            w.add("I", first)
            w.add("W", first)
            for op in "FIW":
                w.add(op, second)
        for _ in range(r):
            w.add("I", first)
            w.add("I", second)
        for _ in range(p - r):
            w.add("I", first)
            w.add("W", first)
        for stage in (second, first):
            while w.count("W", stage) < w.count("I", stage):
                w.add("W", stage)
        lists.append([a for a in w.acts if a.mb is not None and a.mb < m])
    return Schedule.build("zb-v", p, m, 2, lists, v_placement(p))


def dualpipe_v(p: int, m: int, v: int = 2) -> Schedule:
    """DualPipe-V (DeepSeek-V3's DualPipe cut in half, as deepseek-ai/DualPipe and torch ship it):
    the V placement, and in the steady state each rank runs the forward of one micro-batch paired
    with the backward of another (`Schedule.paired`: torch's OVERLAP_F_B).

    Rank r's list, with chunk 0 its first stage (r) and chunk 1 its second (2p − 1 − r):

        1  2(p − r − 1) forwards of chunk 0
        2  r + 1 times: F chunk 0, F chunk 1
        3  p − r − 1 times: I chunk 1, the oldest waiting W, F chunk 1
        4  m − 2p + r + 1 times: F chunk 0 & B chunk 1, then F chunk 1 & B chunk 0 (pairs;
           the last rank's very first pair runs as two ops, to start the turn sooner)
        5  p − r − 1 times: B chunk 1, then F chunk 1 & B chunk 0
        6  r + 1 times: backward of chunk 1, backward of chunk 0 — whole B's for the first half,
           then I's whose W's wait (from the middle on, chunk 1 first on odd ranks)
        7  p − r − 1 times: the oldest waiting W, then a backward of chunk 0 (I or B as in 6)
        8  the W's still waiting

    On a GPU a pair hides each half's communication (DeepSeek-V3's expert all-to-all, the
    pipeline's sends) under the other's compute, so a pair costs F&B < F + B; with one stream (a
    CPU, this executor) its two ops simply run one after the other. Needs m ≥ 2p."""
    lists: list[list[Action]] = []
    paired: list[tuple[int, int]] = []
    for r in range(p):
        c0, c1 = r, 2 * p - 1 - r
        w = _Lists()
        waiting: list[Action] = []  # W's owed by I's that ran, oldest first
        pairs: list[int] = []  # positions of the forwards that open a pair

        def backward(stage: int, split: bool) -> None:
            mb = w.count("B", stage) + w.count("I", stage)
            op = BACKWARD_INPUT if split else FULL_BACKWARD
            w.acts.append(Action(op, stage, mb))
            w.next[op, stage] += 1
            if split:
                waiting.append(Action(BACKWARD_WEIGHT, stage, mb))

        def pair(forward: int, back: int) -> None:
            pairs.append(len(w.acts))
            w.add("F", forward)
            backward(back, split=False)

        def oldest_w() -> None:
            if waiting:
                w.acts.append(waiting.pop(0))

        for _ in range(2 * (p - r - 1)):
            w.add("F", c0)
        for _ in range(r + 1):
            w.add("F", c0)
            w.add("F", c1)
        for _ in range(p - r - 1):
            backward(c1, split=True)
            oldest_w()
            w.add("F", c1)
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:
                w.add("F", c0)
                backward(c1, split=False)
            else:
                pair(c0, c1)
            pair(c1, c0)
        for _ in range(p - r - 1):
            backward(c1, split=False)
            pair(c1, c0)
        split = False
        for i in range(r + 1):
            if i == (r + 1) // 2 and r % 2 == 1:
                split = True
            backward(c1, split)
            if i == (r + 1) // 2 and r % 2 == 0:
                split = True
            backward(c0, split)
        for _ in range(p - r - 1):
            oldest_w()
            backward(c0, split)
        while waiting:
            oldest_w()
        lists.append(w.acts)
        paired += [(r, i) for i in pairs]
    return Schedule.build("dualpipe-v", p, m, 2, lists, v_placement(p), paired=paired)
