"""What one block (and the head, and the optimizer step) costs on one GPU, in seconds, from the
shapes of its matmuls: the planner's compute model.

Big models run closer to peak than small ones because their matmuls are bigger and their
element-wise work is a smaller share. The model says so term by term, per tensor-parallel (and
context-parallel) rank, for one micro-batch of b sequences (M = b·s/cp tokens):

    matmuls      each of QKV, attention's projection, the MLP's up (and gate) and down, forward,
                 input-gradient and weight-gradient: 2·M·N·K / (gemm · peak) for its multiply-adds
                 plus e·(M·K + K·N + M·N) / (memory · hbm) for reading its operands and writing its
                 result (a roofline summed, not maxed: a matmul is never entirely one or the other)
    attention    materialized (Megatron 2021): QKᵀ and AV as batched matmuls of their own shapes
                 (K = head size: small, so slower), and the scale-mask-softmax and dropout on the
                 a·s² scores as memory traffic; fused (flash attention): its FLOPs, halved by the
                 causal mask, at `gemm` × peak, its backward 2.5 forwards (it recomputes QKᵀ)
    element-wise the norms, residual adds, dropout, the MLP's activation, rotary positions, as
                 bytes read and written over `memory` × hbm; the backward moves twice as many
    optimizer    Adam's read and write of the fp32 master weights and two moments, the gradients
                 read twice (norm, update) and the 16-bit weights written, over `memory` × hbm

`gemm`, `memory`, `nvlink` and `network` (Efficiency) are achieved fractions of the datasheet's
figures, fitted per GPU on published runs (efficiency.py says which; efficiency_fit.py fits them).
Setup(efficiency=0.5) instead runs every FLOP at half the peak and prices no memory traffic: the
simple model the course's tests hold against the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from .efficiency import Achieved
from .shapes import VALUE_BYTES, ModelShape

# bytes a step reads and writes per element of the optimizer's own fp32 state (read + write each)
STATE_TRAFFIC = {"adam": 24, "sgd-momentum": 16, "sgd": 8}


@dataclass(frozen=True)
class BlockCosts:
    """One block, one micro-batch, one GPU, in seconds (collectives apart)."""

    forward: float  # the forward's compute
    core: float  # of it, the attention core (QKᵀ, softmax, AV)
    matmuls: float  # of it, the matmuls (what can hide a tensor-parallel collective)
    backward_input: float  # the backward's input-gradient compute (I), the attention core's included
    backward_weight: float  # its weight-gradient matmuls (W)
    core_backward: float  # of backward_input, the attention core's (what hides a ring attention's exchange)


def gemm_time(M: float, N: float, K: float, e: int, peak: float, eff: Achieved) -> float:
    """One [M, K] × [K, N] matmul: its multiply-adds at eff.gemm × peak, its reads and writes at
    eff.memory × hbm (not priced when eff.memory, and so eff.bandwidth, is None)."""
    t: float = 2 * M * N * K / (eff.gemm * peak)
    if eff.bandwidth is not None:
        t += e * (M * K + K * N + M * N) / eff.bandwidth
    return t


def block_costs(
    shape: ModelShape,
    precision: str,
    peak: float,
    eff: Achieved,
    *,
    tp: int,
    cp: int,
    micro_batch: int,
    sequence_parallel: bool,
) -> BlockCosts:
    """A block's costs on one GPU of a tp × cp group (see the module docstring)."""
    e = VALUE_BYTES[precision]
    h, f, kv, a, s = shape.hidden, shape.inner, shape.kv_width, shape.heads, shape.seq
    M = micro_batch * s / cp
    up = (2 if shape.gated else 1) * f
    mats = [(M, (h + 2 * kv) / tp, h), (M, h, h / tp), (M, up / tp, h), (M, h, f / tp)]  # (M, N, K)
    forward_mm = sum(gemm_time(m, n, k, e, peak, eff) for m, n, k in mats)
    dgrad = sum(gemm_time(m, k, n, e, peak, eff) for m, n, k in mats)
    wgrad = sum(gemm_time(k, n, m, e, peak, eff) for m, n, k in mats)
    heads, d, sq = a / tp, h // a, s / cp
    if eff.bandwidth is None:  # the simple model: FLOPs as counted, at eff.gemm × peak
        core_f = 4 * M * s * h / tp / (eff.gemm * peak)
        core_b = 2 * core_f
        elementwise = 0.0
    else:
        if shape.attention == "materialized":
            per = micro_batch * heads
            qk, av = gemm_time(sq, s, d, e, peak, eff), gemm_time(sq, d, s, e, peak, eff)
            scores = per * sq * s
            core_f = per * (qk + av) + scores * ((4 * e + 1) if shape.dropout else 2 * e) / eff.bandwidth
            core_b = 2 * per * (qk + av) + scores * ((5 * e + 1) if shape.dropout else 3 * e) / eff.bandwidth
        else:
            core_f = 0.5 * 4 * M * s * h / tp / (eff.gemm * peak)  # causal: half the scores computed
            core_b = 2.5 * core_f
        whole = M * h / (tp if sequence_parallel else 1)
        elementwise = (
            4 * e * whole
            + (6 * e + (2 if shape.dropout else 0)) * whole
            + (3 if shape.gated else 2) * e * M * f / tp
            + (2 * e * M * (h + kv) / tp if shape.positions == "rotary" else 0.0)
        ) / eff.bandwidth
    return BlockCosts(
        forward=forward_mm + core_f + elementwise,
        core=core_f,
        matmuls=forward_mm,
        backward_input=dgrad + core_b + 2 * elementwise,
        backward_weight=wgrad,
        core_backward=core_b,
    )


@dataclass(frozen=True)
class HeadCosts:
    """The final norm, the head and the cross-entropy, one micro-batch, one GPU, in seconds."""

    forward: float
    backward: float


def head_costs(
    shape: ModelShape, precision: str, peak: float, eff: Achieved, *, tp: int, cp: int, micro_batch: int
) -> HeadCosts:
    """The head's costs on one GPU; `tp`: the ranks the head is split over (1 when not
    vocab-parallel)."""
    e = VALUE_BYTES[precision]
    M, h, V = micro_batch * shape.seq / cp, shape.hidden, shape.vocab
    forward = gemm_time(M, V / tp, h, e, peak, eff)
    backward = gemm_time(M, h, V / tp, e, peak, eff) + gemm_time(h, V / tp, M, e, peak, eff)
    if eff.bandwidth is not None:
        forward += (M * V / tp * (e + 8) + 2 * e * M * h) / eff.bandwidth  # logits to fp32, softmax, the norm
        backward += (M * V / tp * (4 + e) + 4 * e * M * h) / eff.bandwidth
    return HeadCosts(forward, backward)


def optimizer_time(elements: float, precision: str, optimizer: str, grad_bytes: int, eff: Achieved) -> float:
    """One optimizer step over `elements` parameters (what this GPU updates)."""
    if eff.bandwidth is None:
        return 0.0
    weights = VALUE_BYTES[precision] if precision != "fp32" else 0  # the 16-bit copy written back
    seconds: float = elements * (STATE_TRAFFIC[optimizer] + 2 * grad_bytes + weights) / eff.bandwidth
    return seconds
