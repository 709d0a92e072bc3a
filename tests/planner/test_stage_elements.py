"""A stage's parameters in one place (Footprint.stage_elements): held to the engine's stages of the course
GPT (the parameters torch holds), then through each of its users: a rank's elements (its memory, its
reduction and optimizer step) and the planner's simulated step's gradients."""

import pytest

from minipipe.engine.config import RunConfig, prepare
from minipipe.models import task_of
from minipipe.planner import Layout, make_setup
from minipipe.planner.footprint import Footprint
from minipipe.planner.shapes import course_gpt
from minipipe.planner.simulate import simulate_layout
from minipipe.planner.timing import placement


# depths whose uniform cut puts the embedding and the head beside as many blocks as the planner's
@pytest.mark.parametrize("depth, p", [(4, 1), (4, 2), (6, 2), (2, 2)])
def test_each_stages_parameters_are_what_the_engines_stage_holds(depth, p):
    gpt = {"width": 16, "heads": 2, "depth": depth, "block": 16, "vocab": 16}
    plan = prepare(RunConfig(schedule="1f1b", p=p, model="gpt", model_args=gpt, batch_size=8, m=2, steps=1))
    task = task_of(plan.config)
    layers = task.layers()
    real = [sum(q.numel() for i in plan.partition.layers_of(s) for q in layers[i].parameters()) for s in range(p)]
    assert Footprint(course_gpt(task), "fp32").stage_elements(1, p, 1) == real


SETUP = make_setup("llama2-7b", 16, "a100-80gb", batch=32)


def by_hand(fp: Footprint, tp: int, p: int, v: int) -> list[int]:
    """Each stage's elements assembled from a block's, the embedding's and the head's counts."""
    (block, _), (emb, _), (head, _) = fp.parameters(tp, p)
    counts = fp.counts(p, v)
    return [n * block + (emb if s == 0 else 0) + (head if s == len(counts) - 1 else 0) for s, n in enumerate(counts)]


@pytest.mark.parametrize("kind, v", [("1f1b", 1), ("interleaved", 2), ("zb-v", 2)])
def test_a_rank_holds_its_stages_elements(kind, v):
    fp = Footprint(SETUP.model)
    per_stage, where = by_hand(fp, 2, 4, v), placement(kind, 4, v)
    for r in range(4):
        assert fp.elements(kind, 2, 4, v, r) == sum(n for n, owner in zip(per_stage, where) if owner == r)


def test_the_simulated_steps_gradients_are_each_stages_elements():
    """Each pipeline rank all-reduces its stage's gradients (bf16: 2 bytes each) over its dp group."""
    trace = simulate_layout(SETUP, Layout(2, 4, 2, 1, 16, "1f1b", recompute="full"))
    reduced = [0.0] * 4
    for c in trace.collectives:
        if c.kind.axis == "dp":
            reduced[c.rank] += c.nbytes
    assert reduced == [2 * n for n in by_hand(Footprint(SETUP.model), 2, 4, 1)]
