"""Exercise 09: choose a layout. Given a model and a cluster, the learner picks tensor-, pipeline-
and data-parallel degrees, the micro-batch, m, the schedule and recomputation; the planner
(minipipe/planner/) checks that it fits in a GPU's memory and is within 10 % of the best step time
it predicts. The planner's own search is out of reach while the learner's code runs; its cost
model, `evaluate`, is the learner's tool."""
from __future__ import annotations

from ...planner import Layout, evaluate, make_setup, plan
from ...planner.search import out_of_reach
from .verdict import Mistake, call, verdict

SCENARIOS = (("llama2-7b", 64, "a100-80gb"), ("gpt3-175b", 1024, "a100-80gb"), ("llama2-70b", 256, "h100-sxm"))
WITHIN = 0.10
GiB = 2 ** 30


def _describe(row) -> str:
    lay = row.layout
    sched = lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")
    return (f"{lay.label()}, micro-batch {lay.micro_batch}, m={lay.m}, {sched}, recompute {lay.recompute}: "
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
    return f"{len(SCENARIOS)} clusters, every GPU used, the batch split evenly"


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
        best = plan(model, gpus, gpu).rows[0]
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
            raise Mistake(f"{model} on {gpus} × {gpu}: yours, {_describe(row)}; the planner's best, "
                          f"{_describe(best)}: yours takes {row.step / best.step - 1:.0%} longer (at most "
                          f"{WITHIN:.0%})." + ("".join(f"\n  - {h}" for h in hints)))
        shown.append(f"{model} {row.step / best.step - 1:+.1%}")
    return "step time against the best predicted: " + ", ".join(shown)


def check_layout(choose) -> None:
    """Check the learner's choose(model, gpus, gpu) -> plan.Layout on three clusters."""
    verdict([
        ("a layout of the whole cluster", lambda: _valid(choose)),
        ("it fits in memory", lambda: _fits(choose)),
        (f"within {WITHIN:.0%} of the best predicted step time", lambda: _fast(choose)),
    ])
