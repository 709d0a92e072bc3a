"""One rank's Megatron-Core pipeline loop, run on the CPU: what `megatron.py` records and trains with.

Megatron's loops run unchanged, with four things of ours:

- model chunks that follow Megatron's conventions: a chunk gets its input through
  `set_input_tensor`, tensors on the wire are [sequence, micro-batch, hidden], and Megatron tells
  the chunk which micro-batch it is on (it sets `current_microbatch` on the decoder's layers);
- Megatron's P2PCommunicator on the pipeline's own process group, with each `_communicate`
  recorded. To train, Megatron's `_communicate` runs as it is; to record (every rank in this
  process, nothing sent) ours hands back zeros and finished requests, in the types Megatron's
  returns: a list when batched, else a dict by name, from which the overlapped interleaved loop
  takes "send_next", "recv_prev", ... to wait on later;
- CUDA answered by the CPU while a loop runs: Megatron makes its receive buffers on
  `torch.cuda.current_device()` and its token counter with `torch.zeros(..., device="cuda")`, and
  would stop on this machine with "Torch not compiled with CUDA enabled";
- with dp > 1, the hook Megatron's loops call once a step after the last backward,
  `finalize_model_grads_func` (Megatron-LM passes its DDP's gradient all-reduce): ours sums each
  gradient over the data-parallel group and divides by dp, as minipipe's executor does.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Loop:
    """What one rank's loop is asked to run: the pipeline's shape and how its ranks exchange."""

    p: int
    m: int
    v: int | None  # chunks per rank; None: the 1F1B loop
    group_size: int | None
    overlap: bool  # TransformerConfig.overlap_p2p_comm
    batched: bool  # TransformerConfig.batch_p2p_comm
    wire_shape: tuple[int, int, int] = (1, 1, 1)  # [sequence, micro-batch, hidden]
    dtype: object = None

    @property
    def last_stage(self) -> int:
        return self.p * (self.v or 1) - 1


@contextlib.contextmanager
def quiet():
    """Megatron-Core warns, as it is imported and configured, that NVIDIA's Apex and Transformer
    Engine are absent and that a CUDA-graph default is deprecated: none of it applies on a CPU."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="megatron")
        yield


class Group:
    """A stand-in process group: all Megatron's loops ask of it is its rank and size."""

    def __init__(self, size: int, rank: int):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def rank_loop(loop: Loop, group, chunks, data, log, wire: bool, loss, finalize=None):
    """Megatron's schedule for one rank over `chunks` [(body, stage, to_wire, from_wire)], each with
    an iterator over its micro-batches' (input, target) in `data`, exchanging over `group` (the
    pipeline's). Returns (action, start, end) for every forward and backward it ran, and the loss of
    each micro-batch on the last stage (as Megatron returns it, already divided by m); `log` gets
    every call, compute and communication, in order. `finalize`: Megatron's finalize_model_grads_func."""
    from unittest import mock

    from megatron.core.pipeline_parallel import schedules
    from megatron.core.process_groups_config import ProcessGroupCollection

    config = _config(loop, finalize)
    Chunk = _chunk_class()
    modules = [Chunk(body, stage, config, to_wire, from_wire) for body, stage, to_wire, from_wire in chunks]
    events: list[tuple[str, float, float]] = []
    fired: list[str] = []

    def forward_step_func(data_iterator, model):
        mb = model.decoder.layers[0].current_microbatch  # Megatron says which micro-batch this is
        x, y = next(data_iterator)
        start = time.perf_counter()
        out = model.body(model.from_wire(model.input) if model.input is not None else x)
        label = f"{model.stage}F{mb}"
        log.append(label)
        out.register_hook(lambda grad, who=f"{model.stage}B{mb}": fired.append(who))
        if model.stage == loop.last_stage:
            events.append((label, start, time.perf_counter()))
            return out, lambda output: (lambda value: (value, {"loss": value.detach()}))(loss(output, y))
        wired = model.to_wire(out)
        events.append((label, start, time.perf_counter()))
        return wired, None

    original = schedules.backward_step

    def backward_step(*args, **kwargs):  # Megatron's own, timed and named
        start, before = time.perf_counter(), len(fired)
        out = original(*args, **kwargs)
        who = fired[before]
        log.append(who)
        events.append((who, start, time.perf_counter()))
        return out

    collection = ProcessGroupCollection()
    collection.tp = collection.cp = collection.dp_cp = Group(1, 0)
    collection.pp, collection.embd, collection.pos_embd = group, None, None
    run = (
        schedules.forward_backward_pipelining_with_interleaving
        if loop.v
        else schedules.forward_backward_pipelining_without_interleaving
    )
    with _CudaOnCpu(), mock.patch.object(schedules, "backward_step", backward_step):
        store = run(
            forward_step_func=forward_step_func,
            data_iterator=data if loop.v else data[0],
            model=modules if loop.v else modules[0],
            num_microbatches=loop.m,
            seq_length=loop.wire_shape[0],
            micro_batch_size=loop.wire_shape[1],
            p2p_communicator=_communicator()(group, config, log, wire),
            pg_collection=collection,
        )
    return events, [item["loss"] for item in store]


