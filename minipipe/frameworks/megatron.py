"""Megatron-Core's pipeline schedules beside minipipe: the order its loops run, recorded, and the
course model trained through them on gloo.

    rec = record(p=4, m=8, v=2)                  # Megatron's own loops, every rank, no processes
    rec.schedule                                 # the order as a minipipe Schedule: validate, simulate
    rec.streams[0][:6]                           # ['0F0', 'send_next', '0F1', ...]: compute and communication
    run = train(RunConfig(schedule="interleaved", p=2, m=4, model="gpt"))   # on gloo, real exchange

`forward_backward_pipelining_without_interleaving` (1F1B) and `..._with_interleaving` are Python
loops: warm-up forwards, a steady 1F1B, a cool-down. They call the user's `forward_step_func`, their
own `backward_step` (autograd from the chunk's output), and a `P2PCommunicator` whose public
methods (`recv_forward`, `send_forward_recv_backward`, ...) all end in one `_communicate(...)`.
Here we run those loops unchanged, with three things of ours:

- model chunks that follow Megatron's conventions: a chunk gets its input through
  `set_input_tensor`, tensors on the wire are [sequence, micro-batch, hidden], and Megatron tells
  the chunk which micro-batch it is on (it sets `current_microbatch` on the decoder's layers);
- a communicator whose `_communicate` records each call and makes its receive buffers on the CPU
  (Megatron's own makes them on `torch.cuda.current_device()`). To record, it hands back zeros;
  to train, it moves the tensors with Megatron's own isend/irecv (`_p2p_ops`), on gloo;
- the loops' token counter, which Megatron allocates with `torch.zeros(..., device="cuda")`,
  placed on the CPU by a torch function mode while the loop runs. Without these two, Megatron-Core
  stops on this CPU machine with "Torch not compiled with CUDA enabled".

Megatron asks the process group its rank and size (utils.get_pg_rank), and answers 0 and 1 when
torch.distributed is not initialised; `record` therefore runs in a one-process gloo group of its
own, made and destroyed around the recording, giving each loop a stand-in group of p.

Why `_p2p_ops` and not the batched exchange (TransformerConfig's default, batch_p2p_comm=True): with
two ranks, a rank's previous and next rank are the same peer, and in the interleaved loop a rank
sends that peer a gradient and an activation in one exchange. The batched form posts its operations
as (send to prev, receive from prev, send to next, receive from next) on both ranks, so the peer's
first receive (an activation) meets the first send (a gradient). Matched in order (gloo by tag, all
0 here) they cross and the losses go wrong (tests/test_frameworks_megatron.py shows it); NCCL also
matches a pair's messages in the order they are issued (not measured here: no GPUs). `_p2p_ops` posts in mirrored order on even and odd ranks, which pairs them. Megatron-LM overlaps
this communication with compute by default for interleaved schedules (--no-overlap-p2p-communication
turns it off), and overlapping rules batching out (ModelParallelConfig: overlap_p2p_comm "must be
False if batch_p2p_comm is true").
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from functools import lru_cache

from ..schedule.ir import Schedule
from ..schedule.ops import Action


@dataclass
class Recording:
    schedule: Schedule              # every rank's forwards and backwards, in Megatron's order
    streams: list[list[str]]        # per rank, every call in order: "1F0", "send_next+recv_next", ...
    group_size: int                 # --microbatch-group-size-per-virtual-pipeline-stage used


@contextlib.contextmanager
def _quiet():
    """Megatron-Core warns, as it is imported and configured, that NVIDIA's Apex and Transformer
    Engine are absent and that a CUDA-graph default is deprecated: none of it applies on a CPU."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="megatron")
        yield


class _Group:
    """A stand-in process group: all Megatron's loops ask of it is its rank and size."""

    def __init__(self, size: int, rank: int):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _check(p: int, m: int, v: int | None, group_size: int | None) -> None:
    if not all(isinstance(x, int) and x >= 1 for x in (p, m)) or p < 2:
        raise ValueError(f"Megatron's pipeline schedules need p >= 2 ranks and m >= 1 micro-batches; got p={p!r}, m={m!r}")
    if v is not None and (not isinstance(v, int) or v < 2):
        raise ValueError(f"v is the number of model chunks per rank for the interleaved loop: >= 2, or None "
                         f"for 1F1B; got {v!r}")
    if group_size is not None and v is None:
        raise ValueError("group_size (--microbatch-group-size-per-virtual-pipeline-stage) applies to the "
                         "interleaved loop only: give v >= 2")
    if v is not None:
        g = p if group_size is None else group_size
        if not p <= g <= m:
            raise ValueError(f"Megatron needs p <= group_size <= m for its interleaved loop; got p={p}, "
                             f"group_size={g}, m={m}")
        if 0 < m % g < p:
            raise ValueError(f"m % group_size = {m % g} is between 0 and p={p}: Megatron refuses that (the last group "
                             f"would stall the pipeline); choose m a multiple of {g}, or a remainder >= {p}")


