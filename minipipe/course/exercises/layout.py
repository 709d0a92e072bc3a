"""Exercise 09: choose a layout. Given a model and a cluster, the learner picks tensor-, pipeline-
and data-parallel degrees, the micro-batch, m, the schedule, recomputation and whether to shard the
optimizer state (ZeRO 1); the planner (minipipe/planner/) checks that it fits in a GPU's memory and
is within 10 % of the best step time it predicts among those same choices (CHOICES). The planner's
own search is out of reach while the learner's code runs (search.out_of_reach: a guard inside the
search, whatever path the learner reaches it by, noticed even when the learner's code swallows the
error); its cost model, `evaluate`, is the learner's tool. Besides the three clusters the exercise
names, the checker asks for two it does not (HIDDEN): an answer looked up rather than chosen fails
there."""
from __future__ import annotations

from ...planner import Layout, evaluate, make_setup, plan
from ...planner.search import out_of_reach
from .verdict import Mistake, call, verdict

NAMED = (("llama2-7b", 64, "a100-80gb"), ("gpt3-175b", 1024, "a100-80gb"), ("llama2-70b", 256, "h100-sxm"))
HIDDEN = (("llama2-7b", 128, "h100-sxm"), ("gpt3-175b", 512, "a100-80gb"))
SCENARIOS = NAMED + HIDDEN
# what the exercise offers: the schedules lessons 04-05 teach, ZeRO 0 or 1, no context parallelism
CHOICES = dict(schedules=("1f1b", "interleaved"), zero=(0, 1), cp=(1,), refine=0)
WITHIN = 0.10
GiB = 2 ** 30


def _describe(row) -> str:
    lay = row.layout
    sched = lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")
    return (f"{lay.label()}, micro-batch {lay.micro_batch}, m={lay.m}, {sched}, recompute {lay.recompute}, "
            f"zero {lay.zero}: "
            f"{row.step:.2f} s per step, bubble {row.bubble:.1%}, {row.total_memory / GiB:.1f} GiB")


def _chosen(choose, model, gpus, gpu):
    name = f"choose({model!r}, {gpus}, {gpu!r})"
    refusal = None
    try:
        with out_of_reach("the exercise's checker is running your choose()") as refusal:
            layout = call(choose, model, gpus, gpu, name=name)
    except Mistake:
        if not refusal.asked:
            raise
    if refusal.asked:
        raise Mistake(f"{name} asks the planner's search (plan or layouts) for the answer; choose yourself, and "
                      f"use evaluate(setup, layout) to see what a layout costs")
    if isinstance(layout, Layout) and (layout.schedule not in CHOICES["schedules"] or layout.zero not in CHOICES["zero"]
                                       or layout.cp != 1):
        raise Mistake(f"{name} returned {layout.describe()}; the exercise's choices are the schedules "
                      f"{' and '.join(CHOICES['schedules'])}, zero 0 or 1, and no context parallelism (cp=1)")
    if not isinstance(layout, Layout):
        raise Mistake(f"{name} returned {type(layout).__name__} {layout!r:.60}; return a minipipe.planner.Layout(tp=..., "
                      f"pp=..., dp=..., micro_batch=..., m=..., schedule=..., v=..., recompute=...)")
    setup = make_setup(model, gpus, gpu)
    try:
        return setup, evaluate(setup, layout)
    except ValueError as e:
        raise Mistake(f"{name}: {e}") from None


def _valid(choose) -> str:
    for scenario in SCENARIOS:
        _chosen(choose, *scenario)
    return (f"{len(SCENARIOS)} clusters ({len(NAMED)} named, {len(HIDDEN)} more the exercise did not name), every "
            f"GPU used, the batch split evenly")


def _fits(choose) -> str:
    for model, gpus, gpu in SCENARIOS:
        setup, row = _chosen(choose, model, gpus, gpu)
        if not row.fits:
            lay = row.layout
            hint = (f" Model state (parameters, gradients, Adam's state: 16 bytes a parameter) is split over tp·pp = "
                    f"{lay.tp * lay.pp} GPUs here; activations grow with the micro-batch and the micro-batches in "
                    f"flight, and shrink with recomputation.")
            raise Mistake(f"{model} on {gpus} × {gpu}: {_describe(row)} — it does not fit: {row.why()}.{hint}")
    return "every layout fits in a GPU's memory"


def _fast(choose) -> str:
    shown = []
    for model, gpus, gpu in SCENARIOS:
        setup, row = _chosen(choose, model, gpus, gpu)
        best = plan(model, gpus, gpu, **CHOICES).rows[0]
        if row.step > (1 + WITHIN) * best.step:
            lay, hints = row.layout, []
            if lay.tp > setup.node:
                hints.append(f"tp={lay.tp} spans nodes of {setup.node} GPUs: every layer's all-reduces then cross the "
                             f"slow network")
            if row.bubble > best.bubble + 0.03:
                hints.append(f"your pipeline idles {row.bubble:.0%} of the step: more micro-batches per step (a "
                             f"smaller micro-batch) or interleaving shrink the bubble")
            if row.comm["dp exposed"] > best.comm["dp exposed"] + 0.05 * best.step:
                hints.append("the gradient all-reduce adds to your step: more pipeline or tensor parallelism leaves "
                             "each GPU fewer gradients to all-reduce")
            if lay.recompute == "full" and best.layout.recompute != "full":
                hints.append("full recomputation repeats every forward; selective (or none) may fit already")
            if lay.zero == 0 and best.layout.zero == 1 and setup.gpus // (lay.tp * lay.pp) > 1:
                hints.append("zero=1 shards Adam's state over the data-parallel ranks: room for fewer pipeline "
                             "stages or larger micro-batches")
            raise Mistake(f"{model} on {gpus} × {gpu}: yours, {_describe(row)}; the planner's best, "
                          f"{_describe(best)}: yours takes {row.step / best.step - 1:.0%} longer (at most "
                          f"{WITHIN:.0%})." + ("".join(f"\n  - {h}" for h in hints)))
        shown.append(f"{model} {row.step / best.step - 1:+.1%}")
    return "step time against the best predicted: " + ", ".join(shown)


def check_layout(choose) -> None:
    """Check the learner's choose(model, gpus, gpu) -> planner.Layout on the named clusters and two more."""
    verdict([
        ("a layout of the whole cluster", lambda: _valid(choose)),
        ("it fits in memory", lambda: _fits(choose)),
        (f"within {WITHIN:.0%} of the best predicted step time", lambda: _fast(choose)),
    ])
