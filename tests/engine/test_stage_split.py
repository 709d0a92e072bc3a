"""A split backward (I then W, for zero-bubble schedules) gives the fused backward's gradients
and does the fused backward's work, counted in floating-point operations: no part twice."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from minipipe.engine.stage import Stage
from minipipe.models import make_task

MODELS = {"mlp": {"width": 64, "depth": 6}, "gpt": {"width": 16, "heads": 2, "depth": 4, "block": 8, "vocab": 16}}


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_split_backward_is_the_fused_backward_cut_in_two(model, position):
    task = make_task(model, batch_size=16, **MODELS[model])
    n = len(task.layers())
    index, (lo, hi) = {"first": (0, (0, 2)), "middle": (1, (2, n - 2)), "last": (2, (n - 2, n))}[position]
    x, y = task.batch(0)
    with torch.no_grad():
        h = nn.Sequential(*task.layers()[:lo])(x[:8])
        grad = None if position == "last" else torch.randn_like(nn.Sequential(*task.layers()[:hi])(x[:8]))
    fused, split = (
        Stage(index, nn.Sequential(*task.layers()[lo:hi]), 3, 2, task.loss, split_backward=s) for s in (False, True)
    )
    fused.forward(0, h, y[:8])
    split.forward(0, h, y[:8])
    returned = {}
    fused_flops = flops(lambda: returned.setdefault("fused", fused.backward(0, grad)))
    b_flops = flops(lambda: returned.setdefault("split", split.backward_input(0, grad)))
    w_flops = flops(lambda: split.backward_weight(0))

    assert b_flops + w_flops == fused_flops
    if position == "first":
        assert returned["fused"] is None and returned["split"] is None
    else:
        torch.testing.assert_close(returned["split"], returned["fused"], rtol=1e-5, atol=1e-6)
    assert 0 < w_flops < fused_flops
    for (name, p), q in zip(fused.module.named_parameters(), split.module.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert not split.saved and not split.outputs and not split.output_grads  # nothing left behind