def _config(loop: Loop, finalize=None):
    from megatron.core.transformer.transformer_config import TransformerConfig

    extra = {} if loop.group_size is None else {"microbatch_group_size_per_vp_stage": loop.group_size}
    # batch_p2p_sync would call torch.cuda.synchronize() after each batch, against a bug of old PyTorch
    return TransformerConfig(
        num_layers=loop.p * (loop.v or 1),
        hidden_size=loop.wire_shape[2],
        num_attention_heads=1,
        pipeline_model_parallel_size=loop.p,
        virtual_pipeline_model_parallel_size=loop.v,
        pipeline_dtype=loop.dtype,
        overlap_p2p_comm=loop.overlap,
        batch_p2p_comm=loop.batched,
        batch_p2p_sync=False,
        finalize_model_grads_func=finalize,
        **extra,
    )


@cache
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


class _Done:
    """A request that has finished: what recording hands the loops to wait on."""

    def wait(self) -> None:
        return None


@cache
def _communicator():
    import torch
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator

    class Communicator(P2PCommunicator):
        """Megatron's P2PCommunicator with each exchange, `_communicate`, recorded. `wire=True`:
        Megatron's own, on the pipeline's process group; else nothing moves (see the module docstring)."""

        def __init__(self, group, config, log, wire):
            self.log, self.wire = log, wire
            if wire:
                super().__init__(group, config)  # its neighbours' global ranks, from the pipeline group
                return
            self.pp_group, self.config = group, config
            size, rank = group.size(), group.rank()
            self.next_rank, self.prev_rank = (rank + 1) % size, (rank - 1) % size
            self.virtual_pipeline_model_parallel_size = config.virtual_pipeline_model_parallel_size

        def _communicate(
            self, *, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape, wait_on_reqs=True
        ):
            parts = [
                name
                for name, on in (
                    ("send_next", tensor_send_next is not None),
                    ("send_prev", tensor_send_prev is not None),
                    ("recv_prev", recv_prev),
                    ("recv_next", recv_next),
                )
                if on
            ]
            self.log.append("+".join(parts))
            if self.wire:
                return super()._communicate(
                    tensor_send_next=tensor_send_next,
                    tensor_send_prev=tensor_send_prev,
                    recv_prev=recv_prev,
                    recv_next=recv_next,
                    tensor_shape=tensor_shape,
                    wait_on_reqs=wait_on_reqs,
                )

            def buffer():
                return torch.zeros(tensor_shape, requires_grad=True, dtype=self.config.pipeline_dtype)

            done = {name: _Done() for name in parts}
            reqs = list(done.values()) if self.config.batch_p2p_comm else done
            return (
                (buffer() if recv_prev else None),
                (buffer() if recv_next else None),
                (None if wait_on_reqs and done else reqs),
            )  # as Megatron's: None once waited for

    return Communicator


class _CudaOnCpu(contextlib.ContextDecorator):
    """While Megatron's loop runs, the CPU answers for CUDA: `torch.cuda.current_device()` (where
    the communicator makes its receive buffers) is "cpu", and a factory call asking for device
    "cuda" gets the CPU (the loop's token counter, `torch.zeros([], dtype=torch.int, device="cuda")`)."""

    def __enter__(self):
        from unittest import mock

        import torch
        from torch.overrides import TorchFunctionMode

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if str(kwargs.get("device", "")).startswith("cuda"):
                    kwargs = {**kwargs, "device": "cpu"}
                return func(*args, **kwargs)

        self.device = mock.patch.object(torch.cuda, "current_device", lambda: "cpu")
        self.device.__enter__()
        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        return self.device.__exit__(*exc)


def gradients_averaged_over(group, size: int):
    """A finalize_model_grads_func: each chunk's gradients summed over `group`, divided by its size."""
    import torch.distributed as dist

    def finalize_model_grads(model, num_tokens=None, pg_collection=None, force_all_reduce=False):
        for chunk in model:
            for q in chunk.parameters():
                if q.grad is not None:
                    dist.all_reduce(q.grad, group=group)
                    q.grad.div_(size)

    return finalize_model_grads