def record(p: int, m: int, v: int | None = None, group_size: int | None = None) -> Recording:
    """Run Megatron-Core's loop for every rank of a (p, m, v) pipeline, in this process, and record
    the order of its calls. v=None: `..._without_interleaving` (1F1B); v >= 2 chunks per rank:
    `..._with_interleaving`, with micro-batch groups of `group_size` (Megatron's default: p)."""
    import torch
    import torch.distributed as dist

    _check(p, m, v, group_size)
    with _quiet():
        own_group = not dist.is_initialized()
        if own_group:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            streams, actions = [], []
            for rank in range(p):
                log: list[str] = []
                chunks = [_recording_chunk(c * p + rank) for c in range(v or 1)]
                data = [iter([(torch.zeros(1, 1, 1), None)] * m) for _ in chunks]
                events, _ = _rank_loop(_Group(p, rank), chunks, data, m, (1, 1, 1), torch.float32, v, group_size,
                                       log, wire=False, last_stage=p * (v or 1) - 1, loss=lambda out, y: out.sum())
                streams.append(log)
                actions.append([Action.parse(a) for a, _, _ in events])
        finally:
            if own_group:
                dist.destroy_process_group()
    g = (group_size or p) if v else 0
    return Recording(Schedule.build(f"megatron-{'interleaved' if v else '1f1b'}", p, m, v or 1, actions), streams, g)


def _recording_chunk(stage: int):
    import torch

    return torch.nn.Linear(1, 1), stage, (lambda x: x), (lambda x: x)


# -- the loop, for one rank --------------------------------------------------------------------
def _rank_loop(group, chunks, data, m, wire_shape, dtype, v, group_size, log, wire, last_stage, loss, batched=False):
    """Megatron's schedule for one rank over `chunks` [(body, stage, to_wire, from_wire)], each with
    an iterator over its micro-batches' (input, target) in `data`. Returns (action, start, end) for
    every forward and backward it ran, and the loss of each micro-batch on the last stage (as
    Megatron returns it, already divided by m); `log` gets every call, compute and communication,
    in order."""
    from unittest import mock

    import torch
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.process_groups_config import ProcessGroupCollection

    config = _config(group.size(), v, group_size, wire_shape[2], dtype, batched)
    Chunk = _chunk_class()
    modules = [Chunk(body, stage, config, to_wire, from_wire) for body, stage, to_wire, from_wire in chunks]
    events: list[tuple[str, float, float]] = []
    fired: list[str] = []

    def forward_step_func(data_iterator, model):
        mb = model.decoder.layers[0].current_microbatch     # Megatron says which micro-batch this is
        x, y = next(data_iterator)
        start = time.perf_counter()
        out = model.body(model.from_wire(model.input) if model.input is not None else x)
        label = f"{model.stage}F{mb}"
        log.append(label)
        out.register_hook(lambda grad, who=f"{model.stage}B{mb}": fired.append(who))
        if model.stage == last_stage:
            events.append((label, start, time.perf_counter()))
            return out, lambda output: (lambda value: (value, {"loss": value.detach()}))(loss(output, y))
        wired = model.to_wire(out)
        events.append((label, start, time.perf_counter()))
        return wired, None

    original = schedules.backward_step

    def backward_step(*args, **kwargs):                     # Megatron's own, timed and named
        start, before = time.perf_counter(), len(fired)
        out = original(*args, **kwargs)
        who = fired[before]
        log.append(who)
        events.append((who, start, time.perf_counter()))
        return out

    collection = ProcessGroupCollection()
    collection.tp = collection.cp = collection.dp_cp = _Group(1, 0)
    collection.pp, collection.embd, collection.pos_embd = group, None, None
    loop = schedules.forward_backward_pipelining_with_interleaving if v else \
        schedules.forward_backward_pipelining_without_interleaving
    with _CudaCounterOnCpu(), mock.patch.object(schedules, "backward_step", backward_step):
        store = loop(forward_step_func=forward_step_func, data_iterator=data if v else data[0],
                     model=modules if v else modules[0], num_microbatches=m, seq_length=wire_shape[0],
                     micro_batch_size=wire_shape[1], p2p_communicator=_communicator()(group, config, log, wire),
                     pg_collection=collection)
    return events, [item["loss"] for item in store]


