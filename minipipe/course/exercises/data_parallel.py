"""Exercise: data parallelism's bucketed all-reduce. The learner groups the gradients into buckets,
`buckets(params, bucket_bytes)` (the last parameter first, as DDP does, each bucket filled until the
next gradient would not fit: minipipe's rule, `within_limit`; torch's own lets a bucket's last
gradient take it over the limit, `torch_rule`), and averages them over the replicas, one all-reduce
per bucket, `all_reduce_gradients(params, bucket_bytes, group)`.

Checked by properties of the buckets on parameter lists drawn afresh; then with the replicas as
threads here (ThreadWorld), where every rank's gradients must come out as the whole batch's and
every all-reduce must be one bucket's; then on 2 real processes against torch's own
DistributedDataParallel. The engine's bucketing (minipipe.parallel.data) and DDP itself are not on the
exercise's list (ALLOWED). The learner's functions run in the sandbox (grading/): the threads'
world and the workers of the real run are started there (workers that watch the learner's code as
the sandbox does); torch's DDP runs in the judge's own workers, beside them."""

from __future__ import annotations

import functools
import pickle
import random

import torch
from torch import nn

from ..grading.harness import harness
from ..i18n.messages import say as _
from .guard import ask, in_sandbox
from .threads import ThreadWorld
from .verdict import Mistake, verdict

# what the learner's code may call while the check calls it (grading/watch.py): nothing of minipipe's,
# nor torch's DistributedDataParallel (torch's tensors and torch.distributed are theirs); GIVEN: the
# checker's helper the given cell hands out, which the learner's cells may call too
ALLOWED = ()
GIVEN = ("minipipe.course.exercises.data_parallel.model",)
SEED, ROWS, LIMIT = 5, 12, 400  # LIMIT: bytes a bucket may hold in the model checks (3 buckets)
RTOL, ATOL = 1e-5, 1e-7


def _advice() -> str:
    return _("group and average the gradients yourself")


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def param_lists(seed=None) -> list[tuple[list[torch.Tensor], int]]:
    """(parameters, bucket_bytes): one by hand, then some drawn afresh at every check (seed None)."""
    rng = random.Random(seed)
    out = [([torch.zeros(n) for n in (10, 20, 30, 40)], 200)]
    for _draw in range(12):
        params = [torch.zeros(rng.choice([1, 4, 16, 50, 100, 300])) for _ in range(rng.randint(1, 12))]
        out.append((params, rng.choice([40, 400, 1000, 2000, 10**6])))
    return out


def _buckets_of(fn, params, limit) -> list[list[int]]:
    name = _(
        "buckets(<{n} parameters of {values} values>, {limit})",
        n=len(params),
        values=", ".join(str(p.numel()) for p in params),
        limit=limit,
    )

    def take(value):
        if not isinstance(value, (list, tuple)) or not all(isinstance(b, (list, tuple)) for b in value):
            raise Mistake(
                _(
                    "{name} returned {value!r:.60}; return a list of buckets, each a list of indices into params",
                    name=name,
                    value=value,
                )
            )
        return [[int(i) for i in b] for b in value]

    return ask(fn, list(params), limit, name=name, advice=_advice(), take=take)


def within_limit(sizes: list[int], limit: int) -> list[list[int]]:
    """The exercise's rule (and minipipe's, traffic.buckets): last first, each bucket filled while it
    stays within `limit`; a size over the limit alone gets a bucket of its own."""
    out, size = [], 0
    for i in reversed(range(len(sizes))):
        if out and size + sizes[i] <= limit:
            out[-1].append(i)
            size += sizes[i]
        else:
            out.append([i])
            size = sizes[i]
    return out


