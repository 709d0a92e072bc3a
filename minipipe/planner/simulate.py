"""A layout replayed by the simulator (simulate_mesh): the check on the planner's closed form,
and a timeline to look at."""

from __future__ import annotations

from ..parallel.mesh import Mesh
from ..schedule.kinds import make_schedule
from ..sim.costs import Costs
from ..sim.mesh_step import simulate_mesh
from ..sim.network import Link, Network
from ..trace import Trace
from ..traffic import Traffic, TrafficKind
from .block_time import embedding_tp_collectives, tp_collectives
from .evaluate import check_layout, predictor
from .setup_and_layout import Layout, Setup
from .shapes import hidden_bytes
from .timing import stage_times


def simulate_layout(setup: Setup, layout: Layout) -> Trace:
    """The same layout replayed by simulate_mesh, in milliseconds: per-stage compute from the
    planner's block costs (block_time.py: what context parallelism and ZeRO 2/3 expose
    folded in), its tensor-parallel collectives inside the actions, the messages and the gradient
    all-reduces (over the dp·cp ranks holding the same parameters, after each rank's last backward)
    on the setup's links. A Trace: draw it with minipipe.viz.timeline. Slow for thousands of
    micro-batches; the ranking uses the closed form, which tests hold to this."""
    check_layout(setup, layout)
    pred = predictor(setup)
    model, fp = setup.model, pred.footprint
    tp, p, v, b, cp = layout.tp, layout.pp, layout.v, layout.micro_batch, layout.cp
    blk = pred.block(layout)
    blk_f, blk_b, t1 = blk.forward, blk.backward, blk.tp_collective
    head = pred.head(tp, cp, b)
    counts = fp.counts(p, v)
    ms = 1e3
    activation = hidden_bytes(model, b, setup.value_bytes, cp=cp)  # whole: what a tp collective moves
    calls_f, calls_b = tp_collectives(layout.recompute)
    emb_calls = embedding_tp_collectives(setup.vocab_parallel)
    emb_f = emb_calls * t1
    tp_calls: list[dict[str, list[tuple[TrafficKind, float]]]] = []
    if tp > 1 and not setup.tp_overlap:  # the collectives become their own events inside the actions
        blk_f, blk_b, emb_f = blk_f - calls_f * t1, blk_b - calls_b * t1, 0.0
        tp_calls = [
            {
                "F": [(TrafficKind.TP_ALL_REDUCE, activation)] * (calls_f * n + (emb_calls if s == 0 else 0)),
                "B": [(TrafficKind.TP_ALL_REDUCE, activation)] * (calls_b * n),
            }
            for s, n in enumerate(counts)
        ]
    stages = stage_times(
        counts,
        forward=blk_f * ms,
        backward=blk_b * ms,
        weight=blk.weight * ms,
        embedding=emb_f * ms,
        head_forward=head.forward * ms,
        head_backward=head.backward * ms,
    )
    grads = [[n * setup.grad_bytes] for n in fp.stage_elements(tp, p, v)]
    net = setup.network
    to_ms = Network(
        Link(net.inside.bandwidth / ms, net.inside.latency * ms),
        Link(net.between.bandwidth / ms, net.between.latency * ms),
        net.gpus_per_node,
    )
    costs = Costs(
        forward=stages.forward, backward=stages.backward, weight=stages.weight, activation_bytes=activation / tp
    )
    return simulate_mesh(
        make_schedule(layout.schedule, p, layout.m, v),
        costs,
        Mesh(p, dp=layout.dp, cp=cp, tp=tp),
        to_ms,
        Traffic(tp_calls, grads, bucket_bytes=1 << 62),
    )
