"""Exercise 15: sharded data parallelism (FSDP, ZeRO). The learner writes what each rank sends in
one FSDP training step (`fsdp_bytes(units, n)`: the all-gathers and reduce-scatters, from the
parameters' shapes) and what each rank holds under ZeRO stages 0 to 3 (`zero_memory(parameters,
tensors, block, n, zero)`, by kind).

The bytes are checked against frameworks/fsdp.py's formula on units of shapes drawn afresh (first
dimensions that n does not divide: FSDP pads them), then against what torch's own `fully_shard`
sends, counted at its collectives, on 2 real processes. The memory is checked against the
planner's model (planner/footprint.py) on the catalogue's models and on model shapes drawn afresh,
to the byte (a term of a few kilobytes is wrong however large the model).
While the learner's code runs, those formulas, the ring arithmetic and the planner's memory and
cost model refuse to answer (guard.py)."""

from __future__ import annotations

import numbers
import random

from ...planner import presets
from ...planner.footprint import Footprint
from ...planner.shapes import ModelShape
from ..i18n.messages import say as _
from .guard import ask
from .verdict import Mistake, close, verdict

# what the learner's code may call while the check calls it (grading/watch.py): nothing of minipipe's
# (the bytes come from the shapes and counts)
ALLOWED = ()
KINDS = ("all-gather", "reduce-scatter")
MEMORY_KINDS = ("parameters", "gradients", "optimizer")
REAL_N = 2
REAL_MODEL = dict(model="mlp", model_args={"width": 33, "depth": 3}, batch_size=8, steps=1)  # 33 rows: padded


# -- FSDP's bytes per step ---------------------------------------------------------------------------
def unit_cases(rng: random.Random) -> list[tuple[list[list[tuple]], int]]:
    """(units, n): a Linear-and-bias MLP that n divides first, then shapes drawn with first
    dimensions n does not divide, and a larger case than a table holds."""

    def drawn(layers: int, n: int) -> tuple:
        units = []
        for _n in range(layers):
            out, inp = rng.randint(3, 97), rng.randint(3, 97)
            units.append([(out, inp), (out,)] + ([(inp,), (inp,)] if rng.random() < 0.3 else []))
        return units, n

    fixed = [([[(48, 48), (48,)]] * 3, 6), ([[(33, 16), (33,)], [(16, 33), (16,)]], 2)]
    return fixed + [drawn(rng.randint(1, 6), rng.randint(2, 8)) for _n in range(8)] + [drawn(40, rng.randint(9, 64))]


def _meta_units(units) -> list:
    """Each unit as an object with parameters() of those shapes, as fsdp.formula_bytes reads them
    (fp32 tensors on torch's meta device: no memory)."""
    import torch

    class Unit:
        def __init__(self, shapes):
            self.tensors = [torch.empty(shape, dtype=torch.float32, device="meta") for shape in shapes]

        def parameters(self):
            return iter(self.tensors)

    return [Unit(shapes) for shapes in units]


def _by_kind(value, name: str, kinds=KINDS) -> dict[str, float]:
    if not isinstance(value, dict) or set(value) != set(kinds):
        shown = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise Mistake(
            _(
                "{name} returned {shown}; return a dict with the keys {keys}, each a number of bytes",
                name=name,
                shown=shown,
                keys=", ".join(map(repr, kinds)),
            )
        )
    for kind, x in value.items():
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise Mistake(
                _(
                    "{name}[{kind!r}] is {type} {x!r:.40}; each kind is a number of bytes",
                    name=name,
                    kind=kind,
                    type=type(x).__name__,
                    x=x,
                )
            )
    return {kind: float(x) for kind, x in value.items()}


def _fsdp(fn, units, n) -> dict[str, float]:
    name = f"{getattr(fn, '__name__', 'fsdp_bytes')}(units, {n})"
    return ask(
        fn,
        [list(u) for u in units],
        n,
        name=name,
        advice=_("work the bytes out from the shapes yourself — FSDP's own run will check them"),
        take=lambda v: _by_kind(v, name),
    )


