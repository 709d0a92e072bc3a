"""Exercise 13: choose a layout. Given a model and a cluster, the learner picks tensor-, pipeline-
and data-parallel degrees, the micro-batch, m, the schedule, recomputation and whether to shard the
optimizer state (ZeRO 1); the planner (minipipe/planner/) checks that it fits in a GPU's memory and
is within 10 % of the best step time it predicts among those same choices (CHOICES). The planner's
cost model, `evaluate`, is the learner's tool; its search is not (ALLOWED). Besides the three
clusters the exercise names, the checker asks for two it draws when it runs (`drawn`), from every
published model on clusters of 16 to 2048 GPUs: an answer looked up rather than chosen fails there.
"""

from __future__ import annotations

import random

from ...planner import Layout, evaluate, make_setup, plan, presets
from .guard import ask
from .verdict import Mistake, verdict

# what the learner's code may call (grading/watch.py): the planner's cost model for one layout and what it
# takes and gives, not its search
ALLOWED = (
    "minipipe.planner.evaluate.evaluate",
    "minipipe.planner.prediction.Row",
    "minipipe.planner.setup_and_layout.Layout",
    "minipipe.planner.setup_and_layout.Setup",
    "minipipe.planner.setup_and_layout.make_setup",
    "minipipe.planner.presets",
    "minipipe.planner.shapes.ModelShape",
)
NAMED = (("llama2-7b", 64, "a100-80gb"), ("gpt3-175b", 1024, "a100-80gb"), ("llama2-70b", 256, "h100-sxm"))
DRAWN = 2  # clusters drawn when the check runs, besides the named ones
# what the exercise offers: the schedules lessons 04-05 teach, ZeRO 0 or 1, no context parallelism
CHOICES = dict(schedules=("1f1b", "interleaved"), zero=(0, 1), cp=(1,), refine=0)
WITHIN = 0.10
GiB = 2**30


def _describe(row) -> str:
    lay = row.layout
    sched = lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")
    return (
        f"{lay.label()}, micro-batch {lay.micro_batch}, m={lay.m}, {sched}, recompute {lay.recompute}, "
        f"zero {lay.zero}: "
        f"{row.step:.2f} s per step, bubble {row.bubble:.1%}, {row.total_memory / GiB:.1f} GiB"
    )


def drawn(n: int = DRAWN, rng: random.Random | None = None) -> list[tuple[str, int, str]]:
    """n clusters the exercise does not name, drawn afresh: a published model (one with a global
    batch) on 8·k GPUs (k from 2 to 256) of one of the planner's GPUs, where some layout fits."""
    rng = rng or random.Random()
    models = [name for name, shape in presets.MODELS.items() if getattr(shape, "batch", None)]
    out: list[tuple[str, int, str]] = []
    while len(out) < n:
        scenario = (rng.choice(models), 8 * rng.randint(2, 256), rng.choice(sorted(presets.GPUS)))
        if scenario in NAMED or scenario in out:
            continue
        try:
            rows = plan(*scenario, **CHOICES).rows
        except ValueError:
            continue
        if rows and rows[0].fits:
            out.append(scenario)
    return out


def _layout(value, name: str):
    if isinstance(value, Layout) and (
        value.schedule not in CHOICES["schedules"] or value.zero not in CHOICES["zero"] or value.cp != 1
    ):
        raise Mistake(
            f"{name} returned {value.describe()}; the exercise's choices are the schedules "
            f"{' and '.join(CHOICES['schedules'])}, zero 0 or 1, and no context parallelism (cp=1)"
        )
    if not isinstance(value, Layout):
        raise Mistake(
            f"{name} returned {type(value).__name__} {value!r:.60}; return a minipipe.planner.Layout(tp=..., "
            f"pp=..., dp=..., micro_batch=..., m=..., schedule=..., v=..., recompute=...)"
        )
    return value


