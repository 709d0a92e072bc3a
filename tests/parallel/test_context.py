"""Context parallelism before any process starts: what is refused and why, the shapes a cp rank
sends, the bytes the formula gives, and the simulator and the planner pricing the same ring."""

from __future__ import annotations

import pytest
import torch

from minipipe.engine.config import RunConfig, prepare
from minipipe.models import task_of
from minipipe.parallel.accounting import activation_bytes, expected_bytes, step_traffic
from minipipe.traffic import KINDS, TrafficKind, ring_attention_steps
from tests.support.processes import workers_alive

GPT = {"width": 16, "heads": 2, "depth": 4, "block": 16, "vocab": 16}


class TokenMixer(torch.nn.Module):
    """Mixes the tokens of a sequence: on a share of it, it would mix only the share's."""

    def __init__(self, block: int):
        super().__init__()
        self.mix = torch.nn.Linear(block, block)

    def forward(self, x):
        return self.mix(x.transpose(1, 2)).transpose(1, 2)


def gpt_mixing_tokens(batch_size: int, seed: int):
    """The course GPT with a layer of its own between its blocks."""
    from types import SimpleNamespace

    from minipipe.models.course import GPTTask

    task = GPTTask("gpt", batch_size, seed, **GPT)
    return SimpleNamespace(
        layers=lambda: [*task.layers()[:2], TokenMixer(GPT["block"]), *task.layers()[2:]],
        loss=task.loss,
        batch=task.batch,
    )


def config(**kw) -> RunConfig:
    base = dict(schedule="1f1b", p=1, model="gpt", model_args=GPT, batch_size=8, m=2, steps=1)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            dict(model="mlp", model_args={"width": 16, "depth": 3}),
            r"cp=2 splits each sequence across ranks, but this model has no sequence to split: none of its layers "
            r"\(Readout, ResidualLinear\) has a context-parallel form",
        ),
        (dict(model="tests.support.own_model:make", model_args={}), r"none of its layers \(Linear, Sequential\) has a"),
        (
            dict(model=gpt_mixing_tokens, model_args={}),
            r"and TokenMixer has neither a context-parallel form nor the "
            r"word that it works token by token; declare one",
        ),
        (dict(recompute="stage"), r"recompute=stage with cp=2 would run ring attention's forward again"),
        (
            dict(cp=3),
            r"cp=3 must cut the sequence of 16 tokens into 2·cp = 6 equal chunks .* choose cp from 1, 2, 4, 8",
        ),
        (dict(cp=7), r"cp=7 must cut the sequence of 16 tokens"),  # one below the limit (8: chunks of one token)
        (dict(cp=9, oversubscribe=True), r"cp=9 must cut the sequence of 16 tokens"),  # one above it
        (dict(cp=0), r"mesh cp must be a whole number >= 1"),
        (dict(dp=2, ep=2), r"ep=2: this model has no mixture-of-experts layer"),
    ],
)
def test_what_context_parallelism_refuses_before_any_process_starts(changes, message):
    with pytest.raises(ValueError, match=message):
        prepare(config(**{"cp": 2, **changes}))
    assert workers_alive() == set()


def test_at_the_limit_every_rank_holds_two_chunks_of_one_token():
    plan = prepare(config(cp=8, batch_size=4, m=1, oversubscribe=True))
    assert plan.world == 8 and plan.layer_shapes[0][0] == (4, 2)


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_a_cp_rank_sends_activations_of_its_share_of_the_sequence(cp):
    plan = prepare(config(p=2, cp=cp))
    b, t = 8 // 2, 16 // cp
    assert [shape for shape, _ in plan.shapes] == [(b, t, 16), (b, t, 16)]
    assert plan.mesh.describe().startswith("mesh pp=2 × dp=1 × " + (f"cp={cp} × " if cp > 1 else "") + "tp=1")


