"""One micro-batch's hidden states in one place (shapes.hidden_bytes): held to the engine's own message
between stages (parallel/accounting.py, from the tensors a plan sends), then through each of its users
by hand: the message between pipeline neighbours and a block's tensor-parallel all-reduce."""

import pytest

from minipipe.engine.config import RunConfig, prepare
from minipipe.models import task_of
from minipipe.parallel.accounting import activation_bytes
from minipipe.planner import Layout, make_setup
from minipipe.planner.evaluate import predictor
from minipipe.planner.shapes import course_gpt, hidden_bytes

GPT = {"width": 16, "heads": 2, "depth": 4, "block": 16, "vocab": 16}


@pytest.mark.parametrize("cp, batch_size, m", [(1, 8, 2), (2, 8, 2), (4, 8, 4), (2, 12, 3)])
def test_a_micro_batchs_hidden_states_are_what_the_engine_sends(cp, batch_size, m):
    config = RunConfig(schedule="1f1b", p=2, cp=cp, model="gpt", model_args=GPT, batch_size=batch_size, m=m, steps=1)
    plan = prepare(config)
    shape = course_gpt(task_of(plan.config))
    assert activation_bytes(plan)[0] == hidden_bytes(shape, batch_size // m, 4, cp=cp)


# llama2-7b: seq 4096, hidden 4096, bf16; tp 4 × cp 2 × pp 2 × dp 2 on 32 GPUs
SETUP = make_setup("llama2-7b", 32, "a100-80gb", batch=32, latency=1e-5)
LAYOUT = Layout(4, 2, 2, 2, 8, "1f1b", 1, "none", cp=2)
WHOLE = 2 * 2 * 4096 / 2 * 4096  # bytes: bf16 × micro-batch 2 × 4096/cp tokens × hidden


def test_the_message_between_stages_is_a_tp_ranks_slice():
    pred = predictor(SETUP)
    link = pred.links(4, 2, 2)["pp"]
    assert pred.message(4, 2, 2, 2) == pytest.approx(link.latency + WHOLE / 4 / link.bandwidth, rel=1e-12)


def test_a_blocks_tp_all_reduce_moves_the_whole_hidden_states():
    pred = predictor(SETUP)
    link = pred.links(4, 2, 2)["tp"]
    ring = 2 * 3 * (link.latency + WHOLE / 4 / link.bandwidth)  # 2(tp − 1) steps of 1/tp
    assert pred.block(LAYOUT).tp_collective == pytest.approx(ring, rel=1e-12)