def torch_rule(sizes: list[int], limit: int) -> list[list[int]]:
    """torch's DDP reducer (compute_bucket_assignment_by_size, torch/csrc/distributed/c10d/reducer.cpp,
    as it rebuilds the buckets after the first step, in the order the gradients became ready):
    each gradient joins the open bucket, and the bucket closes once it holds `limit` bytes or more,
    so its last gradient may take it over the limit."""
    out, size = [[]], 0
    for i in reversed(range(len(sizes))):
        out[-1].append(i)
        size += sizes[i]
        if size >= limit:
            out.append([])
            size = 0
    return [b for b in out if b]


def judge_buckets(mine: list[list[int]], params, limit: int) -> None:
    """A Mistake unless `mine` is the exercise's bucketing of `params` (all float32 here)."""
    sizes = [nbytes(p) for p in params]
    shown = _(
        "parameters of {sizes} bytes, at most {limit} bytes a bucket", sizes=", ".join(map(str, sizes)), limit=limit
    )
    flat = [i for b in mine for i in b]
    n = len(params)
    if any(not b for b in mine):
        raise Mistake(
            _(
                "{shown}: your buckets {mine} include an empty one; every bucket holds at least one gradient",
                shown=shown,
                mine=mine,
            )
        )
    if sorted(flat) != list(range(n)):
        raise Mistake(
            _(
                "{shown}: your buckets {mine} must hold every parameter's index (0 to {last}) exactly once",
                shown=shown,
                mine=mine,
                last=n - 1,
            )
        )
    if flat != list(reversed(range(n))):
        hint = (
            " "
            + _(
                "Backward computes the last layers' gradients first, so DDP fills the first bucket from the last "
                "parameter backwards: that bucket can be sent while the backward goes on."
            )
            if flat == list(range(n))
            else ""
        )
        raise Mistake(
            _(
                "{shown}: your buckets {mine} do not take the parameters last first ({last}, {before}, ..., 0).",
                shown=shown,
                mine=mine,
                last=n - 1,
                before=n - 2,
            )
            + hint
        )
    for k, b in enumerate(mine):
        size = sum(sizes[i] for i in b)
        if size > limit and len(b) > 1:
            hint = ""
            if mine == torch_rule(sizes, limit):
                hint = " " + _(
                    "That is torch's own rule: DDP's reducer adds each gradient to the open bucket and closes it "
                    "once it holds the limit or more, so a bucket's last gradient may take it over. This exercise "
                    "asks for a bucket that stays within the limit, as minipipe's do: close it before the "
                    "gradient that would not fit."
                )
            elif mine == within_limit([p.numel() for p in params], limit):
                hint = " " + _("That counts values, not bytes: a float32 gradient of n values is 4n bytes.")
            raise Mistake(
                _(
                    "{shown}: your bucket {k}, {b}, holds {size} bytes, over the limit; only a parameter larger "
                    "than the limit by itself may make a bucket that large.",
                    shown=shown,
                    k=k,
                    b=b,
                    size=size,
                )
                + hint
            )
        if k + 1 < len(mine) and size + sizes[mine[k + 1][0]] <= limit:
            fields = dict(shown=shown, k=k, b=b, size=size, nxt=mine[k + 1][0], its=sizes[mine[k + 1][0]])
            raise Mistake(
                _(
                    "{shown}: your bucket {k}, {b}, holds {size} bytes and closes although parameter {nxt} ({its} "
                    "bytes) would still fit (exactly the limit: a bucket may hold that much); fill each bucket until "
                    "the next gradient would not, so there are as few collectives as the limit allows",
                    **fields,
                )
                if size + sizes[mine[k + 1][0]] == limit
                else _(
                    "{shown}: your bucket {k}, {b}, holds {size} bytes and closes although parameter {nxt} ({its} "
                    "bytes) would still fit; fill each bucket until the next gradient would not, so there are as "
                    "few collectives as the limit allows",
                    **fields,
                )
            )


def _buckets(fn) -> str:
    todo = param_lists()
    for params, limit in todo:
        judge_buckets(_buckets_of(fn, params, limit), params, limit)
    return _("{n} parameter lists: last first, each bucket full up to the limit", n=len(todo))


