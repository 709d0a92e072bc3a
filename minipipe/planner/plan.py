"""The planner: which pipeline × tensor × data-parallel layout trains a model fastest on a cluster.

    from minipipe.planner.plan import plan
    best = plan("gpt3-175b", gpus=1024, gpu="a100-80gb")
    print(best.table())          # the ranking, the closest misses, the assumptions
    best.rows[0].layout          # Layout(tp=8, pp=..., dp=..., micro_batch=..., m=..., ...)

From the terminal: `minipipe plan --model gpt3-175b --gpus 1024 --gpu a100-80gb`.

It enumerates every layout of `gpus` GPUs as tp × pp × dp (tp within a node), every micro-batch
size that divides the global batch, the schedules 1F1B and interleaved 1F1B (v chunks per rank)
and activation recomputation (none, selective, full); drops those that do not fit in a GPU's
memory (and says why for the closest misses) and ranks the rest by predicted step time. Every
figure comes from a formula used elsewhere in minipipe:

    memory      sizing.py (parameters per tp shard; activations after Korthikanti et al. 2022)
                × footprint.bytes_per_parameter (ZeRO's 2 + 2 + 12 bytes for mixed-precision
                Adam) × the schedule's micro-batches in flight (kinds.py, checked against the
                simulator in tests/test_simulate.py)
    compute     sizing.py's FLOPs / (the GPU's peak × `efficiency`, the achieved fraction of peak)
    tp          network.py's ring all-reduce of a micro-batch's activation, inside a node: two per
                block forward, two backward (two more with full recomputation), inside the action
    pp          a message per micro-batch and stage boundary (the activation split over tp, as
                Megatron sends it); what it adds to the step is what the simulator finds
    pipeline    the kinds' makespan (m + (p−1)/v)·(f + b), the busiest rank (the last runs the
                head too) pacing the steady state (pipeline_time; equal to simulate_mesh's step
                when the blocks divide evenly over the stages, tests/test_plan.py)
    dp          network.py's ring all-reduce of a rank's gradients over its dp group, started when
                the rank's last backward ends (as simulate_mesh does): it overlaps the cool-down on
                every rank but the first, whose all-reduce adds to the step
    MFU         model FLOPs (sizing.model_flops, no recomputation) / (GPUs × peak × step)

What it leaves out (ASSUMPTIONS, printed with every table): communication never slows compute
and tensor-parallel talk is not overlapped with it; no network contention beyond each ring's
slowest link, no latency unless given; the optimizer step, data loading, the embedding's and the
loss's own collectives, and allocator fragmentation and workspace memory are not counted. Also
not searched: ZeRO stages 2 and 3 (FSDP), context and expert parallelism, zero-bubble schedules.

`efficiency`, the achieved fraction of peak, defaults to DEFAULT_EFFICIENCY: for each GPU, the
fraction at which this model reproduces a published run on it (published.py, which also holds
the runs the planner is checked against); published.calibrate_efficiency reads it off a run
measured here instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Sequence

from ..schedule import kinds
from ..sim.network import Link, Network, ring
from .footprint import bytes_per_parameter
from .presets import GPU, GPUS
from .presets import gpu as gpu_named
from .presets import model as model_named
from .sizing import (
    RECOMPUTE,
    VALUE_BYTES,
    ModelShape,
    attention_flops,
    count,
    embedding_activation_bytes,
    embedding_tensors,
    head_activation_bytes,
    head_flops,
    head_tensors,
    layer_activation_bytes,
    layer_flops,
    layer_tensors,
    model_flops,
    stage_layers,
)

# The achieved fraction of peak for the compute, by GPU preset: the fraction at which this model
# reproduces a published run on that GPU (published.efficiency_for(published.RUNS[...]); which run:
# published.CALIBRATED_ON; tests/test_plan.py keeps them equal). H200: the H100's figure (the same
# chip and peak; no published H200 run is used). Any other GPU: the A100's, unless given.
DEFAULT_EFFICIENCY = {"a100-80gb": 0.501, "h100-sxm": 0.548, "h200": 0.548}

SCHEDULES = ("1f1b", "interleaved")
KINDS = ("parameters", "gradients", "optimizer", "activations")
GiB = 2 ** 30

ASSUMPTIONS = (
    "compute runs at `efficiency` × the GPU's peak, the same for every layer and op",
    "tensor-parallel all-reduces are not overlapped with compute (each action lasts compute + its collectives)",
    "collectives are rings at the slowest link's bandwidth (NVLink inside a node, the GPU's network card "
    "between nodes), no contention between groups, latency 0 unless given",
    "dp gradient all-reduce starts when a rank's last backward ends (overlapping the cool-down); with the "
    "distributed optimizer a reduce-scatter and an all-gather, the same bytes",
    "the optimizer step, data loading, the embedding's and the loss's own collectives are not timed; ZeRO 2/3, "
    "context and expert parallelism and zero-bubble schedules are not searched",
    "memory: model state by ZeRO's bytes per parameter, activations after Korthikanti et al. 2022 (micro-batches "
    "in flight by the schedule); workspace, fragmentation and communication buffers are not counted",
)


@dataclass(frozen=True)
class Layout:
    """One way to run: tp × pp × dp GPUs, micro-batches of `micro_batch` sequences, m of them per
    pipeline and step, `schedule` with v chunks per rank, `recompute` none | selective | full."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    m: int
    schedule: str = "1f1b"
    v: int = 1
    recompute: str = "none"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        return f"tp{self.tp} pp{self.pp} dp{self.dp}"

    def key(self) -> tuple:
        """A total order, for ties in predicted time: fewer-way tp, then pp, larger micro-batches, ..."""
        return (self.tp, self.pp, -self.micro_batch, SCHEDULES.index(self.schedule) if self.schedule in SCHEDULES
                else len(SCHEDULES), self.v, RECOMPUTE.index(self.recompute))


