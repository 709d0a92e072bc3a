"""Serving through a pipeline, on real processes: a stream of requests, or generation token by token.

    from minipipe import run, RunConfig
    from minipipe.serve.api import ServeConfig, GenerateConfig, serve, generate

    trained = run(RunConfig(model="gpt", p=2, steps=50))
    served = serve(ServeConfig(state=trained.state, p=2, microbatch=4, requests=64, rate=2000))
    print(served.summary())       # latency p50 / p95 / p99 and throughput
    served.trace                  # the measured timeline: a Trace, drawn by minipipe.viz like any other
    served.predicted()            # the same stream on the cost model (serve_sim.py), fitted on this run

    out = generate(GenerateConfig(state=trained.state, p=2, prompts=[[1, 3, 5], [2, 4, 6]], new_tokens=8))
    out.sequences, out.time_per_token_ms

A request stream (`serve`): requests arrive all at once or at a rate, micro-batches of
`microbatch` requests walk through the stages of the forward-only "inference" schedule, and a
micro-batch enters stage 0 as soon as its requests have arrived and stage 0 is free. Each
request's latency is the time from its arrival to its micro-batch's output on the last stage.
The model runs in eval mode under torch.inference_mode: nothing is kept for a backward, no
optimizer exists.

Generation (`generate`): greedy, token by token. The prompts are cut into micro-batches of
`microbatch` sequences; each round every micro-batch goes once through the pipeline, the last
stage picks each sequence's next token and sends it back to stage 0, which appends it for the
next round. With several micro-batches in flight the stages overlap: while stage 1 works on
micro-batch 0, stage 0 already runs micro-batch 1. No key/value cache: each round re-runs the
whole context (its last `block` tokens, the model's window), so a round costs the prompt and
everything generated so far, not one token. The token goes back over gloo (on NCCL runs, a
small gloo group of its own), so its message never queues behind the activations.

`serve_many` runs several configurations (same number of processes) in one group of processes:
starting one costs seconds. The processes, their watchdog and their errors are workers.py's: a
worker that raises, dies or hangs stops the run with a WorkerError naming the rank, and no
process is left behind. Every check below runs before any process starts.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from ..engine import placement, workers
from ..engine.config import check_cores, check_timeouts, layer_shapes
from ..engine.launch import tell
from ..engine.partition import Partition, partition
from ..engine.workers import Job, WorkerError
from ..models.catalog import make_task
from ..models.custom import sendable
from ..parallel.mesh import Mesh
from ..parallel.tensor import check_tensor_parallel
from ..schedule.ir import Schedule
from ..schedule.kinds import make_schedule
from ..schedule.validate import validate
from ..sim.serving import ServeCosts, Stream, StreamResult, result_of, simulate_serving
from ..trace import Event, Trace, Wait

__all__ = ["ServeConfig", "GenerateConfig", "serve", "generate", "serve_many", "StreamResult", "GenerateResult",
           "Stream", "ServeCosts", "simulate_serving", "WorkerError"]


@dataclass
class Serving:
    """What every serving run shares: the model and its weights, how it is cut, where it runs."""

    model: str | Callable = "gpt"       # gpt | mlp | your own (see custom.py)
    model_args: dict = field(default_factory=dict)
    seed: int = 0
    state: dict | None = None           # weights, named as nn.Sequential(*task.layers()) names them:
                                        # RunResult.state. None: the seed's initial (untrained) weights
    p: int = 2                          # pipeline ranks
    v: int | None = None                # stages per rank (default 1)
    tp: int = 1                         # tensor-parallel shards of every layer; processes = p · tp
    schedule: str = "inference"         # a forward-only kind
    partition: str = "uniform"          # uniform | params | time
    device: str = "auto"                # auto | cpu | cuda
    backend: str = "auto"               # auto | gloo | nccl
    timeout: float = 60.0               # seconds any wait for a peer may take
    startup_timeout: float = 300.0
    threads: int = 1                    # torch threads per rank
    pin_cores: bool = True
    oversubscribe: bool = False

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass
class ServeConfig(Serving):
    """A stream of requests; see serve_sim.Stream for how they arrive and are grouped."""

    requests: int = 32
    microbatch: int = 4                 # requests per micro-batch
    rate: float | None = None           # requests per second; None: all at once
    arrivals: str = "even"              # even | poisson
    inputs: Any = None                  # a tensor, one row per request; None: rows of the model's own data
    keep_outputs: bool = True           # bring every request's output back (False: only the times)

    @property
    def stream(self) -> Stream:
        n = len(self.inputs) if self.inputs is not None else self.requests
        return Stream(n, self.microbatch, self.rate, self.arrivals, self.seed)


@dataclass
class GenerateConfig(Serving):
    """Greedy generation: `new_tokens` tokens after each prompt."""

    prompts: Any = None                 # lists of token ids, all of one length; None: 4 prompts of 4 tokens
                                        # from the model's own data
    new_tokens: int = 8
    microbatch: int = 1                 # sequences per micro-batch; more micro-batches, more overlap


@dataclass
class ServePlan:
    """What the workers need: everything checked and worked out before they start."""

    config: Serving
    mesh: Mesh
    schedule: Schedule                  # forward-only; for generation, one round after another
    partition: Partition
    device: str
    backend: str
    gpus: tuple[int, ...] = ()
    note: str | None = None
    stream: Stream | None = None        # a request stream ...
    inputs: torch.Tensor | None = None  # ... its rows, padded to whole micro-batches
    shapes: list = field(default_factory=list)   # (shape, dtype) of each stage's output, one micro-batch
    prompts: torch.Tensor | None = None  # generation: [sequences padded to whole micro-batches, prompt length]
    sequences: int = 0                  # generation: how many prompts (the rest of `prompts` is padding)
    rounds: int = 0                     # tokens to generate
    per_round: int = 0                  # micro-batches in flight
    block: int = 0                      # the model's context window
    shapes_by_length: dict = field(default_factory=dict)   # context length -> shapes

    @property
    def world(self) -> int:
        return self.mesh.world

    @property
    def in_order(self) -> bool:
        return self.backend != "gloo"

    @property
    def microbatch(self) -> int:
        return self.config.microbatch


@dataclass
class GenerateResult:
    config: GenerateConfig
    prompts: list[list[int]]
    tokens: list[list[int]]             # per prompt: the new tokens
    token_ms: list[list[float]]         # per prompt: when each new token came out of the last stage
    trace: Trace                        # the measured timeline, one round after another
    p: int = 1
    v: int = 1
    tp: int = 1

    @property
    def sequences(self) -> list[list[int]]:
        return [prompt + new for prompt, new in zip(self.prompts, self.tokens)]

    @property
    def first_token_ms(self) -> float:
        """Median time from the start to a prompt's first new token."""
        return statistics.median(times[0] for times in self.token_ms)

    @property
    def time_per_token_ms(self) -> float:
        """Median time between two tokens of one sequence."""
        gaps = [b - a for times in self.token_ms for a, b in zip(times, times[1:])]
        return statistics.median(gaps) if gaps else math.nan

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * sum(map(len, self.tokens)) / max(t for times in self.token_ms for t in times)

    def summary(self) -> str:
        layout = f"p={self.p}" + (f" v={self.v}" if self.v > 1 else "") + (f" tp={self.tp}" if self.tp > 1 else "")
        lines = [f"generated {len(self.tokens)} × {len(self.tokens[0])} tokens, {layout}, micro-batches of "
                 f"{self.config.microbatch}: first token {self.first_token_ms:.2f} ms, then "
                 f"{self.time_per_token_ms:.2f} ms per token ({self.tokens_per_s:,.0f} tokens/s in all)"]
        lines += [f"  {' '.join(map(str, prompt))} | {' '.join(map(str, new))}"
                  for prompt, new in zip(self.prompts, self.tokens)]
        return "\n".join(lines)


