"""Exercise: tensor parallelism's f and g. The learner writes Megatron's two conjugate autograd
functions: f (identity forward, all-reduce backward), before a column-parallel Linear, and g
(all-reduce forward, identity backward), after a row-parallel one. The checker splits an MLP
block (Linear, GeLU, Linear) over tp ranks around them and compares the output and every gradient
with the unsplit block's on one process: first with the ranks as threads here (ThreadWorld: quick,
and it counts the collectives), then on 2 real processes on gloo. The engine's own f and g
(minipipe.parallel.tensor) are not on the exercise's list (ALLOWED). The learner's classes run in the
sandbox (grading/): the threads' world and the workers of the real run are started there (workers
that watch the learner's code as the sandbox does), and the judge compares what comes back with the
unsplit block it computes itself."""

from __future__ import annotations

import functools
import pickle

import torch
from torch import nn
from torch.nn import functional as F

from ..grading.harness import harness
from ..i18n.messages import say as _
from .guard import in_sandbox
from .in_place import why_not_in_place
from .threads import ThreadWorld
from .verdict import Mistake, verdict

# what the learner's code may call while the check calls it (grading/watch.py): nothing of minipipe's
# (torch's autograd and torch.distributed are theirs); GIVEN: the checker's block and shards, which the
# given cell hands out for the learner's cells to try f and g on
ALLOWED = ()
GIVEN = ("minipipe.course.exercises.tensor_parallel.block", "minipipe.course.exercises.tensor_parallel.shard_of")
WIDTH, HIDDEN, ROWS, SEED = 8, 32, 6, 11
NAMES = ("x", "fc.weight", "fc.bias", "out.weight", "out.bias")
RTOL, ATOL = 1e-5, 1e-6


def block() -> tuple[nn.Linear, nn.Linear, torch.Tensor, torch.Tensor]:
    """The unsplit block's two Linears, an input and a target, the same from the seed on every rank."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        fc, out = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, WIDTH)
        return fc, out, torch.randn(ROWS, WIDTH), torch.randn(ROWS, WIDTH)


def unsplit() -> dict[str, torch.Tensor]:
    """The reference: the whole block on one process, its output and gradients."""
    fc, out, x, target = block()
    x = x.clone().requires_grad_()
    y = out(F.gelu(fc(x)))
    F.mse_loss(y, target).backward()
    return {
        "y": y.detach(),
        "x": x.grad,
        "fc.weight": fc.weight.grad,
        "fc.bias": fc.bias.grad,
        "out.weight": out.weight.grad,
        "out.bias": out.bias.grad,
    }


def shard_of(rank: int, size: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s leaves: the whole input, its rows of fc (output features) and columns of out
    (input features), and out's bias whole."""
    fc, out, x, _target = block()
    k = HIDDEN // size
    part = slice(rank * k, (rank + 1) * k)
    leaves = {
        "x": x,
        "fc.weight": fc.weight[part],
        "fc.bias": fc.bias[part],
        "out.weight": out.weight[:, part],
        "out.bias": out.bias,
    }
    return {name: t.detach().clone().requires_grad_() for name, t in leaves.items()}


@harness
def run_rank(copy, reduce, t: dict, target, group=None, calls: list | None = None) -> dict:
    """One rank's forward and backward of the split block (its leaves `t`, from shard_of), with the
    learner's f (copy) and g (reduce) on `group`. "in_place" lists what f or g changed of the
    tensors they were given (their inputs, the gradients handed to their backwards)."""
    given = []  # (what, tensor, its values and version when given)

    def keep(what, tensor):
        given.append((what, tensor, tensor.detach().clone(), tensor._version))

    def keep_grad(what, tensor):
        if tensor.requires_grad:
            tensor.register_hook(lambda grad: keep(what, grad))

    keep("f's input", t["x"])
    into_fc = copy.apply(t["x"], group)
    keep_grad("the gradient handed to f's backward", into_fc)
    partial = F.linear(F.gelu(F.linear(into_fc, t["fc.weight"], t["fc.bias"])), t["out.weight"])
    keep("g's input", partial)
    summed = reduce.apply(partial, group)
    keep_grad("the gradient handed to g's backward", summed)
    y = summed + t["out.bias"]
    in_forward = len(calls) if calls is not None else None
    F.mse_loss(y, target).backward()
    grads = {name: (None if leaf.grad is None else leaf.grad.detach()) for name, leaf in t.items()}
    changed = [
        what
        for what, tensor, values, version in given
        if tensor._version != version or not torch.equal(tensor.detach(), values)
    ]
    return {"y": y.detach(), **grads, "in_forward": in_forward, "in_place": changed}