@pytest.mark.parametrize(
    "layout", [dict(p=1, cp=2), dict(p=2, cp=2), dict(p=1, cp=4), dict(p=2, cp=2, tp=2), dict(p=1, dp=2, cp=2)]
)
def test_the_byte_formula_counts_every_ring_step(layout):
    """Per rank: (cp − 1) + (2cp − 1) K, V blocks per block and micro-batch, each block one
    rank's b · s/cp tokens of width/tp channels, twice (K and V), in fp32."""
    plan = prepare(config(**layout))
    cp, tp, m = plan.mesh.cp, plan.mesh.tp, plan.schedule.m
    layers = task_of(plan.config).layers()
    kv = 2 * (8 // plan.mesh.dp // m) * (16 // cp) * (16 // tp) * 4
    for rank in plan.mesh.ranks():
        q = plan.mesh.coords(rank).pp
        blocks = sum(
            type(layers[i]).__name__ == "Block" for s in plan.schedule.stages_of(q) for i in plan.partition.layers_of(s)
        )
        got = expected_bytes(plan, rank, layers)[TrafficKind.CP_RING]
        assert got == m * blocks * (3 * cp - 2) * kv, (layout, rank)
        assert got == m * blocks * sum(
            ring_attention_steps("forward", kv, cp) + ring_attention_steps("backward", kv, cp)
        )


@pytest.mark.parametrize("layout", [dict(p=2, cp=2), dict(p=1, cp=2, tp=2), dict(p=2, dp=2, cp=2, schedule="zb-h1")])
def test_the_simulator_sends_the_bytes_of_the_formula(layout):
    from minipipe.sim.costs import Costs
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Link, Network

    plan = prepare(config(**layout))
    layers = task_of(plan.config).layers()
    traffic = step_traffic(plan, layers)
    trace = simulate_mesh(
        plan.schedule,
        Costs(activation_bytes=activation_bytes(plan)),
        plan.mesh,
        Network.uniform(Link(1e6, 0.01)),
        traffic,
    )
    for q, rank in enumerate(plan.mesh.pipeline_ranks(0)):
        assert trace.traffic[q] == pytest.approx(expected_bytes(plan, rank, layers), rel=1e-12, abs=0)
    # each ring step inside its action: cp − 1 in an F per block, cp in a B or I, none in a W
    cp = plan.mesh.cp
    for e in trace.events:
        steps = [
            c
            for c in trace.collectives
            if c.kind is TrafficKind.CP_RING
            and c.rank == e.rank
            and e.start - 1e-9 <= c.start
            and c.end <= e.end + 1e-9
        ]
        blocks = sum(type(layers[i]).__name__ == "Block" for i in plan.partition.layers_of(e.action.stage))
        assert len(steps) == blocks * {"F": cp - 1, "B": cp, "I": cp, "W": 0}[e.action.op], e.action


def test_simulated_ring_steps_take_a_message_time_each_on_the_cp_link():
    from minipipe.sim.costs import Costs
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Link, Network

    plan = prepare(config(cp=2))
    traffic = step_traffic(plan, task_of(plan.config).layers())
    link = Link(bandwidth=1e4, latency=0.5)
    plain = simulate_mesh(plan.schedule, Costs(forward=1.0, backward=2.0), plan.mesh, Network.uniform(link))
    ringed = simulate_mesh(plan.schedule, Costs(forward=1.0, backward=2.0), plan.mesh, Network.uniform(link), traffic)
    steps = [c for c in ringed.collectives if c.kind is TrafficKind.CP_RING]
    assert len(steps) == GPT["depth"] * plan.schedule.m * (1 + 2)  # cp − 1 forward, cp backward, per block
    assert all(c.end - c.start == pytest.approx(link.send(c.nbytes)) for c in steps)
    assert ringed.compute_span == pytest.approx(plain.compute_span + sum(link.send(c.nbytes) for c in steps))


def test_the_planner_prices_the_ring_the_engine_counts():
    """The planner's K, V block of the course GPT is the engine's, and its ring time is the
    formula's steps on the cp link."""
    from minipipe.models.layers import Block, kv_bytes
    from minipipe.planner.shapes import course_gpt, ring_kv_bytes
    from minipipe.sim.network import Link, ring_attention_time

    task = task_of(config())
    shape = course_gpt(task)
    for b, tp, cp in ((4, 1, 2), (2, 2, 4), (1, 1, 8)):
        block = Block(task.width, task.heads)
        assert ring_kv_bytes(shape, b, 4, tp, cp) == kv_bytes(block, (b, task.block // cp, task.width), 4, tp)
    link = Link(bandwidth=100.0, latency=0.25)
    for phase, blocks, steps in (("forward", 3, 3), ("backward", 7, 4)):  # cp = 4
        assert ring_attention_time(phase, 100.0, 4, link) == pytest.approx(steps * 0.25 + blocks * 1.0)


def test_a_cp_kind_of_its_own_with_a_colour_no_other_kind_has():
    kind = TrafficKind("cp ring")
    assert kind is TrafficKind.CP_RING and kind.axis == "cp" and not kind.is_collective and kind.inside_actions
    assert len({k.colour for k in KINDS}) == len(KINDS)
    with pytest.raises(ValueError, match="phase is 'forward' or 'backward'"):
        ring_attention_steps("both", 1.0, 2)


def test_the_embedding_reads_its_tokens_positions():
    from minipipe.models.layers import Embedding, share_positions

    torch.manual_seed(0)
    emb = Embedding(16, 8, 4)
    idx = torch.randint(0, 16, (2, 8))
    whole = emb(idx)
    positions = torch.tensor([0, 1, 6, 7])
    shared = share_positions(emb, None, positions)
    assert torch.equal(shared(idx[:, positions]), whole[:, positions])
    assert "positions" not in shared.state_dict()


def test_the_timeline_draws_each_ring_step_in_the_kind_s_colour():
    pytest.importorskip("plotly")
    from minipipe.sim.costs import Costs
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Link, Network
    from minipipe.viz.timeline import timeline

    plan = prepare(config(p=2, cp=2))
    trace = simulate_mesh(
        plan.schedule,
        Costs(forward=1.0, backward=2.0),
        plan.mesh,
        Network.uniform(Link(1e4, 0.01)),
        step_traffic(plan, task_of(plan.config).layers()),
    )
    bars = [t for t in timeline(trace).data if t.meta["kind"] == "collective" and t.name == "cp ring"]
    assert len(bars) == 1 and bars[0].marker.color == TrafficKind.CP_RING.colour
    assert len(bars[0].x) == sum(c.kind is TrafficKind.CP_RING for c in trace.collectives) == GPT["depth"] * 2 * 3
