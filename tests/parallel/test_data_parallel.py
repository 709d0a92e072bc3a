"""minipipe.parallel.data: the open gradient reducer averages what torch's DDP averages.

Two gloo processes start once for this module (`ranks` below) and run every scenario in turn;
each worker returns its gradients, weights and bucket records, and the tests compare them here
with torch's DistributedDataParallel (run in the same workers on the same data) and with the
unsplit model on the full batch in this process (plain torch). Each replica takes its own half of
the batch, cut into M micro-batches, and drives minipipe's Stage for the whole model as one
pipeline stage: the loss divided by M, one backward (or one I and one W) per micro-batch.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from minipipe.engine.stage import Stage
from minipipe.models import make_task
from minipipe.parallel.data import GradReducer, allreduce_bytes_per_step, assign_buckets
from minipipe.traffic import DEFAULT_BUCKET_BYTES, TrafficKind, ring_bytes
from tests.support.spawn import run_ranks

DP, M = 2, 4
MODELS = {
    "mlp": dict(model="mlp", width=64, depth=4, batch_size=16),
    "gpt": dict(model="gpt", width=32, heads=2, depth=2, batch_size=8),
}
STEPS = 3  # for the runs with an optimizer
FAULT_TIMEOUT = 2.0  # the reducer's timeout in the test of a peer that never comes
RTOL, ATOL = 1e-5, 1e-6


# -- models the course does not have ---------------------------------------------------------
class WithUnused(nn.Module):
    """A model with a layer that forward never calls: its gradient never comes."""

    def __init__(self, layers):
        super().__init__()
        self.body = nn.Sequential(*layers)
        self.unused = nn.Linear(8, 8)

    def forward(self, x):
        return self.body(x)


class Reused(nn.Module):
    """One Linear applied twice (weights tied within a stage)."""

    def __init__(self, width=64):
        super().__init__()
        self.twice = nn.Linear(width, width)
        self.head = nn.Linear(width, width)

    def forward(self, x):
        return self.head(torch.tanh(self.twice(torch.tanh(self.twice(x)))))


def build(name: str):
    """(module, task) for a scenario, the same weights in every process."""
    if name == "reused":
        torch.manual_seed(5)
        return Reused(), make_task(**MODELS["mlp"])
    task = make_task(**MODELS["mlp" if name == "unused" else name])
    if name == "unused":
        torch.manual_seed(6)
        return WithUnused(task.layers()), task
    return nn.Sequential(*task.layers()), task


def shard(task, step: int, rank: int, world: int):
    """This replica's micro-batches of the step: its own slice of the global batch, cut in M."""
    x, y = task.batch(step)
    per = len(x) // world
    return x[rank * per : (rank + 1) * per].chunk(M), y[rank * per : (rank + 1) * per].chunk(M)


# -- the workers ------------------------------------------------------------------------------
def pipeline_step(module, task, reducer, xs, ys, split: bool, stage=None):
    """One step of one pipeline stage holding the whole model: all forwards, then the backwards
    (fused, or every I before any W), then finish(). Returns when the last backward op returned."""
    stage = stage or Stage(0, module, 1, M, task.loss, split_backward=split)
    for mb in range(M):
        stage.forward(mb, xs[mb], ys[mb])
    if split:
        for mb in range(M):
            stage.backward_input(mb)
        for mb in range(M):
            stage.backward_weight(mb)
    else:
        for mb in range(M):
            stage.backward(mb)
    last_backward_end = time.perf_counter()
    reducer.finish()
    stage.reset_step()
    return last_backward_end


def ddp_grads(module, task, group, xs, ys):
    ddp = DDP(module, process_group=group)
    for mb in range(M):
        with ddp.no_sync() if mb < M - 1 else nullcontext():  # DDP all-reduces on the last only
            (task.loss(ddp(xs[mb]), ys[mb]) / M).backward()
    return [p.grad.clone() for p in module.parameters()]