@dataclass(frozen=True)
class Setup:
    """What is planned: a model on `gpus` GPUs with a global batch of `batch` sequences.

    efficiency: achieved fraction of the GPU's peak for the compute (default DEFAULT_EFFICIENCY).
    sequence_parallel: split the norms and dropouts along the sequence over tp (Korthikanti et al.
        2022; an all-gather and a reduce-scatter replace each all-reduce, same bytes).
    distributed_optimizer: shard the optimizer state over dp (ZeRO stage 1, Megatron's
        --use-distributed-optimizer).
    dp_overlap: the gradient all-reduce starts as each rank finishes its backward (else after the
        whole pipeline).
    vocab_parallel: split the embedding and the head over tp (Megatron); False keeps them whole
        on every tp rank (minipipe's engine).
    latency: seconds per message or ring step, on both links."""

    model: ModelShape
    gpu: GPU
    gpus: int
    batch: int
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    efficiency: float | None = None
    gpus_per_node: int | None = None
    sequence_parallel: bool = True
    distributed_optimizer: bool = False
    dp_overlap: bool = True
    vocab_parallel: bool = True
    latency: float = 0.0

    @cached_property
    def achieved(self) -> float:
        if self.efficiency is not None:
            return self.efficiency
        key = next((k for k, card in GPUS.items() if card == self.gpu), None)
        return DEFAULT_EFFICIENCY.get(key, DEFAULT_EFFICIENCY["a100-80gb"])

    @property
    def node(self) -> int:
        return self.gpus_per_node or self.gpu.gpus_per_node

    @cached_property
    def network(self) -> Network:
        return Network(Link(self.gpu.nvlink, self.latency), Link(self.gpu.network, self.latency), self.node)


@dataclass
class Row:
    """One layout's prediction. Times in seconds per step; memory in bytes on the GPU that needs
    most (pipeline rank `memory_rank`); comm: seconds per step by kind on the busiest rank (tp
    inside its actions, pp on the pipeline's critical path, dp its all-reduce; "dp exposed" the
    part that adds to the step)."""

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

    @property
    def fits(self) -> bool:
        return sum(self.memory.values()) <= self.capacity

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    def why(self) -> str:
        """Why it does not fit, for people."""
        parts = ", ".join(f"{k} {v / GiB:.1f}" for k, v in sorted(self.memory.items(), key=lambda kv: -kv[1]))
        return (f"needs {self.total_memory / GiB:.1f} GiB of {self.capacity / GiB:.1f} GiB on pipeline rank "
                f"{self.memory_rank} ({parts} GiB)")

    def as_dict(self) -> dict:
        lay = self.layout
        return {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "micro_batch": lay.micro_batch, "m": lay.m,
                "schedule": lay.schedule, "v": lay.v, "recompute": lay.recompute, "step_s": self.step,
                "pipeline_s": self.pipeline, "compute_s": self.compute, "bubble": self.bubble,
                **{f"{k.replace(' ', '_')}_s": v for k, v in self.comm.items()},
                **{f"{k}_bytes": v for k, v in self.memory.items()}, "memory_bytes": self.total_memory,
                "memory_rank": self.memory_rank, "fits": self.fits, "tflops_per_gpu": self.tflops, "mfu": self.mfu,
                "hfu": self.hfu}