# -- the front doors -------------------------------------------------------------------------
def serve(config: ServeConfig | None = None, progress: Callable[[dict], None] | None = None, **changes) -> StreamResult:
    """Serve a stream of requests on p·tp local processes; see the module docstring. `progress`
    hears {"kind": "served", "mb": ..., "ms": ...} as each micro-batch's results come out."""
    config = (config or ServeConfig()).replace(**changes) if changes or config is None else config
    return serve_many([config], progress)[0]


def generate(config: GenerateConfig | None = None, progress: Callable[[dict], None] | None = None,
             **changes) -> GenerateResult:
    """Greedy generation through the pipeline; `progress` hears {"kind": "token", "round": r,
    "sequences": [...], "tokens": [...], "ms": ...} as each micro-batch's next tokens come out."""
    config = (config or GenerateConfig()).replace(**changes) if changes or config is None else config
    return serve_many([config], progress)[0]


def serve_many(configs: list[Serving], progress=None) -> list:
    """Several serving runs (streams and generations) with the same number of processes, in one
    group of processes."""
    if not configs:
        return []
    plans = [prepare(c) for c in configs]
    first = plans[0]
    if any((pl.world, pl.backend, pl.gpus) != (first.world, first.backend, first.gpus) for pl in plans):
        raise ValueError("serve_many needs the same number of processes (p·tp), device and backend for every "
                         "config; split them into separate calls")
    tell(first.note, progress)
    from .worker import serve_rank

    jobs = [Job(pl, pl.backend, pl.gpus, pl.config.pin_cores and pl.device == "cpu", pl.config.timeout,
                pl.config.startup_timeout, pl.schedule, pl.mesh) for pl in plans]
    results = workers.launch(jobs, first.world, serve_rank, progress)
    return [collect(pl, [results[(j, r)] for r in range(first.world)]) for j, pl in enumerate(plans)]


