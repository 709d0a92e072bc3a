"""Published training runs the planner is calibrated on and held to, each with its source.

Every figure here is the publication's (paper, table, row; or repository, file, commit), written
next to it. What a publication does not say (the micro-batch, the schedule, v, recomputation) the
planner chooses as it would for any layout: its fastest fitting choice with the published degrees.
A run's throughput is compared as the publication counts it: "hardware" (recomputation's FLOPs
counted: Narayanan et al. 2021's eq. 3, which equals shapes.model_flops plus the full forward
recomputed, tests/planner/test_plan.py) or "model" (MFU: model FLOPs only, shapes.model_flops, which for a
GELU GPT equals Megatron-Core's num_floating_point_operations).

CALIBRATION names, per GPU, the runs efficiency.FITTED is fitted on (efficiency_fit.py); every other run
is held out, and reported apart (calibrate.accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .efficiency import Efficiency
from .evaluate import evaluate
from .prediction import Row
from .presets import MODELS
from .search import search
from .setup_and_layout import Layout, Setup, make_setup
from .shapes import ModelShape, model_flops
from .space import Space

NARAYANAN = (
    "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM "
    "(arXiv:2104.04473)"
)
SC21 = (
    "NVIDIA/Megatron-LM, examples/sc21/run_table_1.sh and CONFIG.sh (commit de7dc40, 'scripts for sc21'; now "
    "examples/academic_paper_scripts/sc21/)"
)
MCORE = (
    "NVIDIA/Megatron-LM README, 'Weak Scaling Results' and images/model_table.png (Megatron-Core r0.8.0, image of "
    "commit f2e5db4, 2024-07-15)"
)
LLAMA3 = "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783)"
DEEPSEEK_V3 = "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437)"


@dataclass(frozen=True)
class PublishedRun:
    """A training run someone measured and published: its setup, what it published of its layout,
    and the throughput per GPU it reached, counted as the publication counts it (`counts`)."""

    name: str
    group: str  # the publication, as the accuracy report groups the runs
    setup: Setup
    tflops: float
    counts: str  # "hardware" or "model"
    source: str
    layout: Layout | None = None  # the whole published layout, when the publication gives it
    tp: int | None = None  # else the published degrees (None: not published)
    pp: int | None = None
    cp: int = 1
    ep: int = 1
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    recompute: tuple[str, ...] = ("none", "selective", "full")
    zero: tuple[int, ...] = (0,)

    def predict(self, efficiency: Efficiency | None = None) -> Row:
        """The planner's row for the published layout (or, where only degrees are published, its
        fastest fitting row with them), at `efficiency` (default: the setup's), the pipeline
        replayed where its closed form is only close."""
        setup = self.setup if efficiency is None else replace(self.setup, efficiency=efficiency)
        if self.layout is not None:
            return evaluate(setup, self.layout, simulate=self.layout.pp > 1 and self.layout.schedule != "1f1b")
        space = Space(self.schedules, self.recompute, self.zero, max_tp=self.tp, cp=(self.cp,), ep=(self.ep,))
        rows = [
            r
            for r in search(setup, space, refine=3).rows
            if self.tp is None or (r.layout.tp, r.layout.pp) == (self.tp, self.pp)
        ]
        if not rows:
            raise ValueError(
                f"{self.name}: no layout with tp={self.tp}, pp={self.pp}, cp={self.cp}, ep={self.ep} fits the "
                f"planner's memory model"
            )
        return rows[0]

    def predicted_tflops(self, efficiency: Efficiency | None = None, row: Row | None = None) -> float:
        """Predicted throughput per GPU, counted as the publication counts it."""
        row = row or self.predict(efficiency)
        return row.tflops * (row.hfu / row.mfu if self.counts == "hardware" else 1.0)


# -- Narayanan et al. 2021, Table 1: GPT models from 1.7B to 1T on Selene (DGX A100 80GB) ------------
# Every model: vocabulary 51,200, sequence 2048, a GPT-2 block (dropout, attention materialized in
# 2021), fp16 with full recomputation of every block; data parallelism by torch DDP (overlapped with
# the backward) up to 18B, by Megatron's local DDP (after the pipeline) above.
_TABLE_1 = [  # size, layers, hidden, heads, tp, pp, GPUs, batch, micro-batch, v, ddp, TFLOP/s, % of peak
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, "torch", 137, 44),
    ("3.6B", 30, 3072, 32, 2, 1, 64, 512, 16, 1, "torch", 138, 44),
    ("7.5B", 36, 4096, 32, 4, 1, 128, 512, 16, 1, "torch", 142, 46),
    ("18B", 40, 6144, 48, 8, 1, 256, 1024, 8, 1, "torch", 135, 43),
    ("39B", 48, 8192, 64, 8, 2, 512, 1536, 4, 1, "local", 138, 44),
    ("76B", 60, 10240, 80, 8, 4, 1024, 1792, 2, 3, "local", 140, 45),
    ("145B", 80, 12288, 96, 8, 8, 1536, 2304, 2, 2, "local", 148, 47),
    ("310B", 96, 16384, 128, 8, 16, 1920, 2160, 1, 2, "local", 155, 50),
    ("530B", 105, 20480, 128, 8, 35, 2520, 2520, 1, 3, "local", 163, 52),
    ("1T", 128, 25600, 160, 8, 64, 3072, 3072, 1, 1, "local", 163, 52),
]

RUNS: dict[str, PublishedRun] = {}
_tflops: float  # Table 1 gives whole teraFLOP/s, Megatron-Core's table tenths
for _size, _l, _h, _a, _tp, _pp, _n, _batch, _mb, _v, _ddp, _tflops, _pct in _TABLE_1:
    _shape = ModelShape(
        f"GPT {_size} (Narayanan et al. 2021)",
        _l,
        _h,
        _a,
        51200,
        2048,
        source=f"{NARAYANAN}, Table 1: {_l} layers, hidden {_h}, {_a} heads; vocabulary 51,200, sequence 2048",
    )
    _dp = _n // (_tp * _pp)
    RUNS[f"table1-{_size.lower()}"] = PublishedRun(
        f"GPT {_size} on {_n} A100s",
        "Narayanan et al. 2021, Table 1 (A100)",
        make_setup(
            _shape,
            _n,
            "a100-80gb",
            batch=_batch,
            precision="fp16-mixed",
            sequence_parallel=False,
            dp_overlap=_ddp == "torch",
        ),
        _tflops,
        "hardware",
        f"{NARAYANAN}, Table 1, row {_size}: {_tflops} teraFLOP/s per GPU ({_pct}% of peak) on {_n} GPUs, batch "
        f"{_batch} (the same table: NVIDIA/Megatron-LM README at commit 50a4b5f, images/cases_april2021.png); the "
        f"layout from {SC21}: TP={_tp} PP={_pp} MBS={_mb} GBS={_batch}"
        + (f", {_l // (_pp * _v)} layers per virtual stage" if _v > 1 else "")
        + f", --checkpoint-activations, DDP {_ddp}, --fp16",
        layout=Layout(_tp, _pp, _dp, _mb, _batch // (_dp * _mb), "interleaved" if _v > 1 else "1f1b", _v, "full", 0),
    )

# -- Megatron-Core r0.8.0 on H100s: weak scaling (README's model table) --------------------------
# Vocabulary 131,072, sequence 4,096; DP, TP and PP communication overlapped (--overlap-grad-reduce,
# --overlap-param-gather, --tp-comm-overlap), hence the distributed optimizer (ZeRO 1). The table
# gives the degrees, not the micro-batch, schedule or recomputation: the planner's fastest stands in.
# A GELU GPT with an untied head and fused (flash) attention: the planner's assumption for these runs.
_MCORE = [  # size, heads, hidden, layers, tp, pp, dp, GPUs, batch, TFLOP/s, MFU %
    ("1.7B", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 41),
    ("7.1B", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 47),
    ("16B", 48, 6144, 32, 4, 1, 48, 192, 192, 489.1, 49),
    ("32B", 56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 46),
    ("70B", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 42),
    ("119B", 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5, 43),
    ("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 44),
    ("314B", 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4, 48),
    ("462B", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 47),
]
for _size, _a, _h, _l, _tp, _pp, _dp, _n, _batch, _tflops, _mfu in _MCORE:
    _shape = ModelShape(
        f"GPT {_size} (Megatron-Core)",
        _l,
        _h,
        _a,
        131072,
        4096,
        tied_head=False,
        dropout=False,
        attention="fused",
        source=f"{MCORE}: {_l} layers, hidden {_h}, {_a} heads; vocabulary 131,072, sequence 4,096",
    )
    RUNS[f"mcore-{_size.lower()}"] = PublishedRun(
        f"GPT {_size} on {_n} H100s",
        "Megatron-Core r0.8.0, weak scaling (H100)",
        make_setup(_shape, _n, "h100-sxm", batch=_batch, tp_overlap=True),
        _tflops,
        "model",
        f"{MCORE}, row {_size}: TP {_tp}, PP {_pp}, DP {_dp}, {_n} GPUs, batch {_batch}, {_tflops} teraFLOP/s per GPU "
        f"(MFU {_mfu}%)",
        tp=_tp,
        pp=_pp,
        zero=(1,),
    )

# -- Llama 3 405B on H100s (Dubey et al. 2024, Table 4) ------------------------------------------
for _n, _cp, _seq, _dp, _tflops, _mfu in (
    (8192, 1, 8192, 64, 430, 43),
    (16384, 1, 8192, 128, 400, 41),
    (16384, 16, 131072, 8, 380, 38),
):
    _shape = MODELS["llama3-405b"] if _seq == 8192 else MODELS["llama3-405b"].with_(seq=_seq)
    RUNS[f"llama3-405b@{_n}xh100" + ("-cp16" if _cp > 1 else "")] = PublishedRun(
        f"Llama 3 405B on {_n} H100s" + (f", sequence {_seq:,}, CP {_cp}" if _cp > 1 else ""),
        "Llama 3 (H100)",
        make_setup(_shape, _n, "h100-sxm", batch=16 * 2**20 // _seq),
        _tflops,
        "model",
        f"{LLAMA3}, Table 4: {_n} GPUs, TP 8, CP {_cp}, PP 16, DP {_dp}, sequence {_seq}, 16M tokens per batch, "
        f"{_tflops} "
        f"TFLOPs per GPU (BF16 MFU {_mfu}%); the optimizer state sharded over data parallelism (§3.3.2); FLOPs "
        f"counted here as shapes.model_flops (the paper does not give its formula)",
        tp=8,
        pp=16,
        cp=_cp,
        zero=(1,),
    )

# -- Narayanan et al. 2021, §5.1: GPT-3 175B on 1024 A100s (lesson 14's example) ----------------
RUNS["gpt3-175b@1024xa100"] = PublishedRun(
    "GPT-3 175B on 1024 A100s",
    "Narayanan et al. 2021, §5.1 (A100)",
    make_setup(
        MODELS["gpt3-175b"].with_(vocab=51200),
        1024,
        "a100-80gb",
        batch=1536,
        precision="fp16-mixed",
        sequence_parallel=False,
        dp_overlap=False,
    ),
    140.0,
    "hardware",
    f"{NARAYANAN}, §5.1: 140 teraFLOP/s per GPU for GPT-3 175B on 1024 A100s with batch 1536 (its training-time "
    f"estimate). The section names no layout; (t, p) = (8, 8) is that of Table 1's model of the same width (145.6B)",
    tp=8,
    pp=8,
    recompute=("full",),
)

# -- DeepSeek-V3 on 2,048 H800s: a mixture of experts (DeepSeek-AI 2024) --------------------------
# The report gives GPU-hours per trillion tokens, not FLOP/s: 180K H800 GPU-hours per 10^12 tokens is
# 10^12 / (180e3 · 3600) = 1,543 tokens per second per GPU; times the planner's model FLOPs per token of
# the dense equivalent (every FLOP one token's path runs: shapes.model_flops of dense_equivalent), the
# TFLOP/s the planner's count gives. The multi-token-prediction module's FLOPs are left out of both.
_DSV3_TOKENS_PER_GPU_S = 1e12 / (180e3 * 3600)
_dsv3 = make_setup("deepseek-v3", 2048, "h800", batch=15360)
RUNS["deepseek-v3@2048xh800"] = PublishedRun(
    "DeepSeek-V3 (MoE) on 2048 H800s",
    "DeepSeek-V3 (H800, MoE)",
    _dsv3,
    _DSV3_TOKENS_PER_GPU_S * model_flops(_dsv3.model, 1) / _dsv3.model.seq / 1e12,
    "model",
    f"{DEEPSEEK_V3}: 2,048 H800 GPUs, 8 a node (§3.1); 16-way pipeline parallelism (DualPipe), 64-way expert "
    f"parallelism over 8 nodes, ZeRO-1 data parallelism, no tensor parallelism (§3.2); 180K H800 GPU hours per "
    f"trillion tokens (§1; 2,664K for the 14.8T tokens of pre-training, Table 1); sequence 4,096, batch 15,360 "
    f"sequences after its ramp (§4.2). From memory of the report, not checked against its text here: the "
    f"layout, the 180K and the batch (the 2.788M GPU-hours in all and 14.8T tokens are in the released "
    f"README). Trained in FP8 with DeepSeek's own all-to-all kernels: the planner prices BF16",
    tp=1,
    pp=16,
    ep=64,
    schedules=("1f1b", "interleaved", "zb-h1", "dualpipe-v"),
    zero=(1,),
)

# Which runs each GPU's fitted efficiencies come from: as many as it has fractions to fit, runs that
# differ in what they stress (compute alone; tensor parallelism on NVLink; interleaved pipelines
# with data parallelism over the network; a deep pipeline). The H100 fits its matmul fraction on one
# run and takes the A100's memory and link fractions. H200: the H100's, with no run of its own.
CALIBRATION = {"a100-80gb": ("table1-1.7b", "table1-18b", "table1-145b", "table1-1t"), "h100-sxm": ("mcore-177b",)}
