"""A pipeline schedule is data: for every rank, an ordered list of actions.

An action is (op, stage, micro-batch), printed like PyTorch's pipelining as
`{stage}{op}{microbatch}`: `2F5` is the forward of micro-batch 5 on stage 2.

    F  forward
    B  backward (input and weight gradients together, unless the schedule has W actions)
    W  weight gradient alone (zero-bubble schedules split B into B = input grad, W = weight grad)

The generators below are pure functions `(p, m[, v]) -> Schedule`. Nothing here starts a
process: the simulator and the executor both read the same lists.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

OPS = ("F", "B", "W")


class Action(NamedTuple):
    op: str
    stage: int
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.mb}"

    def __repr__(self) -> str:
        return f"Action({self})"

    @staticmethod
    def parse(text: str) -> "Action":
        match = _ACTION_RE.fullmatch(text.strip())
        if not match:
            raise ValueError(
                f"{text!r} is not an action; write {{stage}}{{op}}{{microbatch}} with op one of "
                f"F, B, W, e.g. '2F5' (forward of micro-batch 5 on stage 2)"
            )
        return Action(match[2], int(match[1]), int(match[3]))


_ACTION_RE = re.compile(r"(\d+)([FBW])(\d+)")


def F(stage: int, mb: int) -> Action:
    return Action("F", stage, mb)


def B(stage: int, mb: int) -> Action:
    return Action("B", stage, mb)


def W(stage: int, mb: int) -> Action:
    return Action("W", stage, mb)


@dataclass(frozen=True)
class Schedule:
    """Per-rank action lists plus the shape of the pipeline.

    p ranks, m micro-batches, v stages per rank (p·v stages in all), and `placement[s]`, the
    rank that owns stage s. The default placement is Megatron's round robin: stage s on rank
    s % p, so with v = 1 stage s lives on rank s.
    """

    kind: str
    p: int
    m: int
    v: int
    actions: tuple[tuple[Action, ...], ...]
    placement: tuple[int, ...]

    @property
    def n_stages(self) -> int:
        return self.p * self.v

    @property
    def split_backward(self) -> bool:
        """True when backward is split into B (input grad) and W (weight grad)."""
        return any(a.op == "W" for acts in self.actions for a in acts)

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    @staticmethod
    def build(kind: str, p: int, m: int, v: int, actions: Iterable[Iterable], placement=None) -> "Schedule":
        """Make a schedule from per-rank lists of `Action`s or strings such as `"0F1"`."""
        lists = tuple(tuple(a if isinstance(a, Action) else Action.parse(a) for a in acts) for acts in actions)
        if len(lists) != p:
            raise ValueError(f"a schedule for p={p} ranks needs {p} action lists, got {len(lists)}")
        placement = tuple(placement) if placement is not None else round_robin(p, v)
        if len(placement) != p * v:
            raise ValueError(f"placement must name a rank for each of the p*v={p * v} stages, got {len(placement)}")
        return Schedule(kind, p, m, v, lists, placement)

    @staticmethod
    def custom(actions: Sequence[Sequence], m: int | None = None, v: int = 1, placement=None) -> "Schedule":
        """A hand-written schedule; p is the number of lists and m is read off the actions."""
        lists = [[a if isinstance(a, Action) else Action.parse(a) for a in acts] for acts in actions]
        if m is None:
            m = 1 + max((a.mb for acts in lists for a in acts), default=0)
        return Schedule.build("custom", len(lists), m, v, lists, placement)

    # -- text form ---------------------------------------------------------------------------
    def to_text(self) -> str:
        """One header line, then one line per rank: `rank 0: 0F0 0F1 0B0 ...`."""
        header = f"# minipipe schedule kind={self.kind} p={self.p} m={self.m} v={self.v}"
        if self.placement != round_robin(self.p, self.v):
            header += " placement=" + ",".join(map(str, self.placement))
        lines = [f"rank {r}: " + " ".join(map(str, acts)) for r, acts in enumerate(self.actions)]
        return "\n".join([header, *lines]) + "\n"

    @staticmethod
    def from_text(text: str) -> "Schedule":
        """Parse `to_text` output back. The header is optional: without one, p is the number of
        rank lines, v is read from the highest stage and m from the highest micro-batch."""
        header: dict[str, str] = {}
        lists: list[list[Action]] = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                header.update(kv.split("=", 1) for kv in line.split() if "=" in kv)
                continue
            label, sep, body = line.partition(":")
            if not sep or not re.fullmatch(r"rank\s*\d+", label.strip()):
                raise ValueError(f"line {n}: expected 'rank N: 0F0 0B0 ...', got {line!r}")
            if int(label.split("rank")[1]) != len(lists):
                raise ValueError(f"line {n}: ranks must be listed in order 0, 1, 2, ...; got {label.strip()!r}")
            lists.append([Action.parse(tok) for tok in body.split()])
        if not lists:
            raise ValueError("no 'rank N: ...' lines found in the schedule text")
        p = int(header.get("p", len(lists)))
        n_stages = 1 + max((a.stage for acts in lists for a in acts), default=0)
        v = int(header.get("v", -(-n_stages // p)))
        m = int(header.get("m", 1 + max((a.mb for acts in lists for a in acts), default=0)))
        placement = [int(r) for r in header["placement"].split(",")] if "placement" in header else None
        return Schedule.build(header.get("kind", "custom"), p, m, v, lists, placement)

    def __str__(self) -> str:
        return grid(self)


def round_robin(p: int, v: int) -> tuple[int, ...]:
    """Megatron's placement: stage s on rank s % p (rank r holds stages r, r+p, r+2p, ...)."""
    return tuple(s % p for s in range(p * v))


