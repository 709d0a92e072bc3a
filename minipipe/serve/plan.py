"""A serving config checked and worked out into a Plan, before any process starts.

The fields every run shares (placement, timeouts, message order, the cut) are checked by
engine/run_checks.py's `check_engine` and engine/model_cut.py's `cut_model`, as for training; what is serving's own is
checked here: the stream or the prompts, the weights, a forward-only schedule. A stream's plan
runs the "inference" schedule over its micro-batches; a generation's runs it once per new token,
each round fed the tokens of the one before (schedule/rounds.py).
"""

from __future__ import annotations

import torch
from torch import nn

from ..engine.config import Plan
from ..engine.model_cut import cut_model, layer_shapes, stage_outputs
from ..engine.run_checks import check_engine
from ..models.catalog import make_task, task_of
from ..parallel.mesh import Mesh
from ..schedule.ir import Schedule
from ..schedule.kinds import make_schedule
from ..schedule.rounds import repeat
from ..sim.request_stream import Stream
from .config import GenerateConfig, ServeConfig
from .work import GenerationWork, StreamWork


def prepare(config) -> Plan:
    """Check a ServeConfig or a GenerateConfig and work out its plan; ValueError says what to change."""
    if not isinstance(config, (ServeConfig, GenerateConfig)):
        raise ValueError(f"expected a ServeConfig or a GenerateConfig, got {type(config).__name__}")
    c = config
    generating = isinstance(c, GenerateConfig)
    fewer = None
    if not generating:
        c, fewer = _at_most(c, c.stream.requests, "request")  # c.stream checks microbatch, requests, rate, arrivals
    stream = None if generating else c.stream
    if generating:
        _whole("microbatch (sequences per micro-batch)", c.microbatch)
        _whole("new_tokens", c.new_tokens)
    mesh = Mesh(c.p, tp=c.tp)
    c, where = check_engine(c, mesh.world)
    task = task_of(c)
    layers = task.layers()
    _load(layers, c.state)
    if generating:
        vocab, block = _language(task, "generation")
        prompts = _prompts(c, vocab, block)
        c, fewer = _at_most(c, len(prompts), "prompt")
        per_round = -(-len(prompts) // c.microbatch)
        one_round = _forward_only(c, per_round)
        schedule, rows = repeat(one_round, c.new_tokens), _padded(prompts, per_round * c.microbatch)
    else:
        schedule, rows = (
            _forward_only(c, stream.n_microbatches),
            _padded(_inputs(c, task, stream.requests), stream.n_microbatches * stream.microbatch),
        )
        _check_waits(stream, c.timeout)
    cut, through = cut_model(c, schedule, layers, rows[: c.microbatch], where)
    if generating:
        work = GenerationWork(rows, len(prompts), c.new_tokens, per_round, block)
        work.shapes_by_length = {
            t: stage_outputs(cut, layer_shapes(layers, torch.zeros(c.microbatch, t, dtype=torch.long)))
            for t in {work.length(r) for r in range(c.new_tokens)}
        }
        shapes = work.shape_of
    else:
        work, shapes = StreamWork(stream, rows, c.keep_outputs), stage_outputs(cut, through)
    note = "\n".join(n for n in (where.note, fewer) if n) or None
    return Plan(
        c,
        schedule,
        cut,
        shapes,
        where.device,
        where.backend,
        gpus=where.gpus,
        note=note,
        mesh=mesh,
        layer_shapes=through,
        state=c.state,
        work=work,
    )


def _at_most(c, n: int, what: str):
    """A micro-batch holds at most all `n` requests (or prompts): a larger microbatch would pad it
    with rows nobody asked for, time those, and report micro-batches of a size that never ran.
    Returns the config with microbatch <= n, and what to tell the user (None: nothing changed)."""
    if c.microbatch <= n:
        return c, None
    return c.replace(microbatch=n), (
        f"microbatch={c.microbatch} is more than the {n} {what}{'s' if n != 1 else ''}: "
        f"serving them as one micro-batch of {n}"
    )


def _whole(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _forward_only(c, m: int) -> Schedule:
    schedule = make_schedule(c.schedule, c.p, m, c.v)
    if not schedule.forward_only:
        raise ValueError(
            f"serving runs a forward-only schedule, and {schedule.kind} has a backward (it trains); "
            f"use schedule='inference'"
        )
    return schedule


def _padded(rows: torch.Tensor, n: int) -> torch.Tensor:
    """`rows` and copies of its last row, n in all: whole micro-batches."""
    return torch.cat([rows, rows[-1:].expand(n - len(rows), *rows.shape[1:])]).contiguous()


def _check_waits(stream: Stream, timeout: float) -> None:
    """Stage 0 waits for a micro-batch's requests; its neighbours wait for it meanwhile."""
    ready = stream.ready_ms()
    waits = [b - a for a, b in zip([0.0] + ready, ready)]
    worst = max(range(len(waits)), key=waits.__getitem__)
    if waits[worst] >= 1000 * timeout / 2:
        raise ValueError(
            f"micro-batch {worst} waits {waits[worst] / 1000:.3g} s for its "
            f"{len(stream.members(worst))} requests to arrive, "
            f"and a rank waiting that long for data would pass timeout={timeout:g} s; raise rate or "
            f"timeout, or lower microbatch"
        )


def _load(layers: list[nn.Module], state) -> None:
    """Load trained weights into the layers, or say why they do not fit."""
    if state is None:
        return
    if not isinstance(state, dict):
        raise ValueError(f"state must be a state_dict (e.g. RunResult.state), got {type(state).__name__}")
    try:
        nn.Sequential(*layers).load_state_dict(state)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:400]
        raise ValueError(
            f"state does not fit this model ({detail}); serve with the model and model_args it was trained with"
        ) from None


def _language(task, what: str) -> tuple[int, int]:
    vocab, block = getattr(task, "vocab", None), getattr(task, "block", None)
    if not (isinstance(vocab, int) and isinstance(block, int)):
        raise ValueError(
            f"{what} needs a language model with a vocabulary and a context window (vocab and block), "
            f"such as the course's gpt; {task.name} has none"
        )
    return vocab, block


def _check_tokens(tokens: torch.Tensor, vocab: int, block: int, what: str) -> None:
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(
            f"{what} must be token sequences, one per row, of one length >= 1; got shape {tuple(tokens.shape)}"
        )
    if tokens.shape[1] > block:
        raise ValueError(
            f"{what} are {tokens.shape[1]} tokens long, longer than the model's context of {block} "
            f"tokens; shorten them to at most {block} (or train a model with a larger block)"
        )
    bad = tokens[(tokens < 0) | (tokens >= vocab)]
    if len(bad):
        raise ValueError(
            f"{what} hold the token {bad[0].item()}, which is not in the vocabulary: tokens are 0..{vocab - 1}"
        )


def _prompts(c, vocab: int, block: int) -> torch.Tensor:
    if c.prompts is None:
        x, _ = make_task(c.model, batch_size=4, seed=c.seed, **c.model_args).batch(0)
        return x[:, : min(4, block)].clone()
    prompts = c.prompts
    if not torch.is_tensor(prompts):
        rows = [list(p) if isinstance(p, (list, tuple)) else p for p in prompts]
        if not rows or any(not isinstance(r, list) for r in rows):
            raise ValueError("prompts must be a list of token lists, e.g. [[1, 3, 5], [2, 4, 6]]")
        if len({len(r) for r in rows}) > 1:
            raise ValueError(
                f"prompts must all have one length (the model has no padding mask); got lengths "
                f"{sorted({len(r) for r in rows})}"
            )
        if any(isinstance(t, bool) or not isinstance(t, int) for r in rows for t in r):
            raise ValueError("prompts must hold token ids (whole numbers)")
        prompts = torch.tensor(rows, dtype=torch.long)
    elif prompts.is_floating_point():
        raise ValueError("prompts must hold token ids (an integer tensor)")
    _check_tokens(prompts, vocab, block, "prompts")
    return prompts.long()


def _inputs(c, task, n: int) -> torch.Tensor:
    """The requests' rows: the caller's, checked, or the model's own data."""
    sample, _ = task.batch(0)
    if c.inputs is None:
        rows, step = [], 0
        while sum(len(r) for r in rows) < n:
            rows.append(task.batch(step)[0])
            step += 1
        return torch.cat(rows)[:n]
    inputs = c.inputs
    if not torch.is_tensor(inputs) or inputs.dim() < 1 or len(inputs) < 1:
        raise ValueError("inputs must be a tensor with one row per request")
    vocab, block = getattr(task, "vocab", None), getattr(task, "block", None)
    if isinstance(vocab, int) and isinstance(block, int):
        if inputs.is_floating_point():
            raise ValueError("inputs to a language model are token ids (an integer tensor)")
        _check_tokens(inputs, vocab, block, "inputs")
        return inputs.long()
    if inputs.shape[1:] != sample.shape[1:] or inputs.dtype != sample.dtype:
        raise ValueError(
            f"inputs rows must look like the model's own: shape (n, {', '.join(map(str, sample.shape[1:]))})"
            f" of {sample.dtype}; got {tuple(inputs.shape)} of {inputs.dtype}"
        )
    return inputs