# -- memory -------------------------------------------------------------------------------------
def memory_per_rank(model: ModelShape, layout: Layout, precision: str = "bf16-mixed", optimizer: str = "adam", *,
                    sequence_parallel: bool = True, distributed_optimizer: bool = False,
                    vocab_parallel: bool = True, ranks: Sequence[int] | None = None) -> list[dict[str, float]]:
    """Bytes each pipeline rank's GPU holds (or those of `ranks`), by kind (KINDS), for one tp shard.

    parameters, gradients, optimizer: the rank's parameter elements (its blocks, the embedding on
    the first rank, the final norm and head on the last) × footprint.bytes_per_parameter; Adam
    also keeps a 4-byte step count per parameter tensor (torch does). activations: the most
    micro-batch chunks the schedule has the rank hold at once (kinds' peak_inflight) × its
    largest chunk's blocks × sizing.layer_activation_bytes, plus the embedding's and the head's
    own (per micro-batch in flight), plus, with full recomputation, one block recomputed whole.
    """
    per = bytes_per_parameter(precision, optimizer)
    tp, p, v = layout.tp, layout.pp, layout.v
    counts = stage_layers(model.layers, p * v)
    block, block_tensors = count(layer_tensors(model), tp)
    emb = count(embedding_tensors(model, vocab_parallel), tp)
    head = count(head_tensors(model, vocab_parallel, p), tp)
    b = layout.micro_batch
    per_layer = layer_activation_bytes(model, b, precision, tp, sequence_parallel=sequence_parallel,
                                       recompute=layout.recompute)
    out = []
    for r in range(p) if ranks is None else ranks:
        mine = counts[r::p]
        elements = sum(mine) * block + (emb[0] if r == 0 else 0) + (head[0] if r == p - 1 else 0)
        tensors = sum(mine) * block_tensors + (emb[1] if r == 0 else 0) + (head[1] if r == p - 1 else 0)
        chunks = kinds.get(layout.schedule).peak_inflight(p, layout.m, v, r)
        held = -(-chunks // v)                      # micro-batches that chunk 0 (or the last chunk) holds
        act = chunks * max(mine) * per_layer
        if r == 0:
            act += held * embedding_activation_bytes(model, b)
        if r == p - 1:
            act += held * head_activation_bytes(model, b, precision, tp, sequence_parallel=sequence_parallel,
                                                vocab_parallel=vocab_parallel)
        if layout.recompute == "full":
            act += layer_activation_bytes(model, b, precision, tp, sequence_parallel=sequence_parallel)
        state = elements * per.optimizer / (layout.dp if distributed_optimizer else 1)
        out.append({"parameters": elements * per.parameters, "gradients": elements * per.gradients,
                    "optimizer": state + (4 * tensors if optimizer == "adam" else 0), "activations": act})
    return out


# -- time ---------------------------------------------------------------------------------------
def pipeline_time(kind: str, p: int, m: int, v: int, busiest: float, mean: float, message: float) -> float:
    """Step time of the pipeline (without data parallelism): `busiest` and `mean` are f + b of one
    micro-batch on the busiest and on the mean rank, `message` one message between neighbours.

    With equal ranks this is the kinds' makespan (m + (p−1)/v)·(f + b). With a heavier rank (the
    last, which also runs the head) the busiest one paces the steady state and every rank's work
    fills and drains the pipeline: (m − 1/v)·busiest + (p/v)·mean. Messages (c each) add what the
    simulator finds on the critical path. The fill and drain cross p−1 boundaries each way,
    2c(p−1). 1F1B keeps exactly as many micro-batches in flight as the ranks' work covers: a
    micro-batch's trip through all p ranks and back, p·mean + 2c(p−1), lets p micro-batches
    through, so unless the busiest rank is slower the steady state runs at mean + 2c(p−1)/p per
    micro-batch. Interleaved 1F1B's deeper warm-up hides the messages but in the fill and the
    drain, 2c·(p·v − 1) (while c is small next to a chunk's work). tests/test_plan.py holds this
    to simulate_mesh: equal when every stage has as many blocks; when the blocks do not divide
    evenly it errs by a few per cent."""
    if p == 1:
        return (m - 1 / v) * busiest + p / v * mean
    if kind == "1f1b":
        trip = 2 * message * (p - 1) / p           # a micro-batch's share of one round trip
        fill_drain = p * mean + 2 * message * (p - 1)
        return max((m - 1) * busiest + fill_drain,                          # paced by the busiest rank
                   (m - 1) * (mean + trip) + fill_drain - 2 * message / p)  # paced by the round trips
    return (m - 1 / v) * busiest + p / v * mean + 2 * message * (p * v - 1)


def evaluate(setup: Setup, layout: Layout) -> Row:
    """Predict one layout (see the module docstring for where each figure comes from)."""
    model, gpu, net = setup.model, setup.gpu, setup.network
    tp, p, dp, v, b, m = layout.tp, layout.pp, layout.dp, layout.v, layout.micro_batch, layout.m
    if layout.gpus != setup.gpus or p * v > model.layers or dp * b * m != setup.batch:
        raise ValueError(f"{layout} does not fit the setup: tp·pp·dp must be {setup.gpus} GPUs, pp·v at most the "
                         f"{model.layers} layers, and dp·micro_batch·m the batch of {setup.batch} sequences")
    flops_per_s = gpu.peak * setup.achieved
    tokens = b * model.seq
    e = VALUE_BYTES[setup.precision]
    # one block, one micro-batch, on one tp rank
    fwd = layer_flops(model, tokens) / tp / flops_per_s
    extra = {"none": 0.0, "selective": attention_flops(model, tokens) if model.attention == "materialized" else 0.0,
             "full": layer_flops(model, tokens)}[layout.recompute] / tp / flops_per_s
    activation = e * tokens * model.hidden
    ar = ring("all-reduce", activation, tp, net.link((0, tp - 1)))          # tp ranks are consecutive
    tp_f, tp_b = 2 * ar, (4 if layout.recompute == "full" else 2) * ar
    head_div = tp if setup.vocab_parallel else 1
    head_f = head_flops(model, tokens) / head_div / flops_per_s
    counts = stage_layers(model.layers, p * v)
    # rank 0 has the most blocks (earlier stages take any extra ones), the last rank the head, rank
    # 1 the most blocks of the rest: what the busiest rank, the mean and the dp tail need
    ranks = sorted({0, 1, p - 1} & set(range(p)))
    per_block = 3 * fwd + extra + tp_f + tp_b
    work, comp, talk_tp, back = {}, {}, {}, {}
    for r in ranks:
        n, last = sum(counts[r::p]), r == p - 1
        comp[r] = n * (3 * fwd + extra) + (3 * head_f if last else 0.0)
        talk_tp[r] = n * (tp_f + tp_b)
        back[r] = n * (2 * fwd + extra + tp_b) + (2 * head_f if last else 0.0)
        work[r] = comp[r] + talk_tp[r]
    mean = (model.layers * per_block + 3 * head_f) / p
    message = net.send(activation / tp, 0, dp * tp) if p > 1 else 0.0     # pipeline ranks 0 and 1 of slice 0
    busiest = max(ranks, key=lambda r: work[r])
    pipe = pipeline_time(layout.schedule, p, m, v, work[busiest], mean, message)
    pp_comm = pipe - pipeline_time(layout.schedule, p, m, v, work[busiest], mean, 0.0)
    # memory: the first rank holds the most micro-batches and the embedding, the last the head; every
    # other rank holds no more than the first (the earlier stages take any extra blocks)
    ends = sorted({0, p - 1})
    mem = dict(zip(ends, memory_per_rank(model, layout, setup.precision, setup.optimizer, ranks=ends,
                                         sequence_parallel=setup.sequence_parallel, vocab_parallel=setup.vocab_parallel,
                                         distributed_optimizer=setup.distributed_optimizer)))
    # data parallelism: each rank's gradients, all-reduced over its dp group after its last backward;
    # pipeline rank r's dp group (slice 0) is the ranks r·dp·tp, ..., (r·dp + dp − 1)·tp
    grads = count(layer_tensors(model), tp)[0] * bytes_per_parameter(setup.precision, setup.optimizer).gradients
    dp_times = {}
    for r in ranks:
        nbytes = mem[r]["gradients"] if r in mem else grads * sum(counts[r::p])
        link = net.link((r * dp * tp, (r * dp + dp - 1) * tp))
        dp_times[r] = ring("all-reduce", nbytes, dp, link)
    if setup.dp_overlap:
        exposed = max(max(0.0, t - r * (back[r] / v + message)) for r, t in dp_times.items())
    else:
        exposed = max(dp_times.values())
    step = pipe + exposed
    useful = model_flops(model, setup.batch)
    redo = {"none": 0.0, "selective": attention_flops(model, 1) if model.attention == "materialized" else 0.0,
            "full": layer_flops(model, 1)}[layout.recompute] * model.layers * setup.batch * model.seq
    whole = setup.gpus * gpu.peak * step
    fullest = max(ends, key=lambda r: sum(mem[r].values()))
    return Row(layout, step, pipe, m * comp[busiest], 1 - m * work[busiest] / pipe,
               {"tp": m * talk_tp[busiest], "pp": pp_comm, "dp": max(dp_times.values()), "dp exposed": exposed},
               mem[fullest], fullest, useful / setup.gpus / step / 1e12, useful / whole, (useful + redo) / whole,
               gpu.memory)


# -- the search ---------------------------------------------------------------------------------
def layouts(setup: Setup, *, schedules: Sequence[str] = SCHEDULES, recompute: Sequence[str] = RECOMPUTE,
            micro_batches: Sequence[int] | None = None, max_tp: int | None = None, max_v: int = 8,
            skipped: dict | None = None) -> list[Layout]:
    """Every layout worth predicting; what is left out and why is counted in `skipped`."""
    model, n = setup.model, setup.gpus
    skipped = {} if skipped is None else skipped

    def skip(reason):
        skipped[reason] = skipped.get(reason, 0) + 1

    out = []
    max_tp = max_tp or setup.node
    tps = [t for t in _divisors(n) if t <= max_tp and setup.node % t == 0]   # a tp group stays inside a node
    for tp in tps:
        if model.heads % tp or model.kv % tp or model.inner % tp:
            skip(f"tp must divide the heads ({model.heads}), key/value heads ({model.kv}) and MLP width "
                 f"({model.inner})")
            continue
        for pp in _divisors(n // tp):
            if pp > model.layers:
                skip(f"pp at most the model's {model.layers} layers")
                continue
            dp = n // (tp * pp)
            if setup.batch % dp:
                skip(f"dp must divide the global batch of {setup.batch} sequences")
                continue
            for b in micro_batches or _divisors(setup.batch // dp):
                if (setup.batch // dp) % b:
                    continue
                m = setup.batch // (dp * b)
                for kind in schedules:
                    for v in _vs(kind, pp, model.layers, max_v):
                        try:
                            kinds.check(kind, pp, m, v)
                        except ValueError:
                            skip(f"{kind} needs m a multiple of pp")
                            continue
                        for rc in recompute:
                            if rc == "selective" and model.attention == "fused":
                                continue     # flash attention keeps no s² scores: selective is "none"
                            out.append(Layout(tp, pp, dp, b, m, kind, v, rc))
    return out


def _vs(kind: str, pp: int, layers: int, max_v: int) -> range:
    k = kinds.get(kind)
    if not k.takes_v:
        return range(1, 2)
    if pp == 1:
        return range(0)                   # one rank: nothing to interleave
    return range(k.min_v, min(max_v, layers // pp) + 1)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Layouts:
    """The ranking: `rows` fit, fastest first; `misses` do not fit, closest first; `skipped`
    counts layouts left out before predicting, by reason."""

    setup: Setup
    rows: list[Row]
    misses: list[Row]
    skipped: dict = field(default_factory=dict)

    def best(self, **where) -> Row | None:
        """The fastest row whose layout has these fields, e.g. best(tp=8, pp=8)."""
        return next((r for r in self.rows if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def distinct(self) -> list[Row]:
        """The fastest row of each (tp, pp, dp), fastest first: one line per way to cut the GPUs."""
        seen, out = set(), []
        for r in self.rows:
            key = (r.layout.tp, r.layout.pp, r.layout.dp)
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def rank_of(self, **where) -> int | None:
        """1-based place of the fastest row with these layout fields among distinct (tp, pp, dp)."""
        return next((i for i, r in enumerate(self.distinct(), 1)
                     if all(getattr(r.layout, k) == v for k, v in where.items())), None)

    def table(self, top: int = 10, misses: int = 3, every: bool = False) -> str:
        """The ranking as text: the best `top` (tp, pp, dp) layouts, each with its fastest choice
        of micro-batch, schedule and recomputation (`every`: every row), the closest misses and
        the assumptions."""
        s = self.setup
        head = (f"{s.model.name} on {s.gpus} × {s.gpu.name} ({s.node} per node), global batch {s.batch} × "
                f"{s.model.seq} tokens, {s.precision}, {s.optimizer}"
                + (" (distributed)" if s.distributed_optimizer else "")
                + f", compute at {s.achieved:.3f} of {s.gpu.peak / 1e12:.0f} TFLOP/s"
                + (" (default: see minipipe.planner.published)" if s.efficiency is None else ""))
        shown = self.rows if every else self.distinct()
        lines = [head, f"{len(self.rows)} layouts fit ({len(self.distinct())} ways to cut the GPUs), "
                       f"{len(self.misses)} do not; fastest first" + ("" if every else ", the best of each tp·pp·dp")
                 + ":", ""]
        lines.append(f"{'#':>3}  {'layout':<17}{'b':>3}{'m':>6}  {'schedule':<17}{'recompute':<10}{'step s':>8}"
                     f"{'TFLOP/s':>9}{'MFU':>6}{'bubble':>8}{'tp s':>7}{'pp s':>7}{'dp s':>7}  "
                     f"{'GiB: params grads optim activ = total':<40}")
        for i, r in enumerate(shown[:top], 1):
            lines.append(_line(i, r))
        if not self.rows:
            lines.append("  (none fits: see the closest misses)")
        if self.misses and misses:
            lines += ["", "closest misses (do not fit):"]
            for r in self.misses[:misses]:
                lay = r.layout
                lines.append(f"  {lay.label()} b={lay.micro_batch} {_sched(lay)} recompute {lay.recompute}: {r.why()}")
        if self.skipped:
            lines += ["", "left out before predicting: " + "; ".join(f"{n} × {why}" for why, n in self.skipped.items())]
        lines += ["", "tp s: tensor-parallel all-reduces per step; pp s: what messages between stages add; dp s: the "
                      "gradient all-reduce (exposed part in brackets).", "assumptions:"]
        lines += [f"  - {a}" for a in ASSUMPTIONS]
        return "\n".join(lines)


def _sched(lay: Layout) -> str:
    return lay.schedule + (f" v={lay.v}" if lay.v > 1 else "")


def _line(i: int, r: Row) -> str:
    lay, mem = r.layout, r.memory
    gib = " ".join(f"{mem[k] / GiB:5.1f}" for k in KINDS)
    return (f"{i:>3}  {lay.label():<17}{lay.micro_batch:>3}{lay.m:>6}  {_sched(lay):<17}{lay.recompute:<10}"
            f"{r.step:>8.2f}{r.tflops:>9.1f}{r.mfu:>6.0%}{r.bubble:>8.1%}{r.comm['tp']:>7.2f}{r.comm['pp']:>7.2f}"
            f"{r.comm['dp']:>7.2f} ({r.comm['dp exposed']:.2f})  {gib} = {r.total_memory / GiB:5.1f}")


def plan(model: str | ModelShape = "gpt3-175b", gpus: int = 1024, gpu: str | GPU = "a100-80gb", *,
         batch: int | None = None, precision: str = "bf16-mixed", optimizer: str = "adam",
         efficiency: float | None = None, gpus_per_node: int | None = None, sequence_parallel: bool = True,
         distributed_optimizer: bool = False, dp_overlap: bool = True, vocab_parallel: bool = True,
         latency: float = 0.0, schedules: Sequence[str] = SCHEDULES, recompute: Sequence[str] = RECOMPUTE,
         micro_batches: Sequence[int] | None = None, max_tp: int | None = None, max_v: int = 8) -> Layouts:
    """Rank every layout of `model` on `gpus` GPUs of kind `gpu`; see the module docstring.
    `batch`: global batch in sequences (default: the model preset's published one)."""
    setup = make_setup(model, gpus, gpu, batch=batch, precision=precision, optimizer=optimizer, efficiency=efficiency,
                       gpus_per_node=gpus_per_node, sequence_parallel=sequence_parallel,
                       distributed_optimizer=distributed_optimizer, dp_overlap=dp_overlap,
                       vocab_parallel=vocab_parallel, latency=latency)
    for kind in schedules:
        if kind not in SCHEDULES:
            raise ValueError(f"the planner knows the schedules {', '.join(SCHEDULES)}; got {kind!r}")
    for rc in recompute:
        if rc not in RECOMPUTE:
            raise ValueError(f"unknown recompute {rc!r}; choose from {', '.join(RECOMPUTE)}")
    skipped: dict = {}
    rows = [evaluate(setup, lay) for lay in layouts(setup, schedules=schedules, recompute=recompute,
                                                     micro_batches=micro_batches, max_tp=max_tp, max_v=max_v,
                                                     skipped=skipped)]
    fits = sorted((r for r in rows if r.fits), key=rank_key)
    misses = sorted((r for r in rows if not r.fits), key=miss_key)
    return Layouts(setup, fits, misses, skipped)


def rank_key(row: Row) -> tuple:
    """Fastest first; equal times (to a nanosecond) by the layout's own order, so the ranking
    does not depend on the order layouts were tried in."""
    return (round(row.step, 9), row.layout.key())


def miss_key(row: Row) -> tuple:
    """Closest to fitting first."""
    return (round(row.total_memory / row.capacity, 12), row.layout.key())


def make_setup(model: str | ModelShape, gpus: int, gpu: str | GPU, *, batch: int | None = None, **settings) -> Setup:
    """A Setup from names or objects, checked: a ValueError says what to change."""
    shape, card = model_named(model), gpu_named(gpu)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a whole number >= 1, got {gpus!r}")
    batch = shape.batch if batch is None else batch
    if batch is None:
        raise ValueError(f"{shape.name} has no published global batch; pass batch= (sequences per step)")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number of sequences >= 1, got {batch!r}")
    eff = settings.get("efficiency")
    if eff is not None and not 0 < eff <= 1:
        raise ValueError(f"efficiency is the achieved fraction of the GPU's peak, in (0, 1]; got {eff!r}")
    bytes_per_parameter(settings.get("precision", "bf16-mixed"), settings.get("optimizer", "adam"))   # checks both
    return Setup(shape, card, gpus, batch, **settings)


def simulate_layout(setup: Setup, layout: Layout):
    """The same layout replayed by the simulator (simulate_mesh), in milliseconds: per-stage
    compute from the FLOPs, the tensor-parallel all-reduces inside the actions, the messages and
    the gradient all-reduces on the setup's links. A Trace: draw it with minipipe.viz.timeline.
    (Slow for thousands of micro-batches; the ranking uses the closed form, which tests hold to
    this.)"""
    from ..parallel.mesh import Mesh
    from ..schedule.kinds import make_schedule
    from ..sim.mesh import Traffic, simulate_mesh
    from ..sim.pipeline import Costs

    model, gpu = setup.model, setup.gpu
    tp, p, v, b = layout.tp, layout.pp, layout.v, layout.micro_batch
    ms = 1e3 / (gpu.peak * setup.achieved)                   # milliseconds per FLOP
    tokens = b * model.seq
    fwd = layer_flops(model, tokens) / tp * ms
    extra = {"none": 0.0, "selective": attention_flops(model, tokens) if model.attention == "materialized" else 0.0,
             "full": layer_flops(model, tokens)}[layout.recompute] / tp * ms
    head_f = head_flops(model, tokens) / (tp if setup.vocab_parallel else 1) * ms
    counts = stage_layers(model.layers, p * v)
    last = p * v - 1
    forward = [n * fwd + (head_f if s == last else 0.0) for s, n in enumerate(counts)]
    backward = [n * (2 * fwd + extra) + (2 * head_f if s == last else 0.0) for s, n in enumerate(counts)]
    activation = VALUE_BYTES[setup.precision] * tokens * model.hidden
    back_calls = 4 if layout.recompute == "full" else 2
    tp_calls = [{"F": [("tp all-reduce", activation)] * (2 * n), "B": [("tp all-reduce", activation)] * (back_calls * n)}
                for n in counts] if tp > 1 else ()
    grad = count(layer_tensors(model), tp)[0] * bytes_per_parameter(setup.precision, setup.optimizer).gradients
    mem = memory_per_rank(model, layout, setup.precision, setup.optimizer, ranks=sorted({0, p - 1}),
                          sequence_parallel=setup.sequence_parallel, vocab_parallel=setup.vocab_parallel,
                          distributed_optimizer=setup.distributed_optimizer)
    grads = [[n * grad] for n in counts]
    grads[0] = [mem[0]["gradients"] - grad * (sum(counts[0::p]) - counts[0])]       # + the embedding's
    if p > 1 or v > 1:
        grads[last] = [mem[-1]["gradients"] - grad * (sum(counts[p - 1::p]) - counts[last])]   # + the head's
    net = setup.network
    to_ms = Network(Link(net.inside.bandwidth / 1e3, net.inside.latency * 1e3),
                    Link(net.between.bandwidth / 1e3, net.between.latency * 1e3), net.gpus_per_node)
    costs = Costs(forward=forward, backward=backward, activation_bytes=activation / tp)
    return simulate_mesh(make_schedule(layout.schedule, p, layout.m, v), costs, Mesh(p, layout.dp, tp), to_ms,
                         Traffic(tp_calls, grads, bucket_bytes=1 << 62))


def explore(model: str | ModelShape = "gpt3-175b", gpus: int = 1024, gpu: str | GPU = "a100-80gb", *, top: int = 8,
            **settings):
    """For a notebook: plan(...) and its best `top` ways to cut the GPUs as rows (dicts, one per
    (tp, pp, dp), fastest first) and a plotly figure of where each step goes and what fills each
    GPU (minipipe.viz.planner). Returns (rows, figure, the whole ranking)."""
    from ..viz.planner import layouts_figure

    result = plan(model, gpus, gpu, **settings)
    return [r.as_dict() for r in result.distinct()[:top]], layouts_figure(result, top), result


# -- the command line (`minipipe plan`) ---------------------------------------------------------
def add_arguments(parser) -> None:
    """`minipipe plan`'s options (cli.py adds the subcommand)."""
    from .presets import GPUS, MODELS

    parser.add_argument("--model", default="gpt3-175b", help=f"a model preset: {', '.join(MODELS)} (default gpt3-175b)")
    parser.add_argument("--gpus", type=int, default=1024, help="GPUs in the cluster (default 1024)")
    parser.add_argument("--gpu", default="a100-80gb", help=f"a GPU preset: {', '.join(GPUS)} (default a100-80gb)")
    parser.add_argument("--batch", type=int, default=None,
                        help="global batch in sequences (default: the model's published one)")
    parser.add_argument("--precision", default="bf16-mixed", help="bf16-mixed (default), fp16-mixed or fp32")
    parser.add_argument("--optimizer", default="adam", help="adam (default), sgd or sgd-momentum")
    parser.add_argument("--efficiency", type=float, default=None,
                        help="achieved fraction of the GPU's peak for the compute (default: calibrated on a "
                             "published run on that GPU, see minipipe.planner.published)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="default: the GPU preset's node (8)")
    parser.add_argument("--distributed-optimizer", action="store_true",
                        help="shard the optimizer state over data parallelism (ZeRO stage 1)")
    parser.add_argument("--no-sequence-parallel", action="store_true",
                        help="keep norms and dropouts whole on every tensor-parallel rank")
    parser.add_argument("--recompute", default=",".join(RECOMPUTE),
                        help="activation recomputation to consider, comma-separated (default none,selective,full)")
    parser.add_argument("--top", type=int, default=10, help="layouts to print (default 10)")
    parser.add_argument("--every", action="store_true",
                        help="print every fitting row, not the best of each tp·pp·dp")
    parser.set_defaults(func=command)


def command(args) -> int:
    result = plan(args.model, args.gpus, args.gpu, batch=args.batch, precision=args.precision,
                  optimizer=args.optimizer, efficiency=args.efficiency, gpus_per_node=args.gpus_per_node,
                  sequence_parallel=not args.no_sequence_parallel, distributed_optimizer=args.distributed_optimizer,
                  recompute=tuple(x.strip() for x in args.recompute.split(",") if x.strip()))
    print(result.table(top=args.top, every=args.every))
    return 0
