"""The decision makers' figures (minipipe.course.decide) held to the planner and the serving model directly."""

import math

import pytest

from minipipe.course import decide
from minipipe.planner import plan
from minipipe.planner.advice import fits_somehow
from minipipe.planner.efficiency import FITTED
from minipipe.planner.presets import GPUS, MODELS
from minipipe.planner.setup_and_layout import make_setup
from minipipe.planner.shapes import parameters
from minipipe.planner.space import Space
from minipipe.sim.request_stream import ServeCosts, Stream, simulate_serving


def fits(model, gpus, gpu):
    return fits_somehow(make_setup(model, gpus, gpu, batch=decide.batch_of(model)), Space())


@pytest.mark.parametrize(
    ("model", "gpu"), [("llama2-7b", "h100-sxm"), ("llama2-70b", "a100-80gb"), ("gpt3-175b", "h200")]
)
def test_fewest_gpus_is_where_the_planner_first_fits(model, gpu):
    n = decide.fewest_gpus(model, gpu)
    assert n is not None and fits(model, n, gpu)
    assert n == 1 or not fits(model, n - 1, gpu)  # one fewer does not fit


def test_fewest_gpus_says_none_beyond_its_reach():
    assert decide.fewest_gpus("llama3-405b", "h100-sxm", most=8) is None


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-70b", "llama3-405b"])
def test_fewest_gpus_to_serve_holds_the_weights_and_one_fewer_does_not(model):
    usable = (1 - make_setup(model, 1, "h100-sxm", batch=1).memory_reserve) * GPUS["h100-sxm"].memory
    weights = parameters(MODELS[model]) * 2  # bf16
    n = decide.fewest_gpus_to_serve(model, "h100-sxm")
    assert weights <= n * usable and weights > (n - 1) * usable


def test_the_training_bill_is_the_planners_step_times_the_steps():
    bill = decide.training_bill("llama2-7b", "a100-80gb", 64, tokens=1e11, price=2.0)
    ranked = plan("llama2-7b", gpus=64, gpu="a100-80gb", batch=MODELS["llama2-7b"].batch, refine=3).distinct()
    steps = 1e11 / (1024 * 4096)
    assert math.isclose(bill.steps, steps)
    assert math.isclose(bill.best.step_s, ranked[0].step) and math.isclose(bill.slowest.step_s, ranked[-1].step)
    assert math.isclose(bill.best.gpu_hours, ranked[0].step * steps * 64 / 3600)
    assert math.isclose(bill.best.money, 2.0 * bill.best.gpu_hours) and math.isclose(
        bill.best.days * 24 * 64, bill.best.gpu_hours
    )
    assert bill.best.money <= bill.median.money <= bill.slowest.money and bill.cuts == len(ranked)


def test_a_training_bill_that_fits_nowhere_says_what_would():
    with pytest.raises(ValueError, match="no layout of Llama 3.1 405B fits on 8"):
        decide.training_bill("llama3-405b", "h100-sxm", 8)
    with pytest.raises(ValueError, match="tokens must be > 0"):
        decide.training_bill("llama2-7b", "h100-sxm", 8, tokens=0)


def test_decode_costs_from_the_gpus_figures():
    gpu, eff = GPUS["h100-sxm"], FITTED["h100-sxm"]
    shape = MODELS["llama2-70b"]
    one, four = decide.decode_costs("llama2-70b", "h100-sxm"), decide.decode_costs("llama2-70b", "h100-sxm", tp=4)
    assert math.isclose(one.fixed, parameters(shape) * 2 / (eff.memory * gpu.hbm) * 1000)  # the weights read once
    kv = 2 * shape.layers * shape.kv * (shape.hidden // shape.heads) * decide.CONTEXT * 2
    flops = 2 * parameters(shape) / (eff.gemm * gpu.peak) * 1000
    assert math.isclose(one.per_request, flops + kv / (eff.memory * gpu.hbm) * 1000)
    assert math.isclose(four.fixed, one.fixed / 4) and four.per_request > one.per_request / 4  # + the all-reduces


@pytest.mark.parametrize("pp", [1, 2, 8])
def test_a_users_wait_is_one_walk_through_every_stage(pp):
    k = 4
    point = decide.serving_point("llama2-70b", "h100-sxm", 1, pp, k)
    costs = decide.decode_costs("llama2-70b", "h100-sxm", 1, pp)
    assert math.isclose(
        point.token_ms, costs.microbatch_ms(k) + (pp - 1) * costs.latency
    )  # the serving model's own form
    full = simulate_serving(Stream(8 * pp * k, k), costs, p=pp)
    assert math.isclose(point.tokens_per_s, full.throughput)
    # with the pipeline full, a micro-batch leaves every microbatch_ms / pp: 8·pp of them, less the fill
    ideal = pp * k / costs.microbatch_ms(k) * 1000
    assert 0.85 * ideal < point.tokens_per_s <= ideal
    assert math.isclose(point.dollars_per_million, pp * decide.PRICES["h100-sxm"][0] / 3600 / point.tokens_per_s * 1e6)


def test_serving_memory_at_the_limit():
    usable = make_setup("llama2-70b", 2, "h100-sxm", batch=1).usable
    kv = decide.kv_bytes("llama2-70b")
    weights = decide.serving_weights("llama2-70b") / 2
    room = int((usable - weights) // (kv / 2))  # sequences whose cache still fits on TP 2
    assert decide.serving_point("llama2-70b", "h100-sxm", 2, 1, room).fits
    assert not decide.serving_point("llama2-70b", "h100-sxm", 2, 1, room + 1).fits


def test_a_pipeline_never_answers_sooner_than_the_same_work_on_one_stage():
    costs = ServeCosts(per_request=1.0, fixed=3.0, latency=0.1)
    alone = [simulate_serving(Stream(1, 1), costs, p=p).p50 for p in (1, 2, 4)]
    assert alone == sorted(alone) and alone[0] == costs.microbatch_ms(1)
