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
from ..i18n.messages import say as _
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
    return _(
        "{label}, micro-batch {mb}, m={m}, {sched}, recompute {recompute}, zero {zero}: "
        "{step:.2f} s per step, bubble {bubble:.1%}, {memory:.1f} GiB",
        label=lay.label(),
        mb=lay.micro_batch,
        m=lay.m,
        sched=sched,
        recompute=lay.recompute,
        zero=lay.zero,
        step=row.step,
        bubble=row.bubble,
        memory=row.total_memory / GiB,
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
            _(
                "{name} returned {layout}; the exercise's choices are the schedules {first} and {second}, zero 0 "
                "or 1, and no context parallelism (cp=1)",
                name=name,
                layout=value.describe(),
                first=CHOICES["schedules"][0],
                second=CHOICES["schedules"][1],
            )
        )
    if not isinstance(value, Layout):
        raise Mistake(
            _(
                "{name} returned {kind} {value!r:.60}; return a minipipe.planner.Layout(tp=..., "
                "pp=..., dp=..., micro_batch=..., m=..., schedule=..., v=..., recompute=...)",
                name=name,
                kind=type(value).__name__,
                value=value,
            )
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
        advice=_("choose yourself, and use evaluate(setup, layout) to see what a layout costs"),
    )
    setup = make_setup(model, gpus, gpu)
    try:
        return setup, evaluate(setup, layout)
    except ValueError as e:
        raise Mistake(f"{name}: {e}") from None


def _valid(choose, scenarios) -> str:
    for scenario in scenarios:
        _chosen(choose, *scenario)
    return _(
        "{n} clusters ({named} named, {more} more drawn now that the exercise did not name), every GPU used, the "
        "batch split evenly",
        n=len(scenarios),
        named=len(NAMED),
        more=len(scenarios) - len(NAMED),
    )


def _fits(choose, scenarios) -> str:
    for model, gpus, gpu in scenarios:
        setup, row = _chosen(choose, model, gpus, gpu)
        if not row.fits:
            lay = row.layout
            hint = " " + _(
                "Model state (parameters, gradients, Adam's state: 16 bytes a parameter) is split over tp·pp = "
                "{gpus} GPUs here; activations grow with the micro-batch and the micro-batches in "
                "flight, and shrink with recomputation.",
                gpus=lay.tp * lay.pp,
            )
            raise Mistake(
                _(
                    "{model} on {gpus} × {gpu}: {described} — it does not fit: {why}.",
                    model=model,
                    gpus=gpus,
                    gpu=gpu,
                    described=_describe(row),
                    why=row.why(),
                )
                + hint
            )
    return _("every layout fits in a GPU's memory")


def _fast(choose, scenarios) -> str:
    shown = []
    for model, gpus, gpu in scenarios:
        setup, row = _chosen(choose, model, gpus, gpu)
        best = plan(model, gpus, gpu, **CHOICES).rows[0]
        if row.step > (1 + WITHIN) * best.step:
            lay, hints = row.layout, []
            if lay.tp > setup.node:
                hints.append(
                    _(
                        "tp={tp} spans nodes of {node} GPUs: every layer's all-reduces then cross the slow network",
                        tp=lay.tp,
                        node=setup.node,
                    )
                )
            if row.bubble > best.bubble + 0.03:
                hints.append(
                    _(
                        "your pipeline idles {bubble:.0%} of the step: more micro-batches per step (a "
                        "smaller micro-batch) or interleaving shrink the bubble",
                        bubble=row.bubble,
                    )
                )
            if row.comm["dp exposed"] > best.comm["dp exposed"] + 0.05 * best.step:
                hints.append(
                    _(
                        "the gradient all-reduce adds to your step: more pipeline or tensor parallelism leaves "
                        "each GPU fewer gradients to all-reduce"
                    )
                )
            if lay.recompute == "full" and best.layout.recompute != "full":
                hints.append(_("full recomputation repeats every forward; selective (or none) may fit already"))
            if lay.zero == 0 and best.layout.zero == 1 and setup.gpus // (lay.tp * lay.pp) > 1:
                hints.append(
                    _(
                        "zero=1 shards Adam's state over the data-parallel ranks: room for fewer pipeline "
                        "stages or larger micro-batches"
                    )
                )
            raise Mistake(
                _(
                    "{model} on {gpus} × {gpu}: yours, {yours}; the planner's best, {best}: yours takes "
                    "{longer:.0%} longer (at most {within:.0%}).",
                    model=model,
                    gpus=gpus,
                    gpu=gpu,
                    yours=_describe(row),
                    best=_describe(best),
                    longer=row.step / best.step - 1,
                    within=WITHIN,
                )
                + ("".join(f"\n  - {h}" for h in hints))
            )
        shown.append(f"{model} {row.step / best.step - 1:+.1%}")
    return _("step time against the best predicted: {shown}", shown=", ".join(shown))


def check_layout(choose) -> None:
    """Check the learner's choose(model, gpus, gpu) -> planner.Layout on the named clusters and two drawn."""
    scenarios = list(NAMED) + drawn()
    verdict(
        [
            (_("a layout of the whole cluster"), lambda: _valid(choose, scenarios)),
            (_("it fits in memory"), lambda: _fits(choose, scenarios)),
            (_("within {within:.0%} of the best predicted step time", within=WITHIN), lambda: _fast(choose, scenarios)),
        ]
    )
