"""One place per schedule kind: its generator, its rules, its textbook formulas.

Everything that offers a choice of schedule — `make_schedule`, `theory`, the CLI, the widgets'
menus, `RunConfig`, the benchmark — reads this registry, so a new kind is a generator plus one
`register(Kind(...))`:

    register(Kind("my-kind", my_generator, "what it does, in one line",
                  makespan=lambda p, m, v, f, b, w: ...))

Costs in the formulas are a rank's share of the model per micro-batch: f forward, b the whole
backward, w its weight-gradient part. With v chunks per rank each chunk costs 1/v of that, so
every kind is compared on the same model. A kind without formulas is fine: `theory` then says
it has none, rather than guessing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import generators
from .ir import Schedule
from .validate import validate

Rule = Callable[[int, int, int], "str | None"]   # (p, m, v) -> what is wrong, or None


@dataclass(frozen=True)
class Kind:
    name: str
    generate: Callable[..., Schedule]   # (p, m) -> Schedule, or (p, m, v) when takes_v
    summary: str                        # one line, for menus and --help
    takes_v: bool = False               # several chunks (virtual stages) per rank
    default_v: int = 1
    min_v: int = 1
    rules: tuple[Rule, ...] = ()
    makespan: Callable[..., float] | None = None         # (p, m, v, f, b, w) -> step time, uniform costs
    peak_inflight: Callable[..., int] | None = None      # (p, m, v, rank) -> micro-batch chunks held
    bubble_formula: str | None = None   # the textbook bubble, written for people
    aliases: tuple[str, ...] = ()


KINDS: dict[str, Kind] = {}
_ALIASES: dict[str, str] = {}


def register(kind: Kind) -> Kind:
    """Add a kind (or replace one of the same name); returns it."""
    for name in (kind.name, *kind.aliases):
        owner = _ALIASES.get(name.lower())
        if owner is not None and owner != kind.name:
            raise ValueError(f"{name!r} already names the kind {owner!r}; choose another name or alias")
    KINDS[kind.name] = kind
    _ALIASES.update({name.lower(): kind.name for name in (kind.name, *kind.aliases)})
    return kind


def unregister(name: str) -> None:
    kind = KINDS.pop(get(name).name)
    for alias in (kind.name, *kind.aliases):
        _ALIASES.pop(alias.lower(), None)


def names() -> list[str]:
    return list(KINDS)


def get(name: str) -> Kind:
    """The kind called `name` (or one of its aliases, any case); ValueError naming the choices."""
    key = _ALIASES.get(str(name).lower())
    if key is None:
        raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(KINDS)}")
    return KINDS[key]


def check(kind: str | Kind, p: int, m: int, v: int | None = None) -> tuple[Kind, int]:
    """Raise ValueError if (p, m, v) does not suit this kind; returns the kind and v (its default
    when None)."""
    k = kind if isinstance(kind, Kind) else get(kind)
    v = k.default_v if v is None else v
    for name, value in (("p (ranks)", p), ("m (micro-batches)", m), ("v (stages per rank)", v)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if not k.takes_v and v != 1:
        several = [n for n, other in KINDS.items() if other.takes_v]
        raise ValueError(f"v={v} stages per rank does not apply to {k.name}, which puts one stage on each rank; "
                         f"use v=1, or a kind with several stages per rank ({', '.join(several) or 'none registered'})")
    if k.takes_v and v < k.min_v:
        raise ValueError(f"{k.name} needs v >= {k.min_v} stages per rank; got v={v}")
    for rule in k.rules:
        problem = rule(p, m, v)
        if problem:
            raise ValueError(f"{k.name}: {problem}")
    return k, v


def make_schedule(kind: str, p: int, m: int, v: int | None = None, n_layers: int | None = None) -> Schedule:
    """The front door: check the parameters, generate, validate. v defaults to the kind's own
    default (2 for interleaved, else 1). `n_layers`, when given, checks that every one of the
    p·v stages gets at least one layer."""
    k, v = check(kind, p, m, v)
    if n_layers is not None and p * v > n_layers:
        raise ValueError(f"p*v = {p}*{v} = {p * v} stages but the model has only {n_layers} layers; "
                         f"every stage needs at least one layer, so use p*v <= {n_layers}")
    return validate(k.generate(p, m, v) if k.takes_v else k.generate(p, m))


# -- the built-in kinds ---------------------------------------------------------------------
def _m_multiple_of_p(p: int, m: int, v: int) -> str | None:
    if m % p == 0:
        return None
    lo, hi = (m // p) * p, (m // p + 1) * p
    choices = f"m={lo} or m={hi}" if lo else f"m={hi}"
    return (f"m (micro-batches) must be a multiple of p (ranks), because micro-batches go through the chunks "
            f"in groups of p: m={m} is not a multiple of p={p}; use {choices}")


def _fill_drain(p, m, v, f, b, w):
    return (m + (p - 1) / v) * (f + b)          # v = 1 but for interleaved: chunks cost 1/v each


def _zb_h1(p, m, v, f, b, w):
    w = b / 2 if w is None else w
    if m < p or w > f or w > b - w:
        raise ValueError(f"the zb-h1 formula holds for m >= p and w <= min(f, b - w); got p={p}, m={m}, f={f}, b={b}, w={w}")
    return m * (f + b) + (p - 1) * (f + b - 2 * w)


register(Kind(
    "naive", generators.naive, "one micro-batch at a time through all stages: one rank busy at once",
    makespan=lambda p, m, v, f, b, w: p * m * (f + b), peak_inflight=lambda p, m, v, r: 1,
    bubble_formula="(p−1)/p"))
register(Kind(
    "gpipe", generators.gpipe, "all forwards, then all backwards: every rank holds all m micro-batches",
    makespan=_fill_drain, peak_inflight=lambda p, m, v, r: m, bubble_formula="(p−1)/(m+p−1)", aliases=("afab",)))
register(Kind(
    "1f1b", generators.one_f_one_b, "warm-up, then one forward / one backward: rank r holds at most p−r",
    makespan=_fill_drain, peak_inflight=lambda p, m, v, r: min(p - r, m), bubble_formula="(p−1)/(m+p−1)",
    aliases=("one_f_one_b", "pipedream-flush")))
register(Kind(
    "interleaved", generators.interleaved_1f1b, "1F1B over v chunks per rank: a v times shorter fill and drain",
    takes_v=True, default_v=2, min_v=2, rules=(_m_multiple_of_p,), makespan=_fill_drain,
    peak_inflight=lambda p, m, v, r: min((p - r - 1) * 2 + (v - 1) * p + 1, m * v),
    bubble_formula="(p−1)/(v·m+p−1)", aliases=("interleaved_1f1b", "interleaved-1f1b")))
register(Kind(
    "zb-h1", generators.zb_h1, "1F1B with backward split into I and W; the W's fill the cool-down",
    makespan=_zb_h1, peak_inflight=lambda p, m, v, r: min(p, m),
    bubble_formula="(p−1)(f+b−2w) / (m(f+b) + (p−1)(f+b−2w))", aliases=("zb_h1", "zbh1")))
register(Kind(
    "inference", generators.inference,
    "forward only, for serving: each micro-batch through every stage in turn, nothing kept for a backward "
    "(with v chunks per rank, in groups of p); it serves, it does not train",
    takes_v=True, default_v=1, min_v=1, peak_inflight=lambda p, m, v, r: 0,
    bubble_formula="(p−1)/(v·m+p−1) (v > 1: m a multiple of p)", aliases=("forward-only", "serve")))