# -- the model checks -----------------------------------------------------------------------
def model() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    """A small MLP (several buckets at LIMIT), a batch and its targets, the same from the seed."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        net = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 3))
        return net, torch.randn(ROWS, 6), torch.randn(ROWS, 3)


def local_grads(net, x, y, rank: int, size: int) -> list[torch.Tensor]:
    """This replica's shard of the batch, its backward: the gradients before averaging."""
    rows = slice(rank * ROWS // size, (rank + 1) * ROWS // size)
    nn.functional.mse_loss(net(x[rows]), y[rows]).backward()
    return [p for p in net.parameters()]


def whole_batch_grads() -> list[torch.Tensor]:
    net, x, y = model()
    nn.functional.mse_loss(net(x), y).backward()
    return [p.grad.clone() for p in net.parameters()]


@harness
def _replica(all_reduce_gradients, params, group, rank):
    all_reduce_gradients(params[rank], LIMIT, group)
    return [None if p.grad is None else p.grad.clone() for p in params[rank]]


def _threads_in_sandbox(all_reduce_gradients, size: int) -> dict:
    """In the sandbox: `size` replicas as threads (threads.py), each with its shard's gradients,
    then the learner's all_reduce_gradients on each; their gradients and the collectives they ran."""
    world = ThreadWorld(size)
    replicas = [model() for _ in range(size)]  # here: seeding is not thread-safe
    params = [local_grads(net, x, y, r, size) for r, (net, x, y) in enumerate(replicas)]
    results = world.run(
        functools.partial(_replica, all_reduce_gradients, params, world.group),
        learner="all_reduce_gradients",
        what=f"dp = {size}, all_reduce_gradients(params, {LIMIT}, group)",
    )
    return {"results": results, "calls": world.calls}


def _threads(buckets, all_reduce_gradients, size: int):
    got = in_sandbox(
        _threads_in_sandbox,
        [all_reduce_gradients],
        size,
        advice=_advice(),
        name=f"all_reduce_gradients(params, {LIMIT}, group)",
    )
    net, x, y = model()
    return got["results"], got["calls"], local_grads(net, x, y, 0, size)


def _averaged(buckets, all_reduce_gradients) -> str:
    right = whole_batch_grads()
    for size in (2, 3):
        results, _calls, _params = _threads(buckets, all_reduce_gradients, size)
        for rank, grads in enumerate(results):
            for i, (mine, want) in enumerate(zip(grads, right)):
                if mine is None or not torch.allclose(mine, want, rtol=RTOL, atol=ATOL):
                    hint = ""
                    if mine is not None and torch.allclose(mine, size * want, rtol=1e-4, atol=1e-6):
                        hint = " " + _(
                            "They are dp = {size} times the mean: all_reduce sums; divide by the number of "
                            "replicas (dist.get_world_size(group)), as DDP does.",
                            size=size,
                        )
                    raise Mistake(
                        _(
                            "dp = {size} (ranks as threads): after your all_reduce_gradients, rank {rank}'s "
                            "gradient of parameter {i} is not the mean over the replicas, the whole batch's.",
                            size=size,
                            rank=rank,
                            i=i,
                        )
                        + hint
                    )
    return _("dp = 2 and 3 (ranks as threads): every replica's gradients are the whole batch's, as DDP's")


def _one_per_bucket(buckets, all_reduce_gradients) -> str:
    results, all_calls, params = _threads(buckets, all_reduce_gradients, 2)
    mine = _buckets_of(buckets, params, LIMIT)
    want = [sum(params[i].numel() for i in b) for b in mine]
    for rank, calls in enumerate(all_calls):
        if calls != want:
            hint = ""
            if sorted(calls) == sorted(p.numel() for p in params):
                hint = " " + _(
                    "That is one all-reduce per parameter: flatten each bucket's gradients into one buffer first."
                )
            elif len(calls) == 1:
                hint = " " + _(
                    "That is one all-reduce of everything: send one per bucket, so the first can start early."
                )
            raise Mistake(
                _(
                    "rank {rank}'s all-reduces had {calls} values; your buckets {mine} call for one per bucket, "
                    "of {want} values, in that order.",
                    rank=rank,
                    calls=", ".join(map(str, calls)),
                    mine=mine,
                    want=", ".join(map(str, want)),
                )
                + hint
            )
    return _("{n} all-reduce(s), one per bucket, of {want} values", n=len(want), want=", ".join(map(str, want)))


def _yours_rank(work, rank, report, status):
    """Worker body (in the sandbox's workers, watched): the learner's function on this replica's shard."""
    all_reduce_gradients = pickle.loads(work)
    net, x, y = model()
    params = local_grads(net, x, y, rank, torch.distributed.get_world_size())
    return _replica(all_reduce_gradients, {rank: params}, torch.distributed.group.WORLD, rank)


def _ddp_rank(work, rank, report, status):
    """Worker body (in the judge's workers): torch's DDP on the same replica and shard."""
    from torch.nn.parallel import DistributedDataParallel

    size = torch.distributed.get_world_size()
    net, x, y = model()
    ddp = DistributedDataParallel(net, bucket_cap_mb=LIMIT / 2**20)
    rows = slice(rank * ROWS // size, (rank + 1) * ROWS // size)
    nn.functional.mse_loss(ddp(x[rows]), y[rows]).backward()
    return [p.grad.clone() for p in net.parameters()]


def _launch(work, body) -> list:
    from ...engine.diagnosis import WorkerError
    from ...engine.workers import Job, launch

    try:
        out = launch([Job(work=work, timeout=30.0, startup_timeout=120.0)], 2, body)
    except (WorkerError, ValueError) as e:
        raise Mistake(_("on 2 real processes: {error}", error=e)) from None
    return [out[(0, r)] for r in range(2)]


def _real_in_sandbox(all_reduce_gradients) -> list:
    """In the sandbox: the learner's function on 2 worker processes, which watch it as the sandbox does."""
    import cloudpickle

    try:
        work = cloudpickle.dumps(all_reduce_gradients)
    except Exception as e:
        raise Mistake(
            _(
                "all_reduce_gradients cannot be sent to worker processes ({kind}: {error})",
                kind=type(e).__name__,
                error=e,
            )
        ) from None
    return _launch(work, _yours_rank)


def _real(all_reduce_gradients) -> str:
    yours = in_sandbox(
        _real_in_sandbox, [all_reduce_gradients], name=_("all_reduce_gradients on 2 processes"), advice=_advice()
    )
    theirs = _launch(None, _ddp_rank)
    for rank in range(2):
        for i, (mine, want) in enumerate(zip(yours[rank], theirs[rank])):
            if mine is None or not torch.allclose(mine, want, rtol=RTOL, atol=ATOL):
                raise Mistake(
                    _(
                        "on 2 real processes, rank {rank}'s gradient of parameter {i} differs from torch's "
                        "DistributedDataParallel's",
                        rank=rank,
                        i=i,
                    )
                )
    return _("2 processes on gloo: the gradients of torch's DistributedDataParallel, on both ranks")


def check_data_parallel(buckets, all_reduce_gradients) -> None:
    """Check the learner's buckets(params, bucket_bytes) and all_reduce_gradients(params,
    bucket_bytes, group)."""
    verdict(
        [
            (_("the buckets"), lambda: _buckets(buckets)),
            (_("the mean of the replicas' gradients"), lambda: _averaged(buckets, all_reduce_gradients)),
            (_("one all-reduce per bucket"), lambda: _one_per_bucket(buckets, all_reduce_gradients)),
            (_("against torch's DDP on 2 processes"), lambda: _real(all_reduce_gradients)),
        ]
    )
