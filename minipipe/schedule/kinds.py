"""One place per schedule kind: its generator, its rules, its textbook formulas.

Everything that offers a choice of schedule — `make_schedule`, `theory`, the CLI, the widgets'
menus, `RunConfig`, the benchmark — reads this registry, so a new kind is a generator plus one
`register(Kind(...))`:

    register(Kind("my-kind", my_generator, "what it does, in one line",
                  makespan=lambda p, m, v, f, b, w: ...))

Costs in the formulas are a rank's share of the model per micro-batch: f forward, b the whole
backward, w its weight-gradient part. With v chunks per rank each chunk costs 1/v of that, so
every kind is compared on the same model. A kind without formulas is fine: `theory` then says
it has none, rather than guessing. The built-in kinds' step times are in makespans.py, as their
generators are in generators.py and vshape.py: each declared here with the rest of its kind.

The asynchronous kinds (asynchronous.py: PipeDream, PipeDream-2BW) have no flush, so a step has no
makespan of its own: their schedule spans a run of steps (`make_schedule(..., steps=3)`), and their
formulas (`Kind.asynchronous`) are over such a run. Any flushed kind can be written over several
steps too (`steps=`), its weights updated once a step, for the simulator to draw beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import asynchronous, generators, makespans, vshape
from .asynchronous import NoFlush
from .ir import Schedule, check_size, round_robin
from .validate import validate

Rule = Callable[[int, int, int], "str | None"]  # (p, m, v) -> what is wrong, or None


@dataclass(frozen=True)
class Kind:
    name: str
    generate: Callable[..., Schedule]  # (p, m) -> Schedule, or (p, m, v) when takes_v
    summary: str  # one line, for menus and --help
    takes_v: bool = False  # several chunks (virtual stages) per rank
    default_v: int = 1
    min_v: int = 1
    max_v: int | None = None  # None: as many chunks as the layers allow
    rules: tuple[Rule, ...] = ()
    # (p, v) -> the rank of each stage, as the generator places them (None: read off a generated schedule)
    placement: Callable[[int, int], tuple[int, ...]] | None = None
    makespan: Callable[..., float] | None = None  # (p, m, v, f, b, w[, overlap]) -> step time, uniform costs
    peak_inflight: Callable[..., int] | None = None  # (p, m, v, rank) -> micro-batch chunks held
    bubble_formula: str | None = None  # the textbook bubble, written for people
    aliases: tuple[str, ...] = ()
    # no flush (asynchronous.py): generate takes (p, m, steps), the weights update inside the lists
    asynchronous: NoFlush | None = None


KINDS: dict[str, Kind] = {}
_ALIASES: dict[str, str] = {}


def register(kind: Kind) -> Kind:
    """Add a kind (or replace one of the same name); returns it."""
    for name in (kind.name, *kind.aliases):
        owner = _ALIASES.get(name.lower())
        if owner is not None and owner != kind.name:
            raise ValueError(f"{name!r} already names the kind {owner!r}; choose another name or alias")
    KINDS[kind.name] = kind
    _POSITIONS.clear()
    _ALIASES.update({name.lower(): kind.name for name in (kind.name, *kind.aliases)})
    return kind


def unregister(name: str) -> None:
    kind = KINDS.pop(get(name).name)
    _POSITIONS.clear()
    for alias in (kind.name, *kind.aliases):
        _ALIASES.pop(alias.lower(), None)


def names() -> list[str]:
    return list(KINDS)


_POSITIONS: dict[str, int] = {}  # name or alias -> place in KINDS; emptied when the registry changes


def position(name: str) -> int:
    """The kind's place in the registry's order (that of menus, and of ties in the planner's ranking)."""
    found = _POSITIONS.get(name)
    if found is None:
        found = _POSITIONS[name] = names().index(get(name).name)
    return found


def get(name: str) -> Kind:
    """The kind called `name` (or one of its aliases, any case); ValueError naming the choices."""
    key = _ALIASES.get(str(name).lower())
    if key is None:
        raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(KINDS)}")
    return KINDS[key]


class UnsuitedError(ValueError):
    """(p, m, v) that a kind cannot take: the message names the kind; `problem` is what is wrong and
    what to use, for callers that say it in their own words (the planner's skip counts)."""

    def __init__(self, kind: str, problem: str):
        super().__init__(f"{kind}: {problem}")
        self.kind, self.problem = kind, problem


