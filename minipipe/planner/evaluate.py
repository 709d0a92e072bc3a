"""One layout predicted: its memory by kind, its step time by part, its throughput (a Row).

    memory      footprint.py: model state by ZeRO stage, activations by schedule and recomputation
    compute     compute.py: each block's matmuls, attention and element-wise work from their
                shapes, at the fractions of the GPU's peak and memory bandwidth fitted on
                published runs (efficiency.py); recomputation repeats what sim/recompute_costs.py says
    tp          a ring all-reduce of a micro-batch's activation (an all-gather and a reduce-scatter
                with sequence parallelism, the same bytes) on the tp group's link: two per block
                forward, two backward, two more with full recomputation; inside the action, or
                hidden behind its matmuls with tp_overlap. Tensor parallelism across nodes is
                allowed: its ring then runs at the network's pace
    cp          ring attention: each block's forward passes K and V chunks around the cp ranks
                (cp − 1 steps), the backward K, V and their gradients; hidden behind the
                attention's own compute where it is longer
    zero        ZeRO 2: each micro-batch's gradients reduce-scattered during its backward; ZeRO 3
                (FSDP): each block's parameters all-gathered before its forward and again before
                its backward, its gradients reduce-scattered after; what the compute does not
                hide adds to the action
    pp          a message per micro-batch and stage boundary (the activation split over tp, as
                Megatron sends it); timing.py says what it adds to the step
    pipeline    timing.py's closed form for the schedule kind (simulated where it is only close:
                search.plan(refine=...))
    dp          the gradient reduction over the dp·cp ranks holding the same parameters: ZeRO 0 an
                all-reduce, 1 a reduce-scatter and an all-gather of the parameters, 2 the
                all-gather (the reduce-scatters ran per micro-batch), 3 none at the step's end;
                overlapped bucket by bucket with each rank's last backward (dp_overlap; the last
                bucket always shows), the parameters' all-gather with the first forwards; a tied
                head's gradient summed between the first and the last pipeline rank
    optimizer   compute.optimizer_time over the parameters this GPU updates
    MFU         model FLOPs (shapes.model_flops, no recomputation) / (GPUs × peak × step)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ..schedule import kinds
from ..sim import recompute_costs as recomputation
from ..sim.network import ring
from .compute import block_costs, head_costs, optimizer_time
from .setup_and_layout import GiB, Layout, Setup, links
from .footprint import Footprint
from .shapes import VALUE_BYTES, count, model_flops, recompute_flops
from .timing import EXACT, pipeline_time, simulated

BUCKET_BYTES = 25 * 2 ** 20        # torch DDP's default bucket (bucket_cap_mb=25): the last one never overlaps


@dataclass
class Row:
    """One layout's prediction. Times in seconds per step; memory in bytes on the GPU that needs
    most (pipeline rank `memory_rank`); comm: seconds per step by kind on the busiest rank (tp,
    cp and zero inside its actions, pp on the pipeline's critical path, dp its step-end
    reduction; "dp exposed" the part that adds to the step)."""

    layout: Layout
    step: float
    pipeline: float
    compute: float
    bubble: float
    comm: dict
    memory: dict
    memory_rank: int
    tflops: float          # model TFLOP/s per GPU
    mfu: float
    hfu: float             # with recomputation's FLOPs
    capacity: float        # the GPU's memory, bytes
    usable: float = 0.0    # what a layout may fill: capacity less the reserve
    optimizer: float = 0.0
    timed: str = "closed form"     # how the pipeline was timed: "closed form" (exact), "closed form (close)", "simulated"
    note: str = ""                 # what was changed to predict it (a near miss)

    @property
    def fits(self) -> bool:
        return self.total_memory <= self.usable

    @property
    def tight(self) -> bool:
        """Fits in the GPU, but not with the memory reserve left free."""
        return self.usable < self.total_memory <= self.capacity

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    def why(self) -> str:
        """Why it does not fit, for people."""
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in sorted(self.memory.items(), key=lambda kv: -kv[1]))
        reserve = (f" usable (the GPU's {self.capacity / GiB:.1f} less its reserve)"
                   if self.usable < self.capacity else "")
        return (f"needs {self.total_memory / GiB:.1f} GiB of {self.usable / GiB:.1f} GiB{reserve} on pipeline rank "
                f"{self.memory_rank} ({parts} GiB)")

    def as_dict(self) -> dict:
        lay = self.layout
        return {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp, "micro_batch": lay.micro_batch, "m": lay.m,
                "schedule": lay.schedule, "v": lay.v, "recompute": lay.recompute, "zero": lay.zero,
                "step_s": self.step, "pipeline_s": self.pipeline, "compute_s": self.compute, "bubble": self.bubble,
                **{f"{k.replace(' ', '_')}_s": v for k, v in self.comm.items()}, "optimizer_s": self.optimizer,
                **{f"{k}_bytes": v for k, v in self.memory.items()}, "memory_bytes": self.total_memory,
                "usable_bytes": self.usable, "memory_rank": self.memory_rank, "fits": self.fits, "tight": self.tight,
                "tflops_per_gpu": self.tflops, "mfu": self.mfu, "hfu": self.hfu, "timed": self.timed}


def check_layout(setup: Setup, layout: Layout) -> None:
    """A ValueError saying what to change when `layout` cannot run `setup`."""
    model, lay = setup.model, layout
    problems = []
    if lay.gpus != setup.gpus:
        problems.append(f"tp·cp·pp·dp = {lay.gpus}, not the {setup.gpus} GPUs")
    if lay.pp * lay.v > model.layers:
        problems.append(f"pp·v = {lay.pp * lay.v} stages for {model.layers} layers (at most one stage a layer)")
    if lay.dp * lay.micro_batch * lay.m != setup.batch:
        problems.append(f"dp·micro_batch·m = {lay.dp * lay.micro_batch * lay.m}, not the batch of {setup.batch} sequences")
    if model.heads % lay.tp or model.kv % lay.tp or model.inner % lay.tp:
        problems.append(f"tp={lay.tp} must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP "
                        f"width ({model.inner})")
    if model.seq % (2 * lay.cp) and lay.cp > 1:
        problems.append(f"cp={lay.cp} must divide the sequence ({model.seq}) into 2·cp equal chunks")
    if problems:
        raise ValueError(f"{lay.describe()} does not fit the setup: " + "; ".join(problems))


class NoFormula(ValueError):
    """The schedule kind's closed form does not hold for this layout (it would have to be replayed)."""


