"""A pipeline schedule is data: for every rank, an ordered list of actions.

An action is (op, stage, micro-batch), printed like PyTorch's pipelining as
`{stage}{op}{microbatch}`: `2F5` is the forward of micro-batch 5 on stage 2. The ops (F, B, I, W,
and torch's sends, receives and FSDP actions) and what each needs, keeps and frees are in ops.py.
A schedule of computations alone has its communication derived (`messages`); one that writes its
sends and receives (`explicit_comms`) has them checked and run where they are written.

The generators (generators.py) are pure functions `(p, m[, v]) -> Schedule`, and kinds.py names
them; nothing here starts a process: the simulator and the executor both read the same lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from .ops import (
    BACKWARD_INPUT,
    COMPUTE,
    FORWARD,
    FSDP,
    FULL_BACKWARD,
    SENDS_AND_RECEIVES,
    Action,
    OpType,
    inputs_of,
    receive_of,
    send_of,
)
from .replay import Stuck, unit_steps
from .updates import Updates, VersionPlan, plan, to_header

__all__ = ["Action", "Schedule", "grid", "round_robin"]


MAX_CELLS = 2**16  # stage micro-batches (p·v·m) of a schedule minipipe builds or checks: 2 or 3 actions each


def check_size(p: int, m: int, v: int, steps: int = 1) -> None:
    """Refuse a schedule too large to build, validate and simulate in reasonable time and memory:
    make_schedule calls it before generating one (a run without a flush holds all its steps), the
    validator on one written by hand."""
    cells = p * v * m * steps
    if cells > MAX_CELLS:
        size = f"p·v·m = {p}·{v}·{m}" if steps == 1 else f"p·v·m·steps = {p}·{v}·{m}·{steps}"
        raise ValueError(
            f"{size} = {cells:,} stage micro-batches, above the {MAX_CELLS:,} minipipe builds a schedule "
            f"of: each is 2 or 3 actions, and at the limit (~200,000 actions) building and simulating "
            f"take ~5 s and 250 MB here, growing with the size; use fewer ranks (p), micro-batches (m)"
            + (", steps in one schedule" if steps > 1 else "")
            + " or stages per rank (v)"
        )


@dataclass(frozen=True)
class Schedule:
    """Per-rank action lists plus the shape of the pipeline.

    p ranks, m micro-batches, v stages per rank (p·v stages in all), and `placement[s]`, the
    rank that owns stage s. The default placement is Megatron's round robin: stage s on rank
    s % p, so with v = 1 stage s lives on rank s.

    `paired` lists (rank, index) where the forward at that index of the rank's list and the
    backward right after it form one overlapped pair (DualPipe's F&B, torch's OVERLAP_F_B): the
    pair starts when both have their inputs, and both results leave when it ends. One stream
    (this executor, a CPU) runs its two ops one after the other; on a GPU the two overlap, so a
    pair costs less than its two ops (sim.pipeline.Costs.overlap).

    `updates` (updates.py) makes the lists span several training steps, each stage updating its
    weights where the rule says, with no flush between steps (the asynchronous kinds, PipeDream and
    PipeDream-2BW); `versions` derives which weight version every micro-batch uses. None: one
    flushed step, its weights updated once after it.
    """

    kind: str
    p: int
    m: int
    v: int
    actions: tuple[tuple[Action, ...], ...]
    placement: tuple[int, ...]
    paired: tuple[tuple[int, int], ...] = ()
    updates: Updates | None = None

    @property
    def n_stages(self) -> int:
        return self.p * self.v

    @cached_property
    def _ops_of(self) -> dict[tuple[int, int | None], set[OpType]]:
        ops: dict[tuple[int, int | None], set[OpType]] = {}
        for acts in self.actions:
            for a in acts:
                ops.setdefault((a.stage, a.mb), set()).add(a.op)
        return ops

    @cached_property
    def op_types(self) -> frozenset[OpType]:
        """The op types the lists use (ops.OpType)."""
        return frozenset(a.op for acts in self.actions for a in acts)

    @cached_property
    def explicit_comms(self) -> bool:
        """The schedule writes its sends and receives (SEND_F, RECV_F, ...) rather than leaving
        them to be derived; validate.py checks that it writes every one, where it may."""
        return not self.op_types.isdisjoint(SENDS_AND_RECEIVES)

    @cached_property
    def fsdp(self) -> bool:
        """The schedule writes FSDP's UNSHARD, RESHARD or REDUCE_GRAD actions."""
        return not self.op_types.isdisjoint(FSDP)

    @cached_property
    def computations(self) -> tuple[tuple[Action, ...], ...]:
        """Each rank's list with only its computations (F, B, I, W): the schedule as torch's
        compute-only CSV holds it, and as the textbook formulas see it."""
        if self.op_types <= COMPUTE:
            return self.actions
        return tuple(tuple(a for a in acts if a.op in COMPUTE) for acts in self.actions)

    def gradient_op(self, stage: int, mb: int | None) -> OpType:
        """The op that computes `stage`'s input gradient for `mb` here: "I" when its backward is
        split, else "B"."""
        return BACKWARD_INPUT if BACKWARD_INPUT in self._ops_of.get((stage, mb), ()) else FULL_BACKWARD

    def data_needs(self, a: Action) -> tuple[Action, ...]:
        """The computations whose results `a` consumes (ops.inputs_of, resolved for this schedule)."""
        return inputs_of(a, self.n_stages, self.gradient_op)

    def needs(self, a: Action) -> tuple[Action, ...]:
        """What `a` waits for: `data_needs`; where the schedule writes its sends and receives, a
        result from another rank is waited for at its send, and the action waits for its own
        receive too."""
        return self._waits(self.placement[a.stage], a, self.data_needs(a))

    def _waits(self, rank: int, a: Action, deps: tuple[Action, ...]) -> tuple[Action, ...]:
        if not self.explicit_comms or a.op not in COMPUTE:
            return deps
        owner = self.placement
        crossing = [d for d in deps if owner[d.stage] != rank]
        if not crossing:
            return deps
        return (
            tuple(d for d in deps if owner[d.stage] == rank)
            + tuple(send_of(d) for d in crossing)
            + tuple(receive_of(d) for d in crossing)
        )

    @cached_property
    def data_needs_by_rank(self) -> tuple[tuple[tuple[Action, ...], ...], ...]:
        """`data_needs` of every action, per rank in list order, worked out once (the executor
        reads it at every action)."""
        return tuple(tuple(self.data_needs(a) for a in acts) for acts in self.actions)

    @cached_property
    def needs_by_rank(self) -> tuple[tuple[tuple[Action, ...], ...], ...]:
        """`needs` of every action, per rank in list order, worked out once: the replay (and so
        the simulator and the validator) reads it at every action."""
        if not self.explicit_comms:
            return self.data_needs_by_rank
        return tuple(
            tuple(self._waits(r, a, deps) for a, deps in zip(acts, row))
            for r, (acts, row) in enumerate(zip(self.actions, self.data_needs_by_rank))
        )

    @cached_property
    def messages(self) -> tuple[tuple[Action, int, int], ...]:
        """Every message the schedule implies, once: (producer, src rank, dst rank), in consumer
        order. A forward's output goes to the next stage's forward; a backward's input gradient to
        the previous stage's backward; neighbours on one rank need no message. The producer is the
        computation whose result moves (an explicit send only says when it leaves)."""
        owner = self.placement
        return tuple(
            (d, owner[d.stage], r)
            for r, (acts, row) in enumerate(zip(self.actions, self.data_needs_by_rank))
            for a, needs in zip(acts, row)
            if a.op in COMPUTE
            for d in needs
            if owner[d.stage] != r
        )

    def splits_backward(self, stage: int | None = None) -> bool:
        """True when some backward (on `stage`, or anywhere) is split into I and W."""
        return any("I" in ops for (s, _), ops in self._ops_of.items() if stage is None or s == stage)

    @cached_property
    def forward_only(self) -> bool:
        """No backward at all: a schedule for serving, not training."""
        return not any(a.op in COMPUTE and a.op != FORWARD for acts in self.actions for a in acts)

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    @cached_property
    def versions(self) -> VersionPlan | None:
        """Which weight version each micro-batch uses and when each update is made (updates.plan);
        None for a flushed step. Raises updates.UpdateProblem where the lists cannot keep the rule
        (validate reports it with the grid)."""
        return None if self.updates is None else plan(self)

    @property
    def steps(self) -> int:
        """Training steps the lists hold: 1 for a flushed step."""
        return 1 if self.updates is None else self.updates.steps(self.m)

    @cached_property
    def pair_starts(self) -> frozenset[tuple[int, int]]:
        """`paired` as a set, for the replay's look-ups."""
        return frozenset(self.paired)

    @staticmethod
    def build(
        kind: str,
        p: int,
        m: int,
        v: int,
        actions: Iterable[Iterable[Action | str]],
        placement: Sequence[int] | None = None,
        paired: Iterable[tuple[int, int]] = (),
        updates: Updates | None = None,
    ) -> Schedule:
        """Make a schedule from per-rank lists of `Action`s or strings such as `"0F1"`, or
        `"(0F3;3B1)"` for a forward and a backward that run as one overlapped pair."""
        lists, found = _read_lists(actions)
        if len(lists) != p:
            raise ValueError(f"a schedule for p={p} ranks needs {p} action lists, got {len(lists)}")
        placement = tuple(placement) if placement is not None else round_robin(p, v)
        if len(placement) != p * v:
            raise ValueError(f"placement must name a rank for each of the p*v={p * v} stages, got {len(placement)}")
        pairs = tuple(sorted({(int(r), int(i)) for r, i in (*paired, *found)}))
        return Schedule(kind, p, m, v, lists, placement, pairs, updates)

    @staticmethod
    def custom(
        actions: Sequence[Sequence[Action | str]],
        m: int | None = None,
        v: int = 1,
        placement: Sequence[int] | None = None,
        paired: Iterable[tuple[int, int]] = (),
        updates: Updates | None = None,
    ) -> Schedule:
        """A hand-written schedule; p is the number of lists and m is read off the actions."""
        if isinstance(actions, (str, bytes)):
            raise ValueError(
                "custom takes one list of actions per rank, e.g. [['0F0', '0B0'], ...], not a string "
                f"(Schedule.from_text reads text: {FROM_TEXT})"
            )
        lists, found = _read_lists(actions)
        if not lists or not any(lists):
            raise ValueError(
                "the schedule has no actions: give one list of actions per rank, e.g. [['0F0', '0B0'], ['1F0', '1B0']]"
            )
        if m is None:
            m = 1 + max((a.mb for acts in lists for a in acts if a.mb is not None), default=0)
        return Schedule.build("custom", len(lists), m, v, lists, placement, (*paired, *found), updates)

    # -- text form ---------------------------------------------------------------------------
    def tokens(self, rank: int) -> list[str]:
        """Rank `rank`'s list as text, one token per thing it runs: an action (`0F3`), or an
        overlapped pair in torch's own form (`(0F3;3B1)OVERLAP_F_B`), which torch's
        `_Action.from_str` reads as it reads its own."""
        acts, out, i = self.actions[rank], list[str](), 0
        while i < len(acts):
            if (rank, i) in self.pair_starts and i + 1 < len(acts):
                out.append(f"({acts[i]};{acts[i + 1]}){PAIR_SUFFIX}")
                i += 2
            else:
                out.append(str(acts[i]))
                i += 1
        return out

    def to_text(self) -> str:
        """One header line, then one line per rank: `rank 0: 0F0 0F1 0B0 ...`."""
        header = f"# minipipe schedule kind={self.kind} p={self.p} m={self.m} v={self.v}"
        if self.placement != round_robin(self.p, self.v):
            header += " placement=" + ",".join(map(str, self.placement))
        if self.updates is not None:
            header += " " + to_header(self.updates)
        lines = [f"rank {r}: " + " ".join(self.tokens(r)) for r in range(self.p)]
        return "\n".join([header, *lines]) + "\n"

    @staticmethod
    def from_text(text: str) -> Schedule:
        """Parse `to_text` output back. The header is optional: without one, p is the number of
        rank lines, v is read from the highest stage and m from the highest micro-batch."""
        if not isinstance(text, str):
            raise ValueError(
                f"from_text reads a schedule's text (a string, as to_text writes it), got {type(text).__name__}"
            )
        header: dict[str, str] = {}
        rows: list[list[str]] = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                header.update((key, value) for key, eq, value in map(lambda kv: kv.partition("="), line.split()) if eq)
                continue
            label, sep, body = line.partition(":")
            if not sep or not re.fullmatch(r"rank\s*\d+", label.strip()):
                raise ValueError(f"line {n}: expected 'rank N: 0F0 0B0 ...', got {line!r}")
            if int(label.split("rank")[1]) != len(rows):
                raise ValueError(f"line {n}: ranks must be listed in order 0, 1, 2, ...; got {label.strip()!r}")
            rows.append(body.split())
        lists, paired = _read_lists(rows)
        if not any(lists):
            raise ValueError(f"the schedule text has no actions: {FROM_TEXT}")
        _check_header(header)
        p = int(header.get("p", len(lists)))
        n_stages = 1 + max(a.stage for acts in lists for a in acts)
        v = int(header.get("v", -(-n_stages // p)))
        m = int(header.get("m", 1 + max((a.mb for acts in lists for a in acts if a.mb is not None), default=0)))
        placement = [int(r) for r in header["placement"].split(",")] if "placement" in header else None
        updates = Updates(header["updates"], int(header.get("per_step", m))) if "updates" in header else None
        return Schedule.build(header.get("kind", "custom"), p, m, v, lists, placement, paired, updates)

    def __str__(self) -> str:
        return grid(self)


FROM_TEXT = "a line per rank, 'rank N:' and what rank N runs, e.g. 'rank 0: 0F0 0B0'"
HEADER_FIELDS = ("kind", "p", "m", "v", "placement", "updates", "per_step")  # what `# minipipe schedule ...` may say


def _check_header(header: dict[str, str]) -> None:
    """Name the header field that is wrong, rather than let int() say "invalid literal"."""
    for key, value in header.items():
        if key not in HEADER_FIELDS:
            raise ValueError(
                f"unknown header field {key!r}; the fields are {', '.join(HEADER_FIELDS)} "
                f"(e.g. '# minipipe schedule kind=custom p=2 m=4 v=1')"
            )
        if key in ("p", "m", "v", "per_step") and not value.isdigit():
            raise ValueError(f"header field {key}={value!r} is not a whole number; write e.g. {key}=4")
        if key == "placement" and not all(r.isdigit() for r in value.split(",")):
            raise ValueError(
                f"header field placement={value!r} is not a list of ranks; write one rank per "
                f"stage, e.g. placement=0,1,1,0"
            )


PAIR_SUFFIX = "OVERLAP_F_B"  # torch's name for an overlapped forward-and-backward
_PAIR_RE = re.compile(rf"\(([^;()]+);([^;()]+)\)(?:{PAIR_SUFFIX})?")


def _read_lists(
    actions: Iterable[Iterable[Action | str]],
) -> tuple[tuple[tuple[Action, ...], ...], list[tuple[int, int]]]:
    """Per-rank lists of Actions or their text; a pair token `(0F3;3B1)` (torch writes
    `(0F3;3B1)OVERLAP_F_B`) becomes its two actions, and its place is returned in `paired`."""
    lists: list[tuple[Action, ...]] = []
    paired: list[tuple[int, int]] = []
    for r, acts in enumerate(actions):
        row: list[Action] = []
        for a in acts:
            if isinstance(a, Action):
                row.append(a)
                continue
            pair = _PAIR_RE.fullmatch(str(a).strip())
            if pair:
                paired.append((r, len(row)))
                row += [Action.parse(pair[1]), Action.parse(pair[2])]
            else:
                row.append(Action.parse(a))
        lists.append(tuple(row))
    return tuple(lists), paired


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
        try:
            steps = unit_steps(schedule)
        except (Stuck, KeyError, IndexError):  # a schedule that cannot run, or is malformed
            steps = None
    for r, acts in enumerate(schedule.actions):
        for i, a in enumerate(acts):
            t = steps[r][i] if steps else i
            rows.setdefault(t, {})[r] = f">{a}<" if (r, i) in marked else str(a)
    width = max([len(f"rank {schedule.p - 1}")] + [len(c) for row in rows.values() for c in row.values()])
    n_steps = 1 + max(rows)  # a schedule has actions (Schedule.build refuses none)
    lines = [("step  " if steps else "   #  ") + " ".join(f"rank {r}".rjust(width) for r in range(schedule.p))]
    for t in range(n_steps):
        cells = rows.get(t, {})
        lines.append(f"{t:>4}  " + " ".join(cells.get(r, ".").rjust(width) for r in range(schedule.p)))
    return "\n".join(lines)