def check(kind: str | Kind, p: int, m: int, v: int | None = None) -> tuple[Kind, int]:
    """Raise ValueError if (p, m, v) does not suit this kind; returns the kind and v (its default
    when None)."""
    k = kind if isinstance(kind, Kind) else get(kind)
    v = k.default_v if v is None else v
    for name, value in (("p (ranks)", p), ("m (micro-batches)", m), ("v (stages per rank)", v)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    problem = unsuited(k, p, m, v)
    if problem:
        raise UnsuitedError(k.name, problem)
    return k, v


def unsuited(k: Kind, p: int, m: int, v: int) -> str | None:
    """What keeps kind `k` from taking (p, m, v), whole numbers >= 1; None when it takes them.
    Cheap, and raises nothing: the planner asks it of every layout it would try."""
    if not k.takes_v and v != 1:
        several = [n for n, other in KINDS.items() if other.takes_v]
        return (
            f"v={v} stages per rank does not apply: it puts one stage on each rank; use v=1, or a kind with "
            f"several stages per rank ({', '.join(several) or 'none registered'})"
        )
    if k.takes_v and v < k.min_v:
        return f"needs v >= {k.min_v} stages per rank; got v={v}"
    if k.takes_v and k.max_v is not None and v > k.max_v:
        exactly = "exactly" if k.max_v == k.min_v else "at most"
        return f"holds {exactly} v={k.max_v} chunks (stages) per rank: use v={k.max_v}, got v={v}"
    for rule in k.rules:
        problem = rule(p, m, v)
        if problem:
            return problem
    return None


def make_schedule(
    kind: str, p: int, m: int, v: int | None = None, n_layers: int | None = None, steps: int | None = None
) -> Schedule:
    """The front door: check the parameters, generate, validate. v defaults to the kind's own
    default (2 for interleaved, else 1). `n_layers`, when given, checks that every one of the
    p·v stages gets at least one layer. `steps` training steps of m micro-batches in one schedule:
    an asynchronous kind's run (default: its default_steps), or a flushed kind's step repeated
    (default: the one step)."""
    k, v = check(kind, p, m, v)
    if n_layers is not None and p * v > n_layers:
        raise ValueError(
            f"p*v = {p}*{v} = {p * v} stages but the model has only {n_layers} layers; "
            f"every stage needs at least one layer, so use p*v <= {n_layers}"
        )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    check_size(p, m, v, steps or (k.asynchronous.default_steps if k.asynchronous is not None else 1))
    if k.asynchronous is not None:
        return validate(k.generate(p, m, steps or k.asynchronous.default_steps))
    step = k.generate(p, m, v) if k.takes_v else k.generate(p, m)
    return validate(step if steps is None else asynchronous.repeated(step, steps))


# -- the built-in kinds ---------------------------------------------------------------------
def _m_multiple_of_p(p: int, m: int, v: int) -> str | None:
    if m % p == 0:
        return None
    lo, hi = (m // p) * p, (m // p + 1) * p
    choices = f"m={lo} or m={hi}" if lo else f"m={hi}"
    return (
        f"m (micro-batches) must be a multiple of p (ranks), because micro-batches go through the chunks "
        f"in groups of p: m={m} is not a multiple of p={p}; use {choices}"
    )


register(
    Kind(
        "naive",
        generators.naive,
        "one micro-batch at a time through all stages: one rank busy at once",
        placement=round_robin,
        makespan=lambda p, m, v, f, b, w: p * m * (f + b),
        peak_inflight=lambda p, m, v, r: 1,
        bubble_formula="(p−1)/p",
    )
)
register(
    Kind(
        "gpipe",
        generators.gpipe,
        "all forwards, then all backwards: every rank holds all m micro-batches",
        placement=round_robin,
        makespan=makespans.fill_drain,
        peak_inflight=lambda p, m, v, r: m,
        bubble_formula="(p−1)/(m+p−1)",
        aliases=("afab",),
    )
)
register(
    Kind(
        "1f1b",
        generators.one_f_one_b,
        "warm-up, then one forward / one backward: rank r holds at most p−r",
        placement=round_robin,
        makespan=makespans.fill_drain,
        peak_inflight=lambda p, m, v, r: min(p - r, m),
        bubble_formula="(p−1)/(m+p−1)",
        aliases=("one_f_one_b", "pipedream-flush"),
    )
)
register(
    Kind(
        "interleaved",
        generators.interleaved_1f1b,
        "1F1B over v chunks per rank: a v times shorter fill and drain",
        placement=round_robin,
        takes_v=True,
        default_v=2,
        min_v=2,
        rules=(_m_multiple_of_p,),
        makespan=makespans.fill_drain,
        peak_inflight=lambda p, m, v, r: min((p - r - 1) * 2 + (v - 1) * p + 1, m * v),
        bubble_formula="(p−1)/(v·m+p−1)",
        aliases=("interleaved_1f1b", "interleaved-1f1b"),
    )
)
register(
    Kind(
        "zb-h1",
        generators.zb_h1,
        "1F1B with backward split into I and W; the W's fill the cool-down",
        placement=round_robin,
        makespan=makespans.zb_h1,
        peak_inflight=lambda p, m, v, r: min(p, m),
        bubble_formula="(p−1)(f+b−2w) / (m(f+b) + (p−1)(f+b−2w))",
        aliases=("zb_h1", "zbh1"),
    )
)


# -- the V placement (vshape.py: two chunks per rank, min_v = max_v = 2) and breadth-first --
def _v(p: int, v: int) -> tuple[int, ...]:
    return vshape.v_placement(p)


def _m_at_least_2p(p: int, m: int, v: int) -> str | None:
    return (
        None
        if m >= 2 * p
        else (
            f"m (micro-batches) must be at least 2p = {2 * p}, so that the steady state "
            f"has a forward to pair with every backward; got m={m}, use m={2 * p} or more"
        )
    )


register(
    Kind(
        "zb-v",
        vshape.zb_v,
        "zero bubble on a V: two chunks per rank, the second mirrored back, backward split into I and W; "
        "1F1B's memory, the bubble near zero when F, I and W cost the same",
        placement=_v,
        takes_v=True,
        default_v=2,
        min_v=2,
        max_v=2,
        makespan=makespans.zb_v,
        peak_inflight=lambda p, m, v, r: min(2 * p, m + r + 1, 2 * m),
        bubble_formula="idle (p−1)·max(f+b−2w, 2b−4w)/2 per rank: (p−1)·f/2 when w = f ≤ b−w ≤ 2f, half of ZB-H1's",
        aliases=("zbv", "zb_v", "zero-bubble-v"),
    )
)
register(
    Kind(
        "dualpipe-v",
        vshape.dualpipe_v,
        "DeepSeek's DualPipe cut in half: the V placement, a forward of one micro-batch paired with a backward of "
        "another (overlapped on a GPU); the warm-up's and cool-down's backwards split into I and W",
        placement=_v,
        takes_v=True,
        default_v=2,
        min_v=2,
        max_v=2,
        rules=(_m_at_least_2p,),
        makespan=makespans.dualpipe_v,
        peak_inflight=lambda p, m, v, r: 2 * p + 1,
        bubble_formula="idle (p−1)(F&B + B − 3W) per rank, with F, B, W one chunk's (f/2, b/2, w/2) and F&B a pair's: "
        "DeepSeek's (PP/2 − 1)(F&B + B − 3W) for PP = 2p stages",
        aliases=("dualpipev", "dualpipe_v"),
    )
)
register(
    Kind(
        "bfs",
        generators.breadth_first,
        "breadth-first (looped): every micro-batch through a rank's first chunk before its second; interleaving's "
        "bubble for any m >= p, GPipe's memory, early gradients for data parallelism",
        placement=round_robin,
        takes_v=True,
        default_v=2,
        min_v=1,
        makespan=makespans.bfs,
        peak_inflight=lambda p, m, v, r: m * v,
        bubble_formula="(p−1)/(v·m+p−1), m ≥ p",
        aliases=("breadth-first", "looped-bfs", "loopedbfs", "looped_bfs"),
    )
)
register(
    Kind(
        "inference",
        generators.inference,
        "forward only, for serving: each micro-batch through every stage in turn, nothing kept for a backward "
        "(with v chunks per rank, in groups of p); it serves, it does not train",
        placement=round_robin,
        takes_v=True,
        default_v=1,
        min_v=1,
        peak_inflight=lambda p, m, v, r: 0,
        bubble_formula="(p−1)/(v·m+p−1) (v > 1: m a multiple of p)",
        aliases=("forward-only", "serve"),
    )
)


# -- no flush (asynchronous.py): the papers' 1F1B run on over several steps --------------------
register(
    Kind(
        "pipedream",
        asynchronous.pipedream,
        "PipeDream (2019): 1F1B with no flush; every stage updates after every backward, each backward with its "
        "forward's stashed weights: rank r keeps p − r versions and is p − 1 − r updates stale (not the unsplit "
        "model's math)",
        placement=round_robin,
        asynchronous=asynchronous.PIPEDREAM,
        bubble_formula="(p−1)/(steps·m+p−1): one fill and drain for the whole run",
        aliases=("pipedream-1f1b", "weight-stashing"),
    )
)
register(
    Kind(
        "pipedream-2bw",
        asynchronous.pipedream_2bw,
        "PipeDream-2BW (2021): 1F1B with no flush; one update per step from its m gradients, computed with the weights "
        "of one step before: two versions per rank, one step stale (not the unsplit model's math); m ≥ p − 1",
        placement=round_robin,
        rules=(asynchronous.m_at_least_p_minus_1,),
        asynchronous=asynchronous.TWO_BW,
        bubble_formula="(p−1)/(steps·m+p−1): one fill and drain for the whole run",
        aliases=("2bw", "pipedream_2bw", "pipedream2bw"),
    )
)