def _real_rank(work, rank, report, status):
    """Worker body: the learner's f and g, sent by value, on the real process group."""
    copy, reduce = pickle.loads(work)
    return run_rank(
        copy,
        reduce,
        shard_of(rank, torch.distributed.get_world_size()),
        block()[3],
        group=torch.distributed.group.WORLD,
    )


@harness
def _is_function(obj, which: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, torch.autograd.Function)):
        raise Mistake(
            _(
                "{which} is {kind} {obj!r:.60}; write it as a class of torch.autograd.Function with "
                "two static methods, forward(ctx, x, group) and backward(ctx, grad)",
                which=which,
                kind=type(obj).__name__,
                obj=obj,
            )
        )
    if obj.forward is torch.autograd.Function.forward or obj.backward is torch.autograd.Function.backward:
        raise Mistake(
            _("{which} needs both static methods, forward(ctx, x, group) and backward(ctx, grad)", which=which)
        )


@harness
def _rank(copy, reduce, shards, target, world, rank):
    return run_rank(copy, reduce, shards[rank], target, group=world.group, calls=world.calls[rank])


def _threads_in_sandbox(copy, reduce, size: int, count: bool = False) -> dict:
    """In the sandbox: the split block on `size` ranks as threads (threads.py), with the learner's f
    and g; each rank's output and gradients, and the collectives each ran."""
    _is_function(copy, "f (Copy)")
    _is_function(reduce, "g (Reduce)")
    counts: list = []
    if count:
        copy, reduce = _counting(copy, counts), _counting(reduce, counts)
    world = ThreadWorld(size)
    shards, target = [shard_of(r, size) for r in range(size)], block()[3]  # here: seeding is not thread-safe
    try:
        results = world.run(
            functools.partial(_rank, copy, reduce, shards, target, world), what=f"tp = {size}", learner=_("f or g")
        )
    except Mistake as e:
        if any(n != 2 for n in counts):
            raise Mistake(
                _(
                    "{error}. A backward returns one gradient per input of its forward: forward(ctx, x, group) "
                    "takes two, so return (grad, None), nothing for the group",
                    error=e,
                )
            ) from None
        raise
    return {"results": results, "calls": world.calls}


def _threads(copy, reduce, size: int, count: bool = False):
    got = in_sandbox(
        _threads_in_sandbox,
        [copy, reduce],
        size,
        count,
        name=_("your f or g"),
        advice=_("write the two autograd functions yourself, with torch.distributed.all_reduce"),
    )
    return got["results"], got["calls"]


@harness
def _counting(fn, counts: list):
    """The learner's autograd function, noting how many gradients each of its backwards returns."""

    class Counted(fn):
        @staticmethod
        def backward(ctx, *grads):
            out = fn.backward(ctx, *grads)
            counts.append(len(out) if isinstance(out, tuple) else 1)
            return out

    Counted.__name__ = Counted.__qualname__ = fn.__name__
    return Counted


def _one_rank(copy, reduce) -> str:
    results, _calls = _threads(copy, reduce, 1, count=True)
    _compare(results, 1, _("tp = 1 (every all-reduce sums one tensor)"))
    return _("one rank: the unsplit block's output and gradients")


def _compare(results, size: int, where: str, only=None) -> None:
    right = unsplit()
    k = HIDDEN // size
    for rank, mine in enumerate(results):
        part = slice(rank * k, (rank + 1) * k)
        want = {
            "y": right["y"],
            "x": right["x"],
            "fc.weight": right["fc.weight"][part],
            "fc.bias": right["fc.bias"][part],
            "out.weight": right["out.weight"][:, part],
            "out.bias": right["out.bias"],
        }
        for name in only or want:
            got = mine[name]
            if got is None:
                raise Mistake(
                    _(
                        "{where}: rank {rank}'s {name} got no gradient; f and g must pass gradients on (backward "
                        "returns a tensor for x)",
                        where=where,
                        rank=rank,
                        name=name,
                    )
                )
            if not torch.allclose(got, want[name], rtol=RTOL, atol=ATOL):
                hint = _hint(name, got, want[name], size)
                raise Mistake(
                    _(
                        "{where}: rank {rank}'s {what} differs from the unsplit block's.",
                        where=where,
                        rank=rank,
                        what=_what(name),
                    )
                    + hint
                )


def _what(name: str) -> str:
    if name == "y":
        return _("output")
    if name in ("fc.weight", "fc.bias", "out.weight"):
        return _("gradient of {name} (its slice)", name=name)
    return _("gradient of {name}", name=name)