def _chosen(choose, model, gpus, gpu):
    name = f"choose({model!r}, {gpus}, {gpu!r})"
    layout = ask(
        choose,
        model,
        gpus,
        gpu,
        name=name,
        take=lambda value: _layout(value, name),
        advice="choose yourself, and use evaluate(setup, layout) to see what a layout costs",
    )
    setup = make_setup(model, gpus, gpu)
    try:
        return setup, evaluate(setup, layout)
    except ValueError as e:
        raise Mistake(f"{name}: {e}") from None


def _valid(choose, scenarios) -> str:
    for scenario in scenarios:
        _chosen(choose, *scenario)
    return (
        f"{len(scenarios)} clusters ({len(NAMED)} named, {len(scenarios) - len(NAMED)} more drawn now that the "
        f"exercise did not name), every GPU used, the batch split evenly"
    )


def _fits(choose, scenarios) -> str:
    for model, gpus, gpu in scenarios:
        setup, row = _chosen(choose, model, gpus, gpu)
        if not row.fits:
            lay = row.layout
            hint = (
                f" Model state (parameters, gradients, Adam's state: 16 bytes a parameter) is split over tp·pp = "
                f"{lay.tp * lay.pp} GPUs here; activations grow with the micro-batch and the micro-batches in "
                f"flight, and shrink with recomputation."
            )
            raise Mistake(f"{model} on {gpus} × {gpu}: {_describe(row)} — it does not fit: {row.why()}.{hint}")
    return "every layout fits in a GPU's memory"


def _fast(choose, scenarios) -> str:
    shown = []
    for model, gpus, gpu in scenarios:
        setup, row = _chosen(choose, model, gpus, gpu)
        best = plan(model, gpus, gpu, **CHOICES).rows[0]
        if row.step > (1 + WITHIN) * best.step:
            lay, hints = row.layout, []
            if lay.tp > setup.node:
                hints.append(
                    f"tp={lay.tp} spans nodes of {setup.node} GPUs: every layer's all-reduces then cross the "
                    f"slow network"
                )
            if row.bubble > best.bubble + 0.03:
                hints.append(
                    f"your pipeline idles {row.bubble:.0%} of the step: more micro-batches per step (a "
                    f"smaller micro-batch) or interleaving shrink the bubble"
                )
            if row.comm["dp exposed"] > best.comm["dp exposed"] + 0.05 * best.step:
                hints.append(
                    "the gradient all-reduce adds to your step: more pipeline or tensor parallelism leaves "
                    "each GPU fewer gradients to all-reduce"
                )
            if lay.recompute == "full" and best.layout.recompute != "full":
                hints.append("full recomputation repeats every forward; selective (or none) may fit already")
            if lay.zero == 0 and best.layout.zero == 1 and setup.gpus // (lay.tp * lay.pp) > 1:
                hints.append(
                    "zero=1 shards Adam's state over the data-parallel ranks: room for fewer pipeline "
                    "stages or larger micro-batches"
                )
            raise Mistake(
                f"{model} on {gpus} × {gpu}: yours, {_describe(row)}; the planner's best, "
                f"{_describe(best)}: yours takes {row.step / best.step - 1:.0%} longer (at most "
                f"{WITHIN:.0%})." + ("".join(f"\n  - {h}" for h in hints))
            )
        shown.append(f"{model} {row.step / best.step - 1:+.1%}")
    return "step time against the best predicted: " + ", ".join(shown)


def check_layout(choose) -> None:
    """Check the learner's choose(model, gpus, gpu) -> planner.Layout on the named clusters and two drawn."""
    scenarios = list(NAMED) + drawn()
    verdict(
        [
            ("a layout of the whole cluster", lambda: _valid(choose, scenarios)),
            ("it fits in memory", lambda: _fits(choose, scenarios)),
            (f"within {WITHIN:.0%} of the best predicted step time", lambda: _fast(choose, scenarios)),
        ]
    )