# -- every check, before a process starts ----------------------------------------------------
def prepare(config: Serving) -> ServePlan:
    """Check a serving config and work out its plan; ValueError says what to change."""
    if not isinstance(config, (ServeConfig, GenerateConfig)):
        raise ValueError(f"expected a ServeConfig or a GenerateConfig, got {type(config).__name__}")
    c = config
    generating = isinstance(c, GenerateConfig)
    stream = None if generating else c.stream           # checks microbatch, requests, rate, arrivals
    if generating:
        _whole("microbatch (sequences per micro-batch)", c.microbatch)
        _whole("new_tokens", c.new_tokens)
    check_timeouts(c)
    if not isinstance(c.threads, int) or c.threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {c.threads!r}")
    c = c.replace(model=sendable(c.model))
    task = make_task(c.model, batch_size=c.microbatch, seed=c.seed, **c.model_args)
    layers = task.layers()
    _load(layers, c.state)
    check_tensor_parallel(layers, c.tp)
    mesh = Mesh(c.p, 1, c.tp)
    where = placement.place(mesh.world, placement.visible_gpus(), c.device, c.backend)
    if where.device == "cpu":
        check_cores(mesh.world, c.oversubscribe)
    if where.backend == "nccl" and not torch.distributed.is_nccl_available():
        raise ValueError("this torch build has no NCCL; use backend='gloo'")
    plan = dict(mesh=mesh, device=where.device, backend=where.backend, gpus=where.gpus, note=where.note)
    if generating:
        return _plan_generation(c, task, layers, plan)
    return _plan_stream(c, stream, task, layers, plan)


def _plan_stream(c: ServeConfig, stream: Stream, task, layers, plan: dict) -> ServePlan:
    inputs = _inputs(c, task, stream.requests)
    schedule = _forward_only(c, stream.n_microbatches, len(layers))
    k = stream.microbatch
    padded = torch.cat([inputs, inputs[-1:].expand(stream.n_microbatches * k - len(inputs), *inputs.shape[1:])])
    sample = padded[:k]
    cut = _cut(c, layers, schedule.n_stages, sample)
    through = layer_shapes(layers, sample)
    ready = stream.ready_ms()
    waits = [b - a for a, b in zip([0.0] + ready, ready)]
    worst = max(range(len(waits)), key=waits.__getitem__)
    if waits[worst] >= 1000 * c.timeout / 2:
        raise ValueError(f"micro-batch {worst} waits {waits[worst] / 1000:.3g} s for its "
                         f"{len(stream.members(worst))} requests to arrive, "
                         f"and a rank waiting that long for data would pass timeout={c.timeout:g} s; raise rate or "
                         f"timeout, or lower microbatch")
    return ServePlan(c, schedule=schedule, partition=cut, stream=stream, inputs=padded.contiguous(),
                     shapes=[through[cut.bounds[s + 1]] for s in range(cut.n_stages)], **plan)


