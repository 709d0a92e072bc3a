"""What the search tries: the choices (Space, its filters), the ways to cut the GPUs (cuts), and
for each cut its layouts grouped so that memory can rule out the larger ones unpredicted (groups);
only layouts that each schedule kind takes are made."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..parallel.mesh import check_expert_split
from ..schedule import kinds
from ..sim import recompute_costs as recomputation
from .presets import MOE_MODELS
from .setup_and_layout import ZERO, Layout, Setup
from .timing import plannable


@dataclass(frozen=True)
class Space:
    """What the search tries. schedules: kinds (None: every kind the registry can time and size);
    recompute, zero: the options; micro_batches: sizes (None: every divisor of each replica's
    share of the batch); max_tp, max_pp: upper bounds (None: what the model allows); cp: context-
    parallel degrees (None: 1, and more where each rank keeps at least MIN_CP_TOKENS positions);
    max_v: chunks per rank for kinds that interleave; ep: expert-parallel degrees for a mixture-of-
    experts model (None: every one that divides both its experts and the cut's dp·cp; the engine's
    rules, parallel/mesh.py)."""

    schedules: tuple[str, ...] | None = None
    recompute: tuple[str, ...] = recomputation.BLOCK_NAMES
    zero: tuple[int, ...] = ZERO
    micro_batches: tuple[int, ...] | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    cp: tuple[int, ...] | None = None
    max_v: int = 8
    ep: tuple[int, ...] | None = None

    def kinds(self) -> list[str]:
        names = self.schedules if self.schedules is not None else [k for k in kinds.names() if plannable(k)]
        out = []
        for name in names:
            kind = kinds.get(name)
            if not plannable(kind.name):
                raise ValueError(
                    f"the planner can time and size the kinds with makespan and peak_inflight formulas "
                    f"({', '.join(k for k in kinds.names() if plannable(k))}); {name!r} has none"
                )
            out.append(kind.name)
        return out

    def checked(self) -> Space:
        self.kinds()
        for rc in self.recompute:
            recomputation.block_option(rc)
        for z in self.zero:
            if z not in ZERO:
                raise ValueError(f"zero stages are {', '.join(map(str, ZERO))}; got {z!r}")
        for name, values in (("micro_batches", self.micro_batches), ("cp", self.cp), ("ep", self.ep)):
            for x in values or ():
                if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                    raise ValueError(f"{name} must be whole numbers >= 1, got {x!r}")
        for name in ("max_tp", "max_pp", "max_v"):
            x = getattr(self, name)
            if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {x!r}")
        return self


MIN_CP_TOKENS = 2048  # context parallelism is searched only where each rank keeps this many positions


def cuts(setup: Setup, space: Space, skip: Callable[[str], None]) -> list[tuple[int, int, int, int]]:
    """Every (tp, cp, pp, dp) the search tries; what is left out is counted by skip(reason)."""
    model, n = setup.model, setup.gpus
    out: list[tuple[int, int, int, int]] = []
    for tp in divisors(n):
        if space.max_tp is not None and tp > space.max_tp:
            continue
        if model.heads % tp or model.kv % tp or model.inner % tp or (setup.experts and setup.experts.ffn % tp):
            skip(
                f"tp must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP width ({model.inner})"
            )
            continue
        cps = (
            space.cp
            if space.cp is not None
            else [
                c for c in divisors(n // tp) if c == 1 or (model.seq % (2 * c) == 0 and model.seq // c >= MIN_CP_TOKENS)
            ]
        )
        for cp in cps:
            if (n // tp) % cp:
                continue
            for pp in divisors(n // (tp * cp)):
                if pp > model.layers or (space.max_pp is not None and pp > space.max_pp):
                    skip(f"pp at most the model's {model.layers} layers" if pp > model.layers else "pp above max_pp")
                    continue
                dp = n // (tp * cp * pp)
                if setup.batch % dp:
                    skip(f"dp must divide the global batch of {setup.batch} sequences")
                    continue
                out.append((tp, cp, pp, dp))
    return out


def count(skipped: dict[str, int], why: str, n: int = 1) -> None:
    """Note n layouts left out for `why`."""
    skipped[why] = skipped.get(why, 0) + n


@dataclass(frozen=True)
class Group:
    """The layouts of one cut, schedule kind, v, recomputation and ZeRO stage that differ only in
    the micro-batch: `sizes` (growing, each one the kind takes). Iterating makes the layouts one
    by one, so that those the search leaves out unpredicted are never made."""

    tp: int
    cp: int
    pp: int
    dp: int
    kind: str
    v: int
    recompute: str
    zero: int
    share: int  # sequences per data-parallel replica and step: m = share // micro-batch
    sizes: tuple[int, ...]
    ep: int = 1

    def __len__(self) -> int:
        return len(self.sizes)

    def __iter__(self) -> Iterator[Layout]:
        for b in self.sizes:
            yield Layout(
                self.tp,
                self.pp,
                self.dp,
                b,
                self.share // b,
                self.kind,
                self.v,
                self.recompute,
                self.zero,
                self.cp,
                self.ep,
            )


def groups(setup: Setup, space: Space, tp: int, cp: int, pp: int, dp: int) -> Iterator[Group]:
    """For one cut: per (kind, v, recompute, zero), its Group of layouts by growing micro-batch
    (memory never shrinks as the micro-batch grows, so once one misses, the larger ones do too).
    Only what each kind takes is made: its v range and its rules (schedule/kinds.py), e.g.
    interleaving's m a multiple of pp."""
    model = setup.model
    share = setup.batch // dp
    sizes = [b for b in (space.micro_batches or divisors(share)) if share % b == 0]
    recompute = [
        rc
        for rc in recomputation.BLOCK_NAMES
        if rc in space.recompute and not (rc == "selective" and model.attention == "fused")
    ]  # flash keeps no s² scores
    zeros = list(space.zero) if dp * cp > 1 else [min(space.zero)]  # one copy of the state: every stage is alike
    eps = expert_parallel(setup, space, dp * cp)  # empty: no asked ep divides this cut's dp·cp
    for kind in space.kinds():
        k = kinds.get(kind)
        for v in chunks(kind, pp, model.layers, space.max_v):
            taken = tuple(b for b in sizes if kinds.unsuited(k, pp, share // b, v) is None)
            if not taken:
                continue
            for rc in recompute:
                for z in zeros:
                    for ep in eps:
                        yield Group(tp, cp, pp, dp, kind, v, rc, z, share, taken, ep)


def check_experts(setup: Setup, space: Space) -> None:
    """A ValueError for an ep no layout of `setup` can take: ep > 1 on a dense model, or an ep that
    does not divide the experts (the engine's own check, parallel/mesh.check_expert_split)."""
    moe, asked = setup.experts, [e for e in space.ep or () if e > 1]
    if moe is None and asked:
        raise ValueError(
            f"ep={asked[0]} splits a mixture-of-experts model's experts, and {setup.model.name} has none; "
            f"leave ep out, or plan a MoE model ({', '.join(MOE_MODELS)})"
        )
    for e in asked:
        assert moe is not None
        check_expert_split(moe.experts, e, setup.model.name)


def expert_parallel(setup: Setup, space: Space, ranks: int) -> list[int]:
    """The ep degrees the search tries on a cut of `ranks` = dp·cp: those of space.ep (every
    divisor when None) that divide both the ranks and the model's experts (the engine's two
    rules); [1] for a dense model."""
    moe = setup.experts
    if moe is None:
        return [1]
    wanted = space.ep if space.ep is not None else divisors(ranks)
    return [e for e in wanted if ranks % e == 0 and moe.experts % e == 0]


def chunks(kind: str, pp: int, layers: int, max_v: int) -> range:
    """The v (chunks per rank) a kind takes on pp ranks: its own range (schedule/kinds.py), up to max_v and
    to one layer per chunk."""
    k = kinds.get(kind)
    if not k.takes_v:
        return range(1, 2)
    if pp == 1:
        return range(0)  # one rank: nothing to interleave
    return range(k.min_v, min(max_v, k.max_v or max_v, layers // pp) + 1)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
