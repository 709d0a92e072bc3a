"""Serving through a pipeline, on real processes: a stream of requests, or generation token by token.

    from minipipe import run, RunConfig
    from minipipe.serve.api import ServeConfig, GenerateConfig, serve, generate

    trained = run(RunConfig(model="gpt", p=2, steps=50))
    served = serve(ServeConfig(state=trained.state, p=2, microbatch=4, requests=64, rate=2000))
    print(served.summary())       # latency p50 / p95 / p99 and throughput
    served.trace                  # the measured timeline: a Trace, drawn by minipipe.viz like any other
    served.predicted()            # the same stream on the cost model (sim/request_stream.py), fitted on this run

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
everything generated so far, not one token. The token goes back as a message like any other,
derived from the schedule (schedule/rounds.py).

Both run on the executor training runs on (engine/execute.py), with stages built as training
builds them (engine/rank_stages.py), from a Plan like training's (plan.py); every field training and
serving share (placement, timeouts, message_order, ...) is engine/config.py's EngineConfig.
`serve_many` runs several configurations (same number of processes) in one group of processes:
starting one costs seconds. The processes, their watchdog and their errors are engine/workers.py's: a
worker that raises, dies or hangs stops the run with a WorkerError naming the rank, and no
process is left behind. Every check runs before any process starts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..engine import workers
from ..engine.config import Plan
from ..engine.execute import measured_trace
from ..engine.launch import job_of
from ..engine.workers import tell
from ..sim.request_stream import ServeCosts, Stream, StreamResult, result_of, simulate_serving
from ..trace import Trace
from .config import GenerateConfig, ServeConfig, Serving
from .plan import prepare
from .rank import RankServed, serve_rank
from .work import StreamWork

__all__ = [
    "ServeConfig",
    "GenerateConfig",
    "serve",
    "generate",
    "serve_many",
    "StreamResult",
    "GenerateResult",
    "Stream",
    "ServeCosts",
    "simulate_serving",
    "prepare",
]


@dataclass
class GenerateResult:
    config: GenerateConfig
    prompts: list[list[int]]
    tokens: list[list[int]]  # per prompt: the new tokens
    token_ms: list[list[float]]  # per prompt: when each new token came out of the last stage
    trace: Trace  # the measured timeline, one round after another
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
        lines = [
            f"generated {len(self.tokens)} × {len(self.tokens[0])} tokens, {layout}, micro-batches of "
            f"{self.config.microbatch}: first token {self.first_token_ms:.2f} ms, then "
            f"{self.time_per_token_ms:.2f} ms per token ({self.tokens_per_s:,.0f} tokens/s in all)"
        ]
        lines += [
            f"  {' '.join(map(str, prompt))} | {' '.join(map(str, new))}"
            for prompt, new in zip(self.prompts, self.tokens)
        ]
        return "\n".join(lines)


# -- the front doors -------------------------------------------------------------------------
def serve(config: ServeConfig | None = None, progress: Callable[[dict], None] | None = None, **changes) -> StreamResult:
    """Serve a stream of requests on p·tp local processes; see the module docstring. `progress`
    hears {"kind": "served", "mb": ..., "ms": ...} as each micro-batch's results come out."""
    config = (config or ServeConfig()).replace(**changes) if changes or config is None else config
    return serve_many([config], progress)[0]


def generate(
    config: GenerateConfig | None = None, progress: Callable[[dict], None] | None = None, **changes
) -> GenerateResult:
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
        raise ValueError(
            "serve_many needs the same number of processes (p·tp), device and backend for every "
            "config; split them into separate calls"
        )
    tell(first.note, progress)
    results = workers.launch([job_of(pl) for pl in plans], first.world, serve_rank, progress)
    return [collect(pl, [results[(j, r)] for r in range(first.world)]) for j, pl in enumerate(plans)]


# -- the workers' results, put together ------------------------------------------------------
def collect(plan: Plan, ranks: list[RankServed]) -> StreamResult | GenerateResult:
    """One result from every global rank's RankServed (listed by rank). Times are ms from the
    stream's start on global rank 0 (pipeline rank 0, tensor rank 0), and the trace is the first
    pipeline slice's (tp 0)."""
    mesh, s = plan.mesh, plan.schedule
    pipeline = mesh.pipeline(0)
    meta = {"device": plan.device, "backend": plan.backend, "in_order": ranks[0].in_order}
    trace = measured_trace(s, [ranks[g].record for g in pipeline], meta, t0=ranks[0].t0)
    kept = ranks[pipeline[s.placement[-1]]].kept
    work = plan.work
    if isinstance(work, StreamWork):
        outputs = torch.cat([kept[mb] for mb in range(s.m)])[: work.stream.requests] if work.keep_outputs else None
        return result_of(work.stream, trace, s.p, s.v, mesh.tp, outputs, meta)
    k, n, per = work.microbatch, work.sequences, work.per_round
    done = {e.action.mb: e.end for e in trace.events if e.action.stage == s.n_stages - 1}
    mbs = [[r * per + i // k for r in range(work.rounds)] for i in range(n)]
    tokens = [[kept[mb][i % k] for mb in row] for i, row in enumerate(mbs)]
    return GenerateResult(
        plan.config,
        work.prompts[:n].tolist(),
        tokens,
        [[done[mb] for mb in row] for row in mbs],
        trace,
        s.p,
        s.v,
        mesh.tp,
    )