def _plan_generation(c: GenerateConfig, task, layers, plan: dict) -> ServePlan:
    vocab, block = _language(task, "generation")
    prompts = _prompts(c, vocab, block)
    k, n = c.microbatch, len(prompts)
    per_round = -(-n // k)
    one_round = _forward_only(c, per_round, len(layers))
    lists = [[a._replace(mb=r * per_round + a.mb) for r in range(c.new_tokens) for a in acts]
             for acts in one_round.actions]
    schedule = validate(Schedule.build(one_round.kind, one_round.p, per_round * c.new_tokens, one_round.v, lists,
                                       one_round.placement))
    padded = torch.cat([prompts, prompts[-1:].expand(per_round * k - n, prompts.shape[1])])
    cut = _cut(c, layers, schedule.n_stages, padded[:k])
    lengths = {min(prompts.shape[1] + r, block) for r in range(c.new_tokens)}
    by_length = {t: layer_shapes(layers, torch.zeros(k, t, dtype=torch.long)) for t in lengths}
    return ServePlan(c, schedule=schedule, partition=cut, prompts=padded.contiguous(), sequences=n, rounds=c.new_tokens,
                     per_round=per_round, block=block,
                     shapes_by_length={t: [through[cut.bounds[s + 1]] for s in range(cut.n_stages)]
                                       for t, through in by_length.items()}, **plan)


def _whole(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _forward_only(c: Serving, m: int, n_layers: int) -> Schedule:
    schedule = make_schedule(c.schedule, c.p, m, c.v, n_layers=n_layers)
    if not schedule.forward_only:
        raise ValueError(f"serving runs a forward-only schedule, and {schedule.kind} has a backward (it trains); "
                         f"use schedule='inference'")
    return schedule


def _cut(c: Serving, layers, n_stages: int, sample: torch.Tensor) -> Partition:
    return partition(layers, n_stages, c.partition, **({"sample_input": sample} if c.partition == "time" else {}))


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
        raise ValueError(f"state does not fit this model ({detail}); serve with the model and model_args it was "
                         f"trained with") from None


def _language(task, what: str) -> tuple[int, int]:
    vocab, block = getattr(task, "vocab", None), getattr(task, "block", None)
    if not (isinstance(vocab, int) and isinstance(block, int)):
        raise ValueError(f"{what} needs a language model with a vocabulary and a context window (vocab and block), "
                         f"such as the course's gpt; {task.name} has none")
    return vocab, block


def _check_tokens(tokens: torch.Tensor, vocab: int, block: int, what: str) -> None:
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"{what} must be token sequences, one per row, of one length >= 1; got shape "
                         f"{tuple(tokens.shape)}")
    if tokens.shape[1] > block:
        raise ValueError(f"{what} are {tokens.shape[1]} tokens long, longer than the model's context of {block} "
                         f"tokens; shorten them to at most {block} (or train a model with a larger block)")
    bad = tokens[(tokens < 0) | (tokens >= vocab)]
    if len(bad):
        raise ValueError(f"{what} hold the token {bad[0].item()}, which is not in the vocabulary: tokens are "
                         f"0..{vocab - 1}")


def _prompts(c: GenerateConfig, vocab: int, block: int) -> torch.Tensor:
    if c.prompts is None:
        x, _ = make_task(c.model, batch_size=4, seed=c.seed, **c.model_args).batch(0)
        return x[:, :min(4, block)].clone()
    prompts = c.prompts
    if not torch.is_tensor(prompts):
        rows = [list(p) if isinstance(p, (list, tuple)) else p for p in prompts]
        if not rows or any(not isinstance(r, list) for r in rows):
            raise ValueError("prompts must be a list of token lists, e.g. [[1, 3, 5], [2, 4, 6]]")
        if len({len(r) for r in rows}) > 1:
            raise ValueError(f"prompts must all have one length (the model has no padding mask); got lengths "
                             f"{sorted({len(r) for r in rows})}")
        if any(isinstance(t, bool) or not isinstance(t, int) for r in rows for t in r):
            raise ValueError("prompts must hold token ids (whole numbers)")
        prompts = torch.tensor(rows, dtype=torch.long)
    elif prompts.is_floating_point():
        raise ValueError("prompts must hold token ids (an integer tensor)")
    _check_tokens(prompts, vocab, block, "prompts")
    return prompts.long()


def _inputs(c: ServeConfig, task, n: int) -> torch.Tensor:
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
        raise ValueError(f"inputs rows must look like the model's own: shape (n, {', '.join(map(str, sample.shape[1:]))})"
                         f" of {sample.dtype}; got {tuple(inputs.shape)} of {inputs.dtype}")
    return inputs


# -- the workers' results, put together ------------------------------------------------------
def collect(plan: ServePlan, ranks: list) -> StreamResult | GenerateResult:
    """One result from every global rank's serve_worker.RankServed (listed by rank). Times are ms
    from the stream's start on global rank 0 (pipeline rank 0, tensor rank 0), and the trace is
    the first pipeline slice's (tp 0)."""
    mesh, s = plan.mesh, plan.schedule
    t0 = ranks[0].t0
    ms = lambda t: (t - t0) * 1000.0   # noqa: E731
    pipeline = mesh.pipeline(0)
    events = [Event(q, a, ms(t1), ms(t2)) for q, g in enumerate(pipeline) for a, t1, t2 in ranks[g].events]
    waits = [Wait(q, kind, action, ms(t1), ms(t2), peer)
             for q, g in enumerate(pipeline) for kind, action, peer, t1, t2 in ranks[g].waits]
    meta = {"device": plan.device, "backend": plan.backend}
    trace = Trace(s, events, source="measured", waits=waits, bytes_sent=[ranks[g].bytes_sent for g in pipeline],
                  meta=meta)
    last = ranks[pipeline[s.placement[-1]]]
    if plan.stream is not None:
        outputs = None
        if plan.config.keep_outputs:
            outputs = torch.cat([last.outputs[mb] for mb in range(s.m)])[:plan.stream.requests]
        return result_of(plan.stream, trace, s.p, s.v, mesh.tp, outputs, meta)
    k, n = plan.microbatch, plan.sequences
    tokens = [[last.tokens[(r, i // k)][0][i % k] for r in range(plan.rounds)] for i in range(n)]
    times = [[ms(last.tokens[(r, i // k)][1]) for r in range(plan.rounds)] for i in range(n)]
    return GenerateResult(plan.config, plan.prompts[:n].tolist(), tokens, times, trace, s.p, s.v, mesh.tp)