def _hint(name: str, got, want, size: int) -> str:
    ratio = float((got * want).sum() / (want * want).sum())
    if abs(ratio - size) < 1e-3 * size:
        return (
            " "
            + _(
                "It is tp = {size} times too large: a sum over the ranks of what each rank already has whole.",
                size=size,
            )
            + " "
            + (
                _("g's backward is the identity: every rank's partial product gets the whole output's gradient.")
                if name != "y"
                else _("Sum the partial products once, in g's forward.")
            )
        )
    if name == "y":
        return " " + _(
            "Each rank holds only its partial product x_i A_iᵀ of the row-parallel Linear: g's forward must sum them "
            "over the ranks (all-reduce), so that every rank has the whole output."
        )
    if name == "x":
        return " " + _(
            "Each rank's gradient of the input is only its share, from its own output features: f's backward "
            "must sum the shares over the ranks (all-reduce)."
        )
    return ""


def _forward(copy, reduce) -> str:
    results, _calls = _threads(copy, reduce, 2)
    _compare(results, 2, _("tp = 2, in threads"), only=("y",))
    return _("tp = 2 (ranks as threads): the unsplit block's output on every rank")


def _backward(copy, reduce) -> str:
    results, _calls = _threads(copy, reduce, 2)
    _compare(results, 2, _("tp = 2, in threads"))
    return _("and its gradients: the whole input's, and each rank's slice of the weights'")


def _left_as_given(results, where: str) -> None:
    for rank, mine in enumerate(results):
        if mine["in_place"]:
            raise Mistake(
                _("{where}, rank {rank}: {why}", where=where, rank=rank, why=why_not_in_place()[mine["in_place"][0]])
            )


def _untouched(copy, reduce) -> str:
    results, _calls = _threads(copy, reduce, 2)
    _left_as_given(results, _("tp = 2, in threads"))
    return _("their inputs, and the gradients handed to their backwards, left as they were")


def _talk(copy, reduce) -> str:
    results, all_calls = _threads(copy, reduce, 2)
    for rank, (mine, calls) in enumerate(zip(results, all_calls)):
        forward, backward = mine["in_forward"], len(calls) - mine["in_forward"]
        if (forward, backward) != (1, 1):
            extra = ""
            if forward > 1 or backward > 1:
                which = (
                    _("the forward: f's forward is the identity, only g's sums")
                    if forward > 1
                    else _("the backward: g's backward is the identity, only f's sums")
                )
                extra = " " + _(
                    "The values are right, so the extra all-reduce sums what every rank already holds whole "
                    "(and divides it back): traffic for nothing, in {which}.",
                    which=which,
                )
            raise Mistake(
                _(
                    "rank {rank} ran {forward} all-reduce(s) in the forward and {backward} in the backward; "
                    "Megatron's pair needs one each: g's in the forward (the partial products), f's in the "
                    "backward (the input gradient's shares).",
                    rank=rank,
                    forward=forward,
                    backward=backward,
                )
                + extra
            )
    return _(
        "one all-reduce in the forward (g), one in the backward (f), of {n} values each", n=results[0]["y"].numel()
    )


def _real_in_sandbox(copy, reduce) -> list:
    """In the sandbox: the split block on 2 worker processes (gloo), which watch the learner's f
    and g as the sandbox does; each rank's output and gradients."""
    import cloudpickle

    from ...engine.diagnosis import WorkerError
    from ...engine.workers import Job, launch

    try:
        work = cloudpickle.dumps((copy, reduce))
    except Exception as e:
        raise Mistake(
            _("f and g cannot be sent to worker processes ({kind}: {error})", kind=type(e).__name__, error=e)
        ) from None
    try:
        out = launch([Job(work=work, timeout=30.0, startup_timeout=120.0)], 2, _real_rank)
    except (WorkerError, ValueError) as e:
        raise Mistake(_("on 2 real processes: {error}", error=e)) from None
    return [out[(0, r)] for r in range(2)]


def _real(copy, reduce) -> str:
    results = in_sandbox(_real_in_sandbox, [copy, reduce], name=_("your f and g on 2 processes"))
    _compare(results, 2, _("tp = 2 on 2 real processes (gloo)"))
    _left_as_given(results, _("tp = 2 on 2 real processes (gloo)"))
    return _("2 processes on gloo: the unsplit block's output and gradients")


def check_tensor_parallel(copy, reduce) -> None:
    """Check the learner's f (copy: identity forward, all-reduce backward) and g (reduce:
    all-reduce forward, identity backward) around a split MLP block."""
    verdict(
        [
            (_("f and g on one rank"), lambda: _one_rank(copy, reduce)),
            (_("the split block's forward"), lambda: _forward(copy, reduce)),
            (_("the split block's backward"), lambda: _backward(copy, reduce)),
            (_("what f and g are given, left as it was"), lambda: _untouched(copy, reduce)),
            (_("the collectives"), lambda: _talk(copy, reduce)),
            (_("on 2 real processes"), lambda: _real(copy, reduce)),
        ]
    )