def _config(p: int, v: int | None, group_size: int | None, hidden: int, dtype, batched: bool = False):
    from megatron.core.transformer.transformer_config import TransformerConfig

    extra = {} if group_size is None else {"microbatch_group_size_per_vp_stage": group_size}
    return TransformerConfig(num_layers=p * (v or 1), hidden_size=hidden, num_attention_heads=1,
                             pipeline_model_parallel_size=p, virtual_pipeline_model_parallel_size=v,
                             pipeline_dtype=dtype, batch_p2p_comm=batched, **extra)


@lru_cache(maxsize=None)
def _chunk_class():
    import torch
    from megatron.core.enums import ModelType

    class Chunk(torch.nn.Module):
        """A model chunk as Megatron's loops expect one: a `config`, a `model_type`, an input set
        by `set_input_tensor`, and decoder layers Megatron writes the current micro-batch on."""

        def __init__(self, body, stage, config, to_wire, from_wire):
            super().__init__()
            self.body, self.stage, self.config = body, stage, config
            self.model_type = ModelType.encoder_or_decoder
            self.to_wire, self.from_wire = to_wire, from_wire
            self.decoder = torch.nn.Module()
            self.decoder.layers = [type("Layer", (), {"current_microbatch": None})()]
            self.input = None

        def set_input_tensor(self, tensors):
            self.input = tensors[0] if isinstance(tensors, list) else tensors

    return Chunk


@lru_cache(maxsize=None)
def _communicator():
    import torch
    import torch.distributed as dist
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator, _batched_p2p_ops, _p2p_ops

    class Communicator(P2PCommunicator):
        """Megatron's P2PCommunicator with its one exchange, `_communicate`, recorded and on the CPU;
        `wire=True` moves the tensors with Megatron's own batched isend/irecv (gloo)."""

        def __init__(self, group, config, log, wire):
            self.pp_group, self.config, self.log, self.wire = group, config, log, wire
            size, rank = group.size(), group.rank()
            self.next_rank, self.prev_rank = (rank + 1) % size, (rank - 1) % size
            self.virtual_pipeline_model_parallel_size = config.virtual_pipeline_model_parallel_size

        def _communicate(self, *, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape,
                         wait_on_reqs=True):
            parts = [name for name, on in (("send_next", tensor_send_next is not None),
                                           ("send_prev", tensor_send_prev is not None),
                                           ("recv_prev", recv_prev), ("recv_next", recv_next)) if on]
            self.log.append("+".join(parts))

            def buffer():
                return torch.zeros(tensor_shape, requires_grad=True, dtype=self.config.pipeline_dtype)

            from_prev, from_next = (buffer() if recv_prev else None), (buffer() if recv_next else None)
            reqs = []
            if self.wire:                           # Megatron's own exchange, as its _communicate calls it
                exchange = _batched_p2p_ops if self.config.batch_p2p_comm else _p2p_ops
                reqs = exchange(tensor_send_prev=tensor_send_prev, tensor_recv_prev=from_prev,
                                tensor_send_next=tensor_send_next, tensor_recv_next=from_next,
                                group=dist.group.WORLD, prev_pipeline_rank=self.prev_rank,
                                next_pipeline_rank=self.next_rank)
                if wait_on_reqs:
                    for req in (reqs if isinstance(reqs, list) else reqs.values()):
                        req.wait()
                    reqs = []
            return from_prev, from_next, reqs

    return Communicator


class _CudaCounterOnCpu(contextlib.ContextDecorator):
    """While Megatron's loop runs: a factory call asking for device "cuda" gets the CPU (its token
    counter, `torch.zeros([], dtype=torch.int, device="cuda")`, is the only one)."""

    def __enter__(self):
        from torch.overrides import TorchFunctionMode

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if str(kwargs.get("device", "")).startswith("cuda"):
                    kwargs = {**kwargs, "device": "cpu"}
                return func(*args, **kwargs)

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


# -- the course model through Megatron's loops, on gloo -----------------------------------------
@dataclass
class MegatronRankResult:
    rank: int
    losses: list[float]                             # per step, on the last stage's rank; [] elsewhere
    events: list[list[tuple[str, float, float]]]    # per step: (action, start, end)
    streams: list[str]                              # the last step's calls, compute and communication