# -- the text grid --------------------------------------------------------------------------
def grid(schedule: Schedule, mark: Iterable[tuple[int, int]] = (), aligned: bool = True) -> str:
    """Time steps down, ranks across. `aligned` places each action at its start in a replay
    with unit costs, so idle steps show as `.`; otherwise (and for a schedule that cannot be
    replayed) row i holds each rank's i-th action. `mark` lists (rank, index) positions to
    flag, shown as `>1B2<`."""
    rows: dict[int, dict[int, str]] = {}
    marked = set(mark)
    steps = None
    if aligned:
        from .validate import unit_steps

        try:
            steps = unit_steps(schedule)
        except ValueError:
            steps = None
    for r, acts in enumerate(schedule.actions):
        for i, a in enumerate(acts):
            t = steps[r][i] if steps else i
            rows.setdefault(t, {})[r] = f">{a}<" if (r, i) in marked else str(a)
    width = max([len(f"rank {schedule.p - 1}")] + [len(c) for row in rows.values() for c in row.values()])
    n_steps = 1 + max(rows, default=-1)
    lines = [("step  " if steps else "   #  ") + " ".join(f"rank {r}".rjust(width) for r in range(schedule.p))]
    for t in range(n_steps):
        cells = rows.get(t, {})
        lines.append(f"{t:>4}  " + " ".join(cells.get(r, ".").rjust(width) for r in range(schedule.p)))
    return "\n".join(lines)


