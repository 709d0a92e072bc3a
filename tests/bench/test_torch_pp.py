"""torch.distributed.pipelining on minipipe's stages gives the unsplit model's gradients.

Two processes (gloo, CPU) start once and loop over the schedules inside, since each start costs
seconds. Each worker also computes the one-process reference itself (every process builds the
same layers and batches from the seed), so only the result or a traceback travels back
(tests/support/spawn.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from minipipe.bench.torch_pp import TorchPipeline
from minipipe.engine.partition import partition
from minipipe.models import make_task
from tests.support.reference import unsplit_losses
from tests.support.spawn import run_ranks

pytestmark = pytest.mark.distributed

P = 2
CONFIGS = [("gpipe", 1, 4), ("1f1b", 1, 4), ("interleaved", 2, 4)]  # (kind, v, m)


def reference_grads(task, step: int):
    """The unsplit model on one process: full-batch mean loss and every layer's gradients."""
    layers = task.layers()
    x, y = task.batch(step)
    loss = task.loss(nn.Sequential(*layers)(x), y)
    loss.backward()
    return loss.item(), [[p.grad.clone() for p in layer.parameters()] for layer in layers]


def _check_gradients(rank, world):
    task = make_task("mlp", width=32, depth=8, batch_size=16)
    checked = []
    for kind, v, m in CONFIGS:
        n_stages = world * v
        layers = task.layers()
        bounds = partition(layers, n_stages, "uniform").bounds
        mine = {s: nn.Sequential(*layers[bounds[s] : bounds[s + 1]]) for s in range(rank, n_stages, world)}
        pipe = TorchPipeline(kind, mine, n_stages, m, task.loss)
        # Two steps: the first also infers shapes; the second must not see the first's grads.
        for step in range(2):
            loss = pipe.step(*task.batch(step))
            ref_loss, ref = reference_grads(task, step)
            where = f"{kind} v={v} m={m} step {step}"
            if n_stages - 1 in mine:
                assert loss == pytest.approx(ref_loss, rel=1e-5), where
            else:
                assert loss is None, where
            for s in mine:
                for k in range(bounds[s], bounds[s + 1]):
                    for (name, p), g in zip(layers[k].named_parameters(), ref[k]):
                        torch.testing.assert_close(
                            p.grad, g, rtol=1e-5, atol=1e-6, msg=lambda e: f"{where}, layer {k} {name}: {e}"
                        )
        checked.append(kind)
    # Bad input is a ValueError before any message: here, modules for the other rank's stage.
    with pytest.raises(ValueError, match="owns stages"):
        TorchPipeline("1f1b", {1 - rank: nn.Linear(2, 2)}, world, 4, task.loss)
    return checked


@pytest.mark.timeout(120)
def test_torch_pipelining_matches_unsplit_gradients():
    results = run_ranks(_check_gradients, P, timeout=100)
    assert results == [[kind for kind, _, _ in CONFIGS]] * P


def _fail_on_rank_1(rank, world):
    if rank == 1:
        raise RuntimeError("boom on purpose")
    dist.barrier()  # rank 0 waits for a peer that is gone: the launcher must not hang here


@pytest.mark.timeout(60)
def test_worker_failure_names_rank_and_traceback():
    with pytest.raises(AssertionError, match=r"(?s)rank 1 failed:.*boom on purpose"):
        run_ranks(_fail_on_rank_1, P, timeout=50)


@pytest.mark.timeout(180)
def test_torch_runs_train_minipipe_configs_with_the_same_losses_and_order():
    from minipipe import RunConfig
    from minipipe.bench.torch_pp import torch_runs

    configs = [
        RunConfig(
            schedule=kind, p=P, m=4, v=v, model="mlp", model_args={"width": 16, "depth": 8}, batch_size=16, steps=3
        )
        for kind, v, _ in CONFIGS
    ]
    runs = torch_runs(configs)
    for config, run in zip(configs, runs):
        schedule = run.plan.schedule
        assert run.losses == pytest.approx(unsplit_losses(config), rel=1e-5), config.schedule
        assert len(run.traces) == config.steps
        for trace in run.traces:
            assert trace.source == "measured" and trace.makespan > 0
            ran = [[str(e.action) for e in trace.rank_events(r)] for r in range(P)]
            assert ran == [[str(a) for a in row] for row in schedule.actions], config.schedule  # minipipe's order
        assert set(run.order) == set(range(P)) and all(len(acts) == 2 * schedule.v * 4 for acts in run.order.values())
    with pytest.raises(ValueError, match=r"dp=cp=tp=1"):
        torch_runs([RunConfig(schedule="1f1b", p=2, dp=2, m=2, batch_size=8)])
