"""A layout replayed by the simulator (simulate_mesh): the check on the planner's closed form,
and a timeline to look at."""
from __future__ import annotations

from ..parallel.mesh import Mesh
from ..schedule.kinds import make_schedule
from ..sim.mesh import Traffic, simulate_mesh
from ..sim.network import Link, Network
from ..sim.pipeline import Costs
from .layout import Layout, Setup
from .memory import memory_per_rank
from .shapes import (VALUE_BYTES, bytes_per_parameter, count, head_flops, layer_flops, layer_tensors, recompute_flops,
                     stage_layers)


def simulate_layout(setup: Setup, layout: Layout):
    """The same layout replayed by the simulator (simulate_mesh), in milliseconds: per-stage
    compute from the FLOPs, the tensor-parallel all-reduces inside the actions, the messages and
    the gradient all-reduces on the setup's links. A Trace: draw it with minipipe.viz.timeline.
    (Slow for thousands of micro-batches; the ranking uses the closed form, which tests hold to
    this.)"""
    model, gpu = setup.model, setup.gpu
    tp, p, v, b = layout.tp, layout.pp, layout.v, layout.micro_batch
    ms = 1e3 / (gpu.peak * setup.achieved)                   # milliseconds per FLOP
    tokens = b * model.seq
    fwd = layer_flops(model, tokens) / tp * ms
    extra = recompute_flops(model, tokens, layout.recompute) / tp * ms
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
