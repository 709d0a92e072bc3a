"""The planner's mixture-of-experts figures: the published models' parameter counts from their
shapes, the course MoE GPT's from its torch modules, its experts per rank and its all-to-all's
bytes and time from the rule the engine counts and the simulator replays. No processes."""

import pytest

from minipipe.engine.config import RunConfig, prepare
from minipipe.models import make_task
from minipipe.parallel.accounting import expected_bytes, parameter_bytes
from minipipe.planner.experts import MOE_MODELS, Experts, all_to_all, expert_parameters_per_gpu, moe_parameters
from minipipe.planner.shapes import course_gpt, embedding_tensors
from minipipe.sim.network import Link
from minipipe.traffic import TrafficKind

EP = TrafficKind.EP_ALL_TO_ALL
COURSE = {
    "width": 16,
    "heads": 2,
    "depth": 4,
    "block": 8,
    "vocab": 16,
    "experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
    "moe_every": 1,
}


def test_published_moe_models_have_their_published_parameter_counts():
    total, active = moe_parameters(*MOE_MODELS["mixtral-8x7b"])
    assert round(total / 1e9, 1) == 46.7 and round(active / 1e9, 1) == 12.9  # Mistral AI's figures
    shape, moe, latent = MOE_MODELS["deepseek-v3"]
    total, active = moe_parameters(shape, moe, latent)
    assert round(total / 1e9) == 671
    # DeepSeek's 36.6B active leaves out the embedding table (a lookup, no work); Mistral's counts it
    embedding = embedding_tensors(shape, False)[0][0]
    assert round((active - embedding) / 1e9, 1) == 36.6


def course_moe():
    task = make_task("moe", **COURSE)
    return task, course_gpt(task), Experts(COURSE["experts"], COURSE["top_k"], ffn=4 * COURSE["width"])


def test_the_course_moe_gpt_has_the_parameters_its_shape_says():
    task, shape, moe = course_moe()
    layers = task.layers()
    real = sum(p.numel() for layer in layers for p in layer.parameters())
    total, active = moe_parameters(shape, moe)
    assert total == real
    one_expert = sum(p.numel() for p in layers[1].moe.experts["0"].parameters())
    assert total - active == shape.layers * (moe.experts - moe.top_k) * one_expert


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_experts_per_gpu_are_the_engine_ranks(ep):
    task, shape, moe = course_moe()
    plan = prepare(RunConfig(model="moe", model_args=COURSE, batch_size=16, m=2, p=1, dp=4, ep=ep, steps=1))
    dense, experts = parameter_bytes(plan, 0, task.layers(), split=True)
    held = (
        experts
        if ep > 1
        else sum(
            p.numel() * 4
            for layer in task.layers()
            for m in layer.modules()
            if hasattr(m, "experts") and hasattr(m, "n_experts")
            for p in m.experts.parameters()
        )
    )
    assert expert_parameters_per_gpu(shape, moe, ep=ep) * 4 == held
    with pytest.raises(ValueError, match="ep=3 does not divide the 4 experts"):
        expert_parameters_per_gpu(shape, moe, ep=3)


@pytest.mark.parametrize("ep", [2, 4])
def test_all_to_all_bytes_and_time_are_the_engines_and_the_simulators(ep):
    from minipipe.models import task_of
    from minipipe.parallel.accounting import step_traffic
    from minipipe.sim.costs import Costs
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Network

    task, shape, _ = course_moe()
    moe = Experts(COURSE["experts"], COURSE["top_k"], ffn=4 * COURSE["width"], capacity_factor=1.25)
    m, batch = 2, 16
    plan = prepare(RunConfig(model="moe", model_args=COURSE, batch_size=batch, m=m, p=1, dp=4, ep=ep, steps=1))
    micro_batch = batch // (4 * m)
    link = Link(bandwidth=1000.0, latency=0.25)
    forward = all_to_all(shape, moe, micro_batch, ep=ep, link=link, precision="fp32")
    backward = all_to_all(shape, moe, micro_batch, ep=ep, link=link, precision="fp32", phase="backward")
    per_step = m * shape.layers * (forward["sent"] + backward["sent"])
    assert expected_bytes(plan, 0, task.layers())[EP] == pytest.approx(per_step, rel=1e-12)
    trace = simulate_mesh(
        plan.schedule, Costs(), plan.mesh, Network.uniform(link), step_traffic(plan, task_of(plan.config).layers())
    )
    swaps = sorted(c.end - c.start for c in trace.collectives if c.kind is EP)
    assert swaps and all(t == pytest.approx(forward["time"] / 2) for t in swaps)  # each of the two buffers
    assert forward["time"] == pytest.approx(2 * (ep - 1) * (0.25 + forward["buffers"][0] / ep / 1000.0))


def test_a_dropless_layer_sends_every_choice_once():
    shape, moe, _ = MOE_MODELS["mixtral-8x7b"]
    out = all_to_all(shape, moe, 1, ep=8, link=Link(50e9, 5e-6))
    assert out["buffers"] == [4096 * 2 * 4096 * 2.0] * 2  # tokens · top_k · width · 2 bytes, there and back
    assert out["sent"] == pytest.approx(2 * out["buffers"][0] * 7 / 8)


def test_an_all_to_all_in_an_unknown_precision_is_refused():
    shape, moe, _ = MOE_MODELS["mixtral-8x7b"]
    with pytest.raises(ValueError, match="unknown precision 'fp8'; choose one of"):
        all_to_all(shape, moe, 1, ep=8, link=Link(50e9, 5e-6), precision="fp8")