def scenarios(rank: int, world: int) -> dict:
    group = dist.new_group(list(range(world)))
    out = {}
    for name in MODELS:
        module, task = build(name)
        xs, ys = shard(task, 0, rank, world)
        out[name, "ddp"] = ddp_grads(module, task, group, xs, ys)
        for overlap in (True, False):
            for split in (False, True):
                module, task = build(name)
                reducer = GradReducer(module.parameters(), group, M, overlap=overlap)
                end = pipeline_step(module, task, reducer, xs, ys, split)
                out[name, overlap, split] = {
                    "grads": [p.grad.clone() for p in module.parameters()],
                    "records": [asdict(r) for r in reducer.records],
                    "last_backward_end": end,
                    "sent_bytes": reducer.sent_bytes,
                    "overlap_fraction": reducer.overlap_fraction(),
                }
                reducer.close()

    out["steps"] = train_steps(rank, world, group)
    out["unused"] = unused_step(rank, world, group)
    out["reused"] = reused_steps(rank, world, group)
    out["fault"] = peer_never_joins(rank, group)
    dist.barrier()
    return out


def train_steps(rank, world, group):
    """STEPS optimizer steps with one reducer (reset between steps; fused and split backward by
    turns), and the same with DDP: the weights after each."""
    weights = {}
    for who in ("ours", "ddp"):
        module, task = build("mlp")
        opt = torch.optim.Adam(module.parameters(), lr=1e-2)
        stage = Stage(0, module, 1, M, task.loss, split_backward=True)
        reducer = GradReducer(module.parameters(), group, M) if who == "ours" else None
        ddp = DDP(module, process_group=group) if who == "ddp" else None
        for step in range(STEPS):
            xs, ys = shard(task, step, rank, world)
            opt.zero_grad(set_to_none=True)
            if who == "ours":
                reducer.reset()
                pipeline_step(module, task, reducer, xs, ys, split=step % 2 == 1, stage=stage)
            else:
                for mb in range(M):
                    with ddp.no_sync() if mb < M - 1 else nullcontext():
                        (task.loss(ddp(xs[mb]), ys[mb]) / M).backward()
            opt.step()
        weights[who] = [p.detach().clone() for p in module.parameters()]
    return weights


def unused_step(rank, world, group):
    module, task = build("unused")
    reducer = GradReducer(module.parameters(), group, M)
    xs, ys = shard(task, 0, rank, world)
    pipeline_step(module, task, reducer, xs, ys, split=False)
    return [p.grad.clone() for p in module.parameters()]


def reused_steps(rank, world, group):
    """A Linear used twice: a fused backward accumulates its gradient once per micro-batch, a
    split one twice (each use's W runs alone), which the reducer must be told."""
    out = {}
    for split, told in ((False, False), (True, True), (True, False)):
        module, task = build("reused")
        expected = {p: 2 * M for p in module.twice.parameters()} if told else None
        reducer = GradReducer(module.parameters(), group, M, expected=expected)
        xs, ys = shard(task, 0, rank, world)
        try:
            pipeline_step(module, task, reducer, xs, ys, split)
            out[split, told] = [p.grad.clone() for p in module.parameters()]
        except RuntimeError as e:
            out[split, told] = str(e)
            for work in reducer.works:  # both replicas launched the same buckets before the error
                if work is not None:
                    work.wait()
        reducer.close()
    return out


def peer_never_joins(rank, group):
    """Rank 0 runs a step; rank 1 does not come within rank 0's timeout. Rank 1 then runs the
    same step late, so that rank 0's abandoned all-reduces complete and both can exit cleanly."""
    module, task = build("mlp")
    reducer = GradReducer(module.parameters(), group, M, timeout=FAULT_TIMEOUT, name="dp group (pp=0, tp=0)")
    xs, ys = shard(task, 0, rank, 2)
    if rank == 1:
        time.sleep(FAULT_TIMEOUT + 2)
        pipeline_step(module, task, reducer, xs, ys, split=False)
        return None
    start = time.perf_counter()
    try:
        pipeline_step(module, task, reducer, xs, ys, split=False)
    except RuntimeError as e:
        return {"error": str(e), "seconds": time.perf_counter() - start}
    return {"error": None, "seconds": time.perf_counter() - start}


