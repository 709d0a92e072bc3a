"""What crosses from the sandbox to the judge: plain data, never code.

The sandbox turns what the learner's code returned into a tree of plain values (`encode`): None,
bools, numbers, strings, lists, tuples, dicts, sets, tensors, and the course's own value types
(an Action, a planner Layout, a Schedule) as their fields. Anything else (a generator, an object
of the learner's own class) becomes an `Opaque` stand-in that keeps its type's name and a short
repr, so that a checker can say "returned generator <...>; return a list". The judge reads the
bytes with torch's weights-only unpickler, which builds containers and tensors and nothing else
(`loads`): the learner's code cannot make the judge run anything by what it returns.
"""

from __future__ import annotations

import dataclasses
import io
import numbers

import torch

from ...planner.setup_and_layout import Layout
from ...schedule.ir import Schedule
from ...schedule.ops import Action
from .harness import harness

MAX_ITEMS = 5_000_000  # values in one answer: far above any exercise's, below what fills memory


class TooLarge(ValueError):
    pass


def dumps(tree) -> bytes:
    buf = io.BytesIO()
    torch.save(tree, buf)
    return buf.getvalue()


def loads(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


# -- the sandbox's side --------------------------------------------------------------------------
@harness
def encode(value):
    """`value` as a tree of plain values (see the module docstring)."""
    count = [0]
    return _encode(value, count, set())


@harness
def _encode(value, count, seen):
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise TooLarge(f"the answer holds more than {MAX_ITEMS:,} values")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, numbers.Number) and type(value).__module__ == "numpy":
        return value.item()
    if isinstance(value, torch.Tensor):
        return ["tensor", value.detach().cpu().clone().contiguous()]
    if id(value) in seen:
        return ["opaque", type(value).__name__, "<a value that contains itself>"]
    if type(value) is Action:
        return ["action", str(value.op), int(value.stage), int(value.mb)]
    if type(value) is Schedule:
        return [
            "schedule",
            value.kind,
            value.p,
            value.m,
            value.v,
            [[str(a) for a in row] for row in value.actions],
            list(value.placement),
            [list(pair) for pair in value.paired],
        ]
    if type(value) is Layout:
        return ["layout", {f.name: _encode(getattr(value, f.name), count, seen) for f in dataclasses.fields(value)}]
    seen = seen | {id(value)}
    if type(value) in (list, tuple, set, frozenset):
        return [type(value).__name__, [_encode(x, count, seen) for x in value]]
    if type(value) is dict:
        return ["dict", [[_encode(k, count, seen), _encode(v, count, seen)] for k, v in value.items()]]
    return ["opaque", type(value).__name__, _short_repr(value)]


@harness
def _short_repr(value) -> str:
    try:
        text = object.__repr__(value) if callable(value) else repr(value)
    except Exception:
        text = object.__repr__(value)
    return text if len(text) <= 120 else text[:117] + "..."


# -- the judge's side ----------------------------------------------------------------------------
class Opaque:
    """A value the sandbox could not send as plain data; its class is named after the original's."""

    def __init__(self, shown: str):
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


_OPAQUE: dict[str, type] = {}


def opaque(type_name: str, shown: str) -> Opaque:
    cls = _OPAQUE.setdefault(type_name, type(type_name, (Opaque,), {}))
    return cls(shown)


def decode(tree):
    """The value a tree from `encode` stands for, rebuilt in the judge."""
    if tree is None or type(tree) in (bool, int, float, str):
        return tree
    tag, *rest = tree
    if tag == "tensor":
        return rest[0]
    if tag in ("list", "tuple", "set", "frozenset"):
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(x) for x in rest[0])
    if tag == "dict":
        return {decode(k): decode(v) for k, v in rest[0]}
    if tag == "action":
        return Action(*rest)
    if tag == "schedule":
        kind, p, m, v, rows, placement, paired = rest
        return Schedule.build(
            kind, p, m, v, [[Action.parse(a) for a in row] for row in rows], tuple(placement), tuple(map(tuple, paired))
        )
    if tag == "layout":
        return Layout(**{k: decode(v) for k, v in rest[0].items()})
    if tag == "opaque":
        return opaque(*rest)
    raise ValueError(f"not a plain tree: {tag!r}")