def _bytes_hint(kind: str, mine: float, units, n: int, right: dict) -> str:
    whole = sum(4 * _numel(shape) for unit in units for shape in unit)
    unpadded = (n - 1) / n * whole
    gathers = 2 if kind == "all-gather" else 1
    if close(mine, gathers * unpadded) and not close(mine, right[kind]):
        return " " + _(
            "That leaves out FSDP's padding: it splits each parameter along its first dimension into n equal "
            "shards, so a first dimension n does not divide is padded up to a multiple of n, and the padding "
            "travels too."
        )
    always = sum(4 * (shape[0] // n + 1) * n * _numel(shape[1:]) for unit in units for shape in unit)
    if close(mine, gathers * (n - 1) / n * always):
        return " " + _(
            "That pads every first dimension by a shard, even one that n divides: pad d up to the next multiple "
            "of n only where n does not divide it, -(-d // n) * n."
        )
    if kind == "all-gather" and close(mine, right[kind] / 2):
        return " " + _(
            "That gathers each unit once. FSDP frees a unit's gathered parameters after its forward (to keep "
            "only 1/n of them between uses) and gathers them again for its backward: two all-gathers a unit."
        )
    if close(mine, 2 * right[kind]):
        return " " + _(
            "That is a ring all-reduce's share, 2(n−1)/n of the buffer. An all-gather or a reduce-scatter is "
            "half of one: each rank sends (n−1)/n of the buffer."
        )
    if close(mine, right[kind] * n / (n - 1)):
        return " " + _(
            "That is the whole buffer; in a ring each rank sends (n−1)/n of it (its own shard it need not send)."
        )
    if close(mine, right[kind] / n) or close(mine, right[kind] / (n - 1)):
        return " " + _("That is one shard; in a ring each rank passes on n − 1 shards, (n−1)/n of the buffer.")
    if close(mine, right[kind] / 4):
        return " " + _("That counts values; each is 4 bytes (fp32).")
    return ""


def _numel(shape) -> int:
    out = 1
    for x in shape:
        out *= x
    return out


def _check_formula(fn, cases) -> str:
    from ...frameworks.fsdp import formula_bytes

    for units, n in cases:
        mine, right = _fsdp(fn, units, n), formula_bytes(_meta_units(units), n)
        for kind in KINDS:
            if not close(mine[kind], right[kind]):
                shown = units if len(units) <= 3 else _("{n} units such as {first}", n=len(units), first=units[0])
                raise Mistake(
                    _(
                        "units {shown}, n={n} ranks: you say each rank sends {mine:,.0f} bytes of {kind} a step, "
                        "FSDP's formula {right:,.0f}.",
                        shown=shown,
                        n=n,
                        mine=mine[kind],
                        kind=kind,
                        right=right[kind],
                    )
                    + _bytes_hint(kind, mine[kind], units, n, right)
                )
    return _(
        "{n} models drawn at random, n up to {most}, padded shards", n=len(cases), most=max(n for _units, n in cases)
    )


def _check_real(fn) -> str:
    from ...engine.config import RunConfig
    from ...engine.diagnosis import WorkerError
    from ...frameworks.fsdp import fsdp_run
    from ...models.catalog import task_of

    config = RunConfig(p=1, dp=REAL_N, m=1, timeout=60.0, startup_timeout=120.0, **REAL_MODEL)
    units = [[tuple(q.shape) for q in layer.parameters()] for layer in task_of(config).layers()]
    mine = _fsdp(fn, units, REAL_N)
    try:
        measured = fsdp_run(config).collectives[-1]
    except (WorkerError, ValueError) as e:
        raise Mistake(_("the real FSDP run failed: {error}", error=e)) from None
    for kind in KINDS:
        if not close(mine[kind], measured[kind]):
            raise Mistake(
                _(
                    "torch's fully_shard on {n} processes, the MLP of width 33 (every layer a unit): each "
                    "rank sent {measured:,.0f} bytes of {kind} in the step, you say {mine:,.0f}",
                    n=REAL_N,
                    measured=measured[kind],
                    kind=kind,
                    mine=mine[kind],
                )
            )
    return _(
        "torch's fully_shard on {n} processes sent {gathered:,.0f} bytes gathered and {scattered:,.0f} "
        "reduce-scattered a rank, as you say ({gathers} all-gathers, {scatters} reduce-scatters)",
        n=REAL_N,
        gathered=measured["all-gather"],
        scattered=measured["reduce-scatter"],
        gathers=measured["count"]["all-gather"],
        scatters=measured["count"]["reduce-scatter"],
    )


# -- memory under ZeRO 0-3 -------------------------------------------------------------------------
def memory_cases(rng: random.Random) -> list[tuple[ModelShape, int, int]]:
    """(model, n, zero): every stage of two catalogue models first, then drawn shapes and sizes."""
    fixed = [(presets.model("llama2-7b"), 8, z) for z in range(4)] + [(presets.model("gpt3-175b"), 64, 3)]
    drawn = []
    for i in range(12):
        heads = rng.choice([8, 16, 32])
        shape = ModelShape(
            f"drawn-{i}",
            layers=rng.randint(2, 96),
            hidden=heads * rng.choice([64, 128]),
            heads=heads,
            vocab=rng.randint(1000, 130000),
            seq=rng.choice([1024, 2048, 4096]),
            gated=rng.random() < 0.5,
            bias=rng.random() < 0.5,
        )
        drawn.append((shape, rng.choice([2, 3, 4, 8, 16, 64, 256, 1024]), rng.randint(0, 3)))
    return fixed + drawn


def _counts(model: ModelShape) -> tuple[int, int, int]:
    """(parameter elements, parameter tensors, one block's elements) of the whole model on one rank."""
    fp = Footprint(model)
    (block, block_t), (emb, emb_t), (head, head_t) = fp.parameters(1, 1)
    return fp.elements("1f1b", 1, 1, 1, 0), model.layers * block_t + emb_t + head_t, block


def _planned(model: ModelShape, n: int, zero: int) -> dict[str, float]:
    state = Footprint(model).state("1f1b", 1, 1, 1, n if zero else 1, zero, 0)
    return dict(zip(MEMORY_KINDS, state))


def to_the_byte(mine: float, right: float) -> bool:
    """Memory is judged to the byte: a rule that is right for the large counts but drops a small
    term (Adam's 4-byte step count per tensor: 1,164 bytes of Llama 2 7B's 80 GB) is still wrong.
    Floating-point sums of these sizes err by far less than a byte, rounding a share by less."""
    return abs(mine - right) < 1.0


def _memory_hint(kind, mine, model, n, zero, counts) -> str:
    params, tensors, block = counts
    right = _planned(model, n, zero)[kind]
    for other in range(4):
        if other != zero and to_the_byte(mine, _planned(model, n, other)[kind]):
            return " " + _(
                "That is ZeRO-{other}'s {kind}. ZeRO-1 shards the optimizer state over the n ranks, ZeRO-2 the "
                "gradients too, ZeRO-3 (FSDP) the parameters too.",
                other=other,
                kind=kind,
            )
    if kind == "optimizer" and to_the_byte(mine, right - 4 * tensors):
        return " " + _(
            "Adam's step counts are missing: torch keeps one 4-byte count per parameter tensor, on every rank, "
            "unsharded: {counts:,} bytes here.",
            counts=4 * tensors,
        )
    if kind == "optimizer" and zero and to_the_byte(mine, right - 4 * tensors + 4 * tensors / n):
        return " " + _(
            "That shards Adam's step counts too; ZeRO shards the moments and the master weights, but every rank "
            "keeps every tensor's 4-byte step count."
        )
    if kind == "optimizer" and to_the_byte(mine, right - 4 * params / (n if zero else 1)):
        return " " + _(
            "Mixed precision keeps an fp32 master copy of the weights for the optimizer to update, beside Adam's "
            "two fp32 moments: 12 bytes a parameter."
        )
    if kind == "gradients" and to_the_byte(mine, right - 2 * block):
        return " " + _(
            "The rank also holds one block's whole gradients for a moment: a block's gradients are complete "
            "only at the end of its backward, and are reduce-scattered then."
        )
    if kind == "parameters" and (to_the_byte(mine, right - 4 * block) or to_the_byte(mine, right - 2 * block)):
        return " " + _(
            "To run a block FSDP gathers its parameters whole (bf16, 2 bytes each), and it prefetches the next "
            "one meanwhile: two blocks' worth on top of the shard."
        )
    if to_the_byte(mine, right * 2) or to_the_byte(mine, right / 2):
        return " " + _("Count bf16's 2 bytes for the parameters and the gradients, fp32's 4 for the optimizer's.")
    return ""


def _check_memory(fn, cases) -> str:
    for model, n, zero in cases:
        counts = _counts(model)
        name = f"{getattr(fn, '__name__', 'zero_memory')}({', '.join(map(str, counts))}, n={n}, zero={zero})"
        mine = ask(
            fn,
            *counts,
            n,
            zero,
            name=name,
            advice=_("work the bytes out from the counts yourself — the planner will check them"),
            take=lambda v: _by_kind(v, name, MEMORY_KINDS),
        )
        right = _planned(model, n, zero)
        for kind in MEMORY_KINDS:
            if not to_the_byte(mine[kind], right[kind]):
                raise Mistake(
                    _(
                        "{model}: {params:,} parameters in {tensors} tensors, a block of {block:,}, n={n} ranks, "
                        "ZeRO-{zero}: you say a rank holds {mine:,.0f} bytes of {kind}, the planner {right:,.0f}.",
                        model=model.name,
                        params=counts[0],
                        tensors=counts[1],
                        block=counts[2],
                        n=n,
                        zero=zero,
                        mine=mine[kind],
                        kind=kind,
                        right=right[kind],
                    )
                    + _memory_hint(kind, mine[kind], model, n, zero, counts)
                )
    return _(
        "{n} cases, every ZeRO stage, the catalogue's models and shapes drawn at random, to the byte", n=len(cases)
    )


def check_sharded(fsdp_bytes, zero_memory) -> None:
    """Check the learner's fsdp_bytes(units, n) and zero_memory(parameters, tensors, block, n, zero)."""
    rng = random.Random()
    units, memory = unit_cases(rng), memory_cases(rng)
    verdict(
        [
            (_("FSDP's bytes per step, from the shapes"), lambda: _check_formula(fsdp_bytes, units)),
            (_("memory per rank under ZeRO 0 to 3"), lambda: _check_memory(zero_memory, memory)),
            (_("a real FSDP run on {n} processes", n=REAL_N), lambda: _check_real(fsdp_bytes)),
        ]
    )