# -- generators -----------------------------------------------------------------------------
def _check(p: int, m: int, v: int = 1, kind: str = "") -> None:
    for name, value in (("p (ranks)", p), ("m (micro-batches)", m), ("v (stages per rank)", v)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if kind != "interleaved" and v != 1:
        raise ValueError(
            f"v={v} stages per rank only applies to the interleaved schedule; "
            f"use kind='interleaved' with v >= 2, or v=1 for {kind or 'this schedule'}"
        )
    if kind == "interleaved":
        if v < 2:
            raise ValueError(f"interleaved 1F1B needs v >= 2 stages per rank (v=1 is plain 1F1B); got v={v}")
        if m % p:
            lo, hi = (m // p) * p, (m // p + 1) * p
            choices = f"m={lo} or m={hi}" if lo else f"m={hi}"
            raise ValueError(
                f"interleaved 1F1B needs m (micro-batches) to be a multiple of p (ranks): "
                f"m={m} is not a multiple of p={p}; use {choices}"
            )


def naive(p: int, m: int = 1) -> Schedule:
    """Model parallelism without overlap: each micro-batch runs all the way forward and back
    before the next one enters, so only one rank is ever busy."""
    _check(p, m, kind="naive")
    actions = [[a for mb in range(m) for a in (F(r, mb), B(r, mb))] for r in range(p)]
    return Schedule.build("naive", p, m, 1, actions)


def gpipe(p: int, m: int) -> Schedule:
    """GPipe: all forwards (the pipeline fills), then all backwards (it drains).
    Every rank holds the activations of all m micro-batches at the turn."""
    _check(p, m, kind="gpipe")
    actions = [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)]
    return Schedule.build("gpipe", p, m, 1, actions)


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B (PipeDream-Flush): a warm-up of forwards, then one forward / one backward in
    turn, then a cool-down of backwards. Rank r holds at most p - r micro-batches."""
    _check(p, m, kind="1f1b")
    actions = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        steady = m - warmup
        acts = [F(r, mb) for mb in range(warmup)]          # warm-up
        for i in range(steady):                            # steady state: 1F, 1B
            acts += [F(r, warmup + i), B(r, i)]
        acts += [B(r, mb) for mb in range(steady, m)]      # cool-down
        actions.append(acts)
    return Schedule.build("1f1b", p, m, 1, actions)


def interleaved_1f1b(p: int, m: int, v: int = 2) -> Schedule:
    """Megatron's interleaved 1F1B: each rank holds v chunks (stages r, r+p, ...). Micro-batches
    go through the chunks in groups of p, which shrinks the bubble by a factor v."""
    _check(p, m, v, kind="interleaved")
    total = m * v                                    # forwards per rank, counting every chunk

    def stage(k: int, r: int, forward: bool) -> int:
        chunk = (k // p) % v                         # k-th forward/backward of the rank ...
        return (chunk if forward else v - 1 - chunk) * p + r

    def mb(k: int) -> int:
        return (k // (p * v)) * p + k % p            # ... and which micro-batch it is

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
    """Zero-bubble ZB-H1 (Qi et al., 2023): 1F1B with backward split into B (input gradient,
    which the previous stage waits for) and W (weight gradient, which nobody waits for).
    Rank r runs each W r places late, so the W's fill the cool-down's idle slots; the bubble
    shrinks from (p-1)(f+b) to (p-1)(f+b-2w), and no rank holds more than p micro-batches."""
    _check(p, m, kind="zb-h1")
    actions = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        waiting = []                                      # W's not yet run, oldest first

        def backward(mb):
            acts.append(B(r, mb))
            waiting.append(W(r, mb))
            if len(waiting) > r:                          # rank r lets r of them wait
                acts.append(waiting.pop(0))

        for i in range(m - warmup):                       # steady state: 1F, 1B (and a W)
            acts.append(F(r, warmup + i))
            backward(i)
        for mb in range(m - warmup, m):                   # cool-down
            backward(mb)
        actions.append(acts + waiting)                    # the last W's close the step
    return Schedule.build("zb-h1", p, m, 1, actions)


GENERATORS = {
    "naive": naive,
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved_1f1b,
    "zb-h1": zb_h1,
}
ALIASES = {"one_f_one_b": "1f1b", "interleaved_1f1b": "interleaved", "afab": "gpipe", "zb_h1": "zb-h1",
           "zbh1": "zb-h1"}


def make_schedule(kind: str, p: int, m: int, v: int = 1, n_layers: int | None = None) -> Schedule:
    """The front door: check the parameters, generate, validate. `n_layers`, when given,
    checks that every one of the p·v stages gets at least one layer."""
    name = ALIASES.get(str(kind).lower(), str(kind).lower())
    if name not in GENERATORS:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(GENERATORS)}")
    _check(p, m, v, kind=name)
    if n_layers is not None and p * v > n_layers:
        raise ValueError(
            f"p*v = {p}*{v} = {p * v} stages but the model has only {n_layers} layers; "
            f"every stage needs at least one layer, so use p*v <= {n_layers}"
        )
    schedule = GENERATORS[name](p, m, v) if name == "interleaved" else GENERATORS[name](p, m)
    from .validate import validate

    validate(schedule)
    return schedule