@dataclass(frozen=True)
class Pipeline:
    """What the layouts of one schedule, tp, cp, pp, dp, v and ZeRO stage share (Predictor.pipeline):
    the ranks holding the embedding and the head, the ranks that tell the pace and the memory
    (footprint.Footprint.structure) with their blocks, the blocks per stage, the kind's peak_inflight,
    whether its closed form is exact, the model state and deepest stage of the ranks that hold
    most, and the step-end reductions and optimizer step per rank (Predictor.reductions) and at most."""

    first: int
    last: int
    ranks: tuple
    blocks: dict
    counts: list
    peak: Callable
    exact: bool
    state: dict             # rank -> (parameters, gradients, optimizer) bytes
    deepest: dict           # rank -> blocks of its largest stage
    reductions: dict
    tied: float
    reduction: float        # the step-end gradient reduction, all of it, on the rank that takes longest
    optimizer: float        # the optimizer step, on the rank that takes longest


class Predictor:
    """evaluate() for one setup, with what many layouts share worked out once: block costs by
    (tp, cp, dp, micro-batch, recomputation, ZeRO stage), links by cut, the pipeline's shape and
    state by (schedule, tp, cp, pp, dp, v, ZeRO stage)."""

    def __init__(self, setup: Setup):
        self.setup = setup
        s = setup
        self.footprint = Footprint(s.model, s.precision, s.optimizer, sequence_parallel=s.sequence_parallel,
                                   vocab_parallel=s.vocab_parallel, fp32_gradients=s.fp32_gradients)
        self._costs, self._links, self._heads, self._pipelines, self._redo, self._messages = {}, {}, {}, {}, {}, {}
        self._compute = {}
        self.useful = model_flops(s.model, s.batch)

    def links(self, tp: int, cp: int, dp: int) -> dict:
        key = (tp, cp, dp)
        if key not in self._links:
            self._links[key] = links(self.setup, Layout(tp, 1, dp, 1, 1, cp=cp))
        return self._links[key]

    def block(self, layout: Layout) -> tuple:
        """Per block and micro-batch on one GPU, in seconds: (forward, backward, its weight-gradient
        part, pure compute of both, tp, cp and ZeRO collectives exposed in both), and the tp
        collective of one activation."""
        tp, cp, dp, b, rc, z = layout.tp, layout.cp, layout.dp, layout.micro_batch, layout.recompute, layout.zero
        key = (tp, cp, dp, b, rc, z)
        if key in self._costs:
            return self._costs[key]
        s, model = self.setup, self.setup.model
        e, g = VALUE_BYTES[s.precision], s.grad_bytes
        net = self.links(tp, cp, dp)
        bc = self._compute.get((tp, cp, b))
        if bc is None:                    # the compute alone: the same for every dp, recomputation and ZeRO stage
            bc = self._compute[(tp, cp, b)] = block_costs(model, s.precision, s.gpu.peak, s.achieved, tp, cp, b,
                                                          sequence_parallel=s.sequence_parallel)
        option = recomputation.block_option(rc)
        redo = 0.0 if (model.attention == "fused" and option.name == "selective") else \
            option.redone({"attention core": bc.core, "other": bc.forward - bc.core})
        activation = e * b * model.seq / cp * model.hidden                   # one micro-batch's, whole
        # tensor parallelism: one collective of the activation; 2 per block forward, 2 (4) backward
        t1 = ring("all-reduce", activation, tp, net["tp"]) if tp > 1 else 0.0
        full = rc == "full"
        tp_f, tp_b = 2 * t1, (4 if full else 2) * t1
        if s.tp_overlap:
            tp_f = max(0.0, tp_f - bc.matmuls)
            tp_b = max(0.0, tp_b - (3 if full else 2) * bc.matmuls)
        # context parallelism: K and V chunks around the ring, hidden behind attention where it is longer
        cp_f = cp_b = 0.0
        if cp > 1:
            chunk = 2 * e * b * model.seq / cp * model.kv_width / tp
            t_ring = (cp - 1) * (net["cp"].latency + chunk / net["cp"].bandwidth)
            cp_f = max(0.0, t_ring - bc.core)
            cp_b = max(0.0, 2 * t_ring - bc.core_backward) + (cp_f if full else 0.0)
        # ZeRO 2 / 3: per micro-batch and block collectives over the dp·cp ranks holding the same parameters
        n = dp * cp
        zero_f = zero_b = 0.0
        if n > 1 and z >= 2:
            block_elems = self.footprint.parameters(tp, 1)[0][0]
            rs = ring("reduce-scatter", block_elems * g, n, net["dp"])
            ag = ring("all-gather", block_elems * e, n, net["dp"]) if z == 3 else 0.0
            zero_f = max(0.0, ag - (bc.forward + tp_f + cp_f))
            zero_b = max(0.0, ag + rs - (bc.backward_input + bc.backward_weight + redo + tp_b + cp_b))
        pure = bc.forward + bc.backward_input + bc.backward_weight + redo
        out = (bc.forward + tp_f + cp_f + zero_f, bc.backward_input + bc.backward_weight + redo + tp_b + cp_b + zero_b,
               bc.backward_weight, pure, tp_f + tp_b, cp_f + cp_b, zero_f + zero_b, t1)
        self._costs[key] = out
        return out

    def message(self, tp: int, cp: int, dp: int, b: int) -> float:
        """One activation (its 1/tp slice, as Megatron sends it) between pipeline neighbours."""
        key = (tp, cp, dp, b)
        if key not in self._messages:
            s = self.setup
            self._messages[key] = self.links(tp, cp, dp)["pp"].send(
                s.value_bytes * b * s.model.seq / cp * s.model.hidden / tp)
        return self._messages[key]

    def head(self, tp: int, cp: int, b: int) -> tuple:
        key = (tp, cp, b)
        if key not in self._heads:
            s = self.setup
            self._heads[key] = head_costs(s.model, s.precision, s.gpu.peak, s.achieved,
                                          tp if s.vocab_parallel else 1, cp, b)
        return self._heads[key]

    def pipeline(self, layout: Layout) -> "Pipeline":
        """What every layout with this schedule, tp, cp, pp, dp, v and ZeRO stage shares, whatever
        its micro-batch and recomputation (worked out once: the search asks for it thousands of times)."""
        key = (layout.schedule, layout.tp, layout.cp, layout.pp, layout.dp, layout.v, layout.zero)
        shared = self._pipelines.get(key)
        if shared is None:
            fp, (kind, tp, p, v, z) = self.footprint, (layout.schedule, layout.tp, layout.pp, layout.v, layout.zero)
            first, last, ranks, blocks = fp.structure(kind, p, v)
            shards = layout.dp * layout.cp if z else 1
            held = (first, last) if first != last else (first,)
            k = kinds.get(kind)
            per, tied = self.reductions(layout, ranks)
            shared = self._pipelines[key] = Pipeline(
                first, last, ranks, blocks, fp.counts(p, v), k.peak_inflight, k.name in EXACT or p == 1,
                {r: fp.state(kind, tp, p, v, shards, z, r) for r in held},
                {r: max(fp.stages_of(kind, p, v, r)) for r in held}, per, tied,
                max(0.0, *(reduce + gather for reduce, gather, _, _ in per.values())) + tied,
                max(0.0, *(opt for *_, opt in per.values())))
        return shared

    def memory(self, layout: Layout) -> tuple[int, dict]:
        """(the pipeline rank that needs most, its bytes by kind): the first rank holds the most
        micro-batches and the embedding, the last the head (footprint.Footprint)."""
        fp, pipeline = self.footprint, self.pipeline(layout)
        p, m, v = layout.pp, layout.m, layout.v
        acts = fp.activations(layout.tp, layout.cp, layout.micro_batch, layout.recompute)
        fullest, mem, largest = 0, None, -1.0
        for r, (params, grads, state) in pipeline.state.items():
            act = fp.held(acts, pipeline.peak(p, m, v, r), v, pipeline.deepest[r], r == pipeline.first,
                          r == pipeline.last)
            total = params + grads + state + act
            if total > largest:
                fullest, largest = r, total
                mem = {"parameters": params, "gradients": grads, "optimizer": state, "activations": act}
        return fullest, mem

    def predict(self, layout: Layout, *, simulate: bool = False, fallback: bool = True,
                memory: tuple | None = None) -> Row:
        """The Row of a checked layout (evaluate checks it first); `memory`: what memory() said of
        it, when the caller asked first."""
        s, model = self.setup, self.setup.model
        tp, cp, p, dp, v, b, m = layout.tp, layout.cp, layout.pp, layout.dp, layout.v, layout.micro_batch, layout.m
        blk_f, blk_b, blk_w, pure, tp_x, cp_x, zero_x, t1 = self.block(layout)
        pipeline = self.pipeline(layout)
        head_f, head_b = self.head(tp, cp, b)
        emb_f = t1 if s.vocab_parallel else 0.0               # the vocab-parallel embedding's all-reduce
        first, last, blocks = pipeline.first, pipeline.last, pipeline.blocks
        fwd, bwd = {}, {}
        busiest, most = 0, -1.0
        for r in pipeline.ranks:
            f = blocks[r] * blk_f + (emb_f if r == first else 0.0) + (head_f if r == last else 0.0)
            g = blocks[r] * blk_b + (head_b if r == last else 0.0)
            fwd[r], bwd[r] = f, g
            if f + g > most:
                busiest, most = r, f + g
        mean = (model.layers * (blk_f + blk_b) + emb_f + head_f + head_b) / p
        message = self.message(tp, cp, dp, b) if p > 1 else 0.0
        args = (fwd[busiest], bwd[busiest], blocks[busiest] * blk_w, max(fwd.values()), max(bwd.values()))
        pipe = closed = None
        try:
            closed = pipeline_time(layout.schedule, p, m, v, most, mean, message, *args)
            pp_comm = closed - pipeline_time(layout.schedule, p, m, v, most, mean, 0.0, *args) if p > 1 else 0.0
        except ValueError as e:            # the kind's formula does not hold here: replay it, or say so
            if not fallback:
                raise NoFormula(str(e)) from None
            simulate = True
        pipe = closed
        if simulate:
            stages = stage_costs(pipeline.counts, blk_f, blk_b, blk_w, emb_f, head_f, head_b)
            pipe = simulated(layout.schedule, p, m, v, *stages, message)
            if closed is None:             # what the messages add: the replay's own difference
                pp_comm = pipe - simulated(layout.schedule, p, m, v, *stages, 0.0)
        fullest, mem = self.memory(layout) if memory is None else memory
        # the step's end: the gradient reduction over dp·cp, the optimizer step, a tied head's gradient sum
        exposed, dp_time, opt = self.step_end(layout, pipeline, fwd, bwd, message)
        step = pipe + exposed + opt
        redo_flops = self._redo.get(layout.recompute)
        if redo_flops is None:
            redo_flops = self._redo[layout.recompute] = \
                recompute_flops(model, s.batch * model.seq, layout.recompute) * model.layers
        whole = s.gpus * s.gpu.peak * step
        n_busy = blocks[busiest]
        comm = {"tp": m * (n_busy * tp_x + (emb_f if busiest == first else 0.0)), "cp": m * n_busy * cp_x,
                "zero": m * n_busy * zero_x, "pp": pp_comm, "dp": dp_time, "dp exposed": exposed}
        compute = m * (n_busy * pure + (head_f + head_b if busiest == last else 0.0))
        timed = "simulated" if simulate else "closed form" if pipeline.exact else "closed form (close)"
        return Row(layout, step, pipe, compute, 1 - m * most / pipe, comm, mem, fullest,
                   self.useful / s.gpus / step / 1e12, self.useful / whole, (self.useful + redo_flops) / whole,
                   s.gpu.memory, s.usable, opt, timed)

    def reductions(self, layout: Layout, ranks) -> tuple:
        """Per rank: (the step-end reduction, the parameters' all-gather, the last bucket, the
        optimizer step), seconds; and a tied head's gradient sum between the ends of the pipeline."""
        s, model, fp = self.setup, self.setup.model, self.footprint
        p, z, n = layout.pp, layout.zero, layout.dp * layout.cp
        e, g = VALUE_BYTES[s.precision], s.grad_bytes
        net = self.links(layout.tp, layout.cp, layout.dp)
        per = {}
        for r in ranks:
            elements = fp.elements(layout.schedule, layout.tp, p, layout.v, r)
            opt = optimizer_time(elements / (n if z else 1), s.precision, s.optimizer, g, s.achieved)
            grads, params = elements * g, elements * e
            if n == 1:
                reduce = gather = tail = 0.0
            elif z == 0:
                reduce, gather = ring("all-reduce", grads, n, net["dp"]), 0.0
                tail = ring("all-reduce", min(grads, BUCKET_BYTES), n, net["dp"])
            elif z == 1:
                reduce, gather = ring("reduce-scatter", grads, n, net["dp"]), ring("all-gather", params, n, net["dp"])
                tail = ring("reduce-scatter", min(grads, BUCKET_BYTES), n, net["dp"])
            else:                        # the reduce-scatters ran per micro-batch; stage 2 gathers the parameters
                reduce = tail = 0.0
                gather = ring("all-gather", params, n, net["dp"]) if z == 2 else 0.0
            per[r] = (reduce, gather, tail, opt)
        tied = 0.0
        if model.tied_head and p > 1:                 # the embedding's and the head's copies summed
            tied = ring("all-reduce", count([(model.vocab * model.hidden, s.vocab_parallel)], layout.tp)[0] * g, 2,
                        net["pp"])
        return per, tied

    def step_end(self, layout: Layout, pipeline: "Pipeline", fwd: dict, bwd: dict, message: float) -> tuple:
        """(exposed, total) time of the step-end gradient reduction, and the optimizer step."""
        per, tied = pipeline.reductions, pipeline.tied
        p, v, m = layout.pp, layout.v, layout.m
        overlap = self.setup.dp_overlap
        exposed = 0.0
        for r in pipeline.ranks:
            reduce, gather, tail, _ = per[r]
            if overlap:
                window = r * (bwd[r] / v + message) + bwd[r] / v        # the rank's cool-down and last backward
                shown = max(tail, reduce - window) + max(0.0, gather - min(m * v, p) * fwd[r] / v)
            else:
                shown = reduce + gather
            exposed = max(exposed, shown)
        return exposed + tied, pipeline.reduction, pipeline.optimizer


@lru_cache(maxsize=64)
def predictor(setup: Setup) -> Predictor:
    return Predictor(setup)


def evaluate(setup: Setup, layout: Layout, *, simulate: bool = False) -> Row:
    """Predict one layout (the module docstring says where each figure comes from); `simulate`:
    time the pipeline by replaying it (timing.simulated) instead of its closed form."""
    check_layout(setup, layout)
    return predictor(setup).predict(layout, simulate=simulate)


def exact(layout: Layout) -> bool:
    """Whether the pipeline's closed form is the simulator's for this layout (timing.EXACT)."""
    return layout.pp == 1 or kinds.get(layout.schedule).name in EXACT


def stage_costs(counts: list[int], forward: float, backward: float, weight: float, embedding: float, head_f: float,
                head_b: float) -> tuple[list, list, list]:
    """Per-stage forward, backward and weight-gradient times: `counts` blocks each, the embedding
    on the first stage, the head on the last."""
    f, b, w = [n * forward for n in counts], [n * backward for n in counts], [n * weight for n in counts]
    f[0] += embedding
    f[-1] += head_f
    b[-1] += head_b
    return f, b, w