# -- the references in this process -----------------------------------------------------------
def plain_grads(name: str, step: int = 0):
    """The unsplit model on the full batch, in plain torch."""
    module, task = build(name)
    x, y = task.batch(step)
    task.loss(module(x), y).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in module.parameters()]


def stage_grads(name: str, split: bool):
    """One process, one Stage, the full batch in the DP*M micro-batches the replicas ran."""
    module, task = build(name)
    x, y = task.batch(0)
    xs, ys = x.chunk(DP * M), y.chunk(DP * M)
    stage = Stage(0, module, 1, DP * M, task.loss, split_backward=split)
    for mb in range(DP * M):
        stage.forward(mb, xs[mb], ys[mb])
        if split:
            stage.backward_input(mb)
            stage.backward_weight(mb)
        else:
            stage.backward(mb)
    return [p.grad for p in module.parameters()]


def plain_weights():
    module, task = build("mlp")
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    for step in range(STEPS):
        x, y = task.batch(step)
        opt.zero_grad(set_to_none=True)
        task.loss(module(x), y).backward()
        opt.step()
    return [p.detach() for p in module.parameters()]


def assert_all_close(actual, expected, what):
    assert len(actual) == len(expected), f"{what}: {len(actual)} tensors, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}, parameter {i}: {m}")


@pytest.fixture(scope="module")
def ranks():
    return dict(enumerate(run_ranks(scenarios, DP, timeout=240)))