def _wire(shape):
    """To and from Megatron's [sequence, micro-batch, hidden] for an activation of `shape`."""
    if len(shape) == 3:                                        # (b, t, c): the GPT's
        return (lambda x: x.transpose(0, 1).contiguous()), (lambda x: x.transpose(0, 1)), (shape[1], shape[0], shape[2])
    if len(shape) == 2:                                        # (b, c): the MLP's
        return (lambda x: x.unsqueeze(0)), (lambda x: x.squeeze(0)), (1, shape[0], shape[1])
    raise ValueError(f"Megatron's loops send [sequence, micro-batch, hidden] tensors; this model's activations are "
                     f"{tuple(shape)}: use the course's gpt or mlp")


def train_megatron_rank(work, rank: int, report, status=None) -> MegatronRankResult:
    """A worker body (minipipe.engine.workers.launch): the plan's stages on this rank as Megatron
    model chunks, stepped by Megatron-Core's loop with a communicator on gloo."""
    import torch
    import torch.distributed as dist

    from ..engine.partition import stage_module
    from ..models.catalog import task_of

    plan, group_size, batched = work
    c, s = plan.config, plan.schedule
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module="megatron")   # as _quiet: a worker of its own
    torch.set_num_threads(c.threads)
    task = task_of(c)
    layers = task.layers()
    to_wire, from_wire, wire_shape = _wire(plan.shapes[0][0])
    bodies = {k: stage_module(layers, plan.partition, k) for k in s.stages_of(rank)}
    chunks = [(bodies[k], k, to_wire, from_wire) for k in sorted(bodies)]
    params = [q for body in bodies.values() for q in body.parameters()]
    optimizer = (torch.optim.Adam if c.optimizer == "adam" else torch.optim.SGD)(params, lr=c.lr)
    v = s.v if s.v > 1 else None
    losses, steps, log = [], [], []
    for step in range(c.steps):
        if status is not None:
            status(step, -1, "compute")
        log.clear()
        for body in bodies.values():
            body.zero_grad(set_to_none=True)
        x, y = task.batch(step)
        batches = list(zip(x.chunk(s.m), y.chunk(s.m)))
        data = [iter(batches) for _ in chunks]
        dist.barrier()
        events, found = _rank_loop(_Group(s.p, rank), chunks, data, s.m, wire_shape, plan.shapes[0][1], v, group_size,
                                   log, wire=True, last_stage=s.n_stages - 1, loss=task.loss, batched=batched)
        optimizer.step()
        if found:
            losses.append(float(sum(found)))
            report("step", {"step": step, "loss": losses[-1]})
        steps.append(events)
    return MegatronRankResult(rank, losses, steps, list(log))


@dataclass
class MegatronRun:
    plan: object               # minipipe's Plan of the same run (its cut, its model)
    recording: Recording       # what Megatron's loops ran, as a minipipe Schedule, and their calls
    losses: list[float]        # one per step: the full-batch mean loss
    traces: list               # a measured Trace per step: Megatron's forwards and backwards


def train(config, group_size: int | None = None, batched: bool = False, progress=None) -> MegatronRun:
    """Train a minipipe RunConfig (schedule 1f1b, or interleaved with v >= 2; dp = tp = 1) through
    Megatron-Core's own loops on gloo, one process per rank. `batched=True` exchanges with
    batch_isend_irecv (see the module docstring: wrong with two ranks interleaved)."""
    from ..engine import workers
    from ..engine.config import prepare
    from ..engine.workers import Job
    from .timeline import traces_from_events

    if config.dp * config.tp != 1:
        raise ValueError("train runs Megatron's pipeline loops alone (dp=1, tp=1); Megatron's data and tensor "
                         "parallelism come from its own model and DDP classes, which minipipe does not use")
    if config.schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"Megatron-Core's pipeline schedules are 1F1B and interleaved 1F1B; got {config.schedule!r}")
    plan = prepare(config.replace(device="cpu", backend="gloo"))
    s = plan.schedule
    v = s.v if config.schedule == "interleaved" else None
    _check(s.p, s.m, v, group_size)
    if len({shape for shape, _ in plan.shapes[:-1]}) > 1:
        raise ValueError("Megatron's loops send one tensor shape at every cut; this model's cuts differ")
    _wire(plan.shapes[0][0])
    recording = record(s.p, s.m, v, group_size)
    job = Job((plan, group_size, batched), "gloo", (), plan.pin_cores, config.timeout, config.startup_timeout)
    results = workers.launch([job], plan.world, train_megatron_rank, progress)
    ranks = [results[(0, r)] for r in range(plan.world)]
    traces = traces_from_events(recording.schedule, [res.events for res in ranks], "Megatron-Core")
    return MegatronRun(plan, recording, next(res.losses for res in ranks if res.losses), traces)