# -- the tests --------------------------------------------------------------------------------
CASES = [(name, overlap, split) for name in MODELS for overlap in (True, False) for split in (False, True)]


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,overlap,split", CASES)
def test_gradients_equal_ddp_and_the_unsplit_model(ranks, name, overlap, split):
    reference = plain_grads(name)
    for rank, out in ranks.items():
        label = f"{name} overlap={overlap} split={split} rank {rank}"
        assert_all_close(out[name, overlap, split]["grads"], out[name, "ddp"], f"{label} vs DDP")
        assert_all_close(out[name, overlap, split]["grads"], reference, f"{label} vs the unsplit model")
        assert_all_close(out[name, "ddp"], reference, f"DDP {name} rank {rank} vs the unsplit model")


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", MODELS)
def test_overlap_launches_a_bucket_before_the_backward_ends_and_no_overlap_does_not(ranks, name):
    for rank, out in ranks.items():
        for split in (False, True):
            on, off = out[name, True, split], out[name, False, split]
            label = f"{name} split={split} rank {rank}"
            assert len(on["records"]) >= 2, f"{label}: only {len(on['records'])} bucket(s); the test needs several"
            early = [r["index"] for r in on["records"] if r["launched_at"] < on["last_backward_end"]]
            assert early, f"{label}: with overlap, no bucket was launched before the last backward ended"
            assert all(r["in_backward"] for r in on["records"] if r["index"] in early)
            late = [r["index"] for r in off["records"] if r["launched_at"] < off["last_backward_end"]]
            assert not late, f"{label}: without overlap, buckets {late} were launched during backward"
            for r in on["records"] + off["records"]:
                assert r["launched_at"] <= r["waited_at"] <= r["completed_at"]
            assert 0 < on["overlap_fraction"] <= 1 and off["overlap_fraction"] == 0


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", MODELS)
def test_recorded_bytes_are_the_ring_formula_over_the_parameters(ranks, name):
    params = list(build(name)[0].parameters())
    total = sum(p.numel() * p.element_size() for p in params)
    for out in ranks.values():
        for overlap in (True, False):
            records = out[name, overlap, False]["records"]
            assert sum(r["nbytes"] for r in records) == total
            sent = out[name, overlap, False]["sent_bytes"]
            assert sent == allreduce_bytes_per_step(params, DP) == total  # 2(n-1)/n = 1 for n = 2


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_several_steps_with_an_optimizer_give_ddps_weights(ranks):
    reference = plain_weights()
    for rank, out in ranks.items():
        label = f"weights after {STEPS} steps, rank {rank}"
        assert_all_close(out["steps"]["ours"], out["steps"]["ddp"], f"{label}, vs DDP")
        assert_all_close(out["steps"]["ours"], reference, f"{label}, vs the unsplit model")
    assert_all_close(ranks[0]["steps"]["ours"], ranks[1]["steps"]["ours"], "replicas' weights")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_parameter_without_gradient_does_not_hang_the_step(ranks):
    reference = plain_grads("unused")  # zeros for the unused layer
    for rank, out in ranks.items():
        assert_all_close(out["unused"], reference, f"model with an unused layer, rank {rank}")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_reused_parameter_counts_once_per_fused_backward_and_twice_per_split_one(ranks):
    reference = plain_grads("reused")
    # Stage's W for a module applied twice also walks back through the module's first use, so
    # its split gradient differs from the fused one: the split case is checked against what the
    # same Stage computes on one process, which is what the reducer must average.
    split_reference = stage_grads("reused", split=True)
    for rank, out in ranks.items():
        assert_all_close(out["reused"][False, False], reference, f"reused layer, fused backward, rank {rank}")
        assert_all_close(out["reused"][True, True], split_reference, f"reused layer, split backward, rank {rank}")
        error = out["reused"][True, False]
        assert isinstance(error, str) and "expected=" in error, f"rank {rank}: no clear error: {error!r}"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_peer_that_never_joins_makes_finish_raise_within_the_timeout(ranks):
    fault = ranks[0]["fault"]
    assert fault["error"] is not None, "finish() returned though the peer never ran the step"
    assert "dp group (pp=0, tp=0)" in fault["error"] and "did not complete within" in fault["error"]
    assert fault["seconds"] < FAULT_TIMEOUT + 1.5, f"took {fault['seconds']:.1f} s for a {FAULT_TIMEOUT} s timeout"


# -- without processes ------------------------------------------------------------------------
def test_buckets_fill_in_reverse_order_up_to_the_cap():
    params = [torch.zeros(n) for n in (10, 20, 30, 40, 50)]  # 4 bytes an element
    assert assign_buckets(params, bucket_bytes=280) == [[4], [3, 2], [1, 0]]
    assert assign_buckets(params, bucket_bytes=1) == [[4], [3], [2], [1], [0]]  # larger than the cap: alone
    assert assign_buckets(params, bucket_bytes=10**6) == [[4, 3, 2, 1, 0]]
    mixed = [torch.zeros(4), torch.zeros(4, dtype=torch.float64), torch.zeros(4)]
    assert assign_buckets(mixed, bucket_bytes=10**6) == [[2], [1], [0]]  # one dtype per flat buffer


def test_the_course_models_fill_several_buckets_by_default():
    for name in MODELS:
        params = list(build(name)[0].parameters())
        assert len(assign_buckets(params, DEFAULT_BUCKET_BYTES)) >= 3, name


def test_ring_allreduce_formula():
    assert ring_bytes(TrafficKind.DP_ALL_REDUCE, 1000, 1) == 0
    assert ring_bytes(TrafficKind.DP_ALL_REDUCE, 1000, 2) == 1000
    assert ring_bytes(TrafficKind.DP_ALL_REDUCE, 1000, 4) == 1500
    params = [torch.zeros(100), torch.zeros(300)]
    assert allreduce_bytes_per_step(params, 4, bucket_bytes=400) == 1.5 * 1600
