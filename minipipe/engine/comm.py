"""Point-to-point traffic derived from the schedule: who sends what to whom, in which order.

Nobody writes a send or a receive by hand. Every cross-rank dependency in the schedule is a
message (Schedule.messages); this module orders them and moves them:

- Receives are posted early (non-blocking `irecv`) and waited for only when an action needs
  the data. Sends (`isend`) go out as soon as the data exists and are waited for at the end of
  the step.
- NCCL matches messages in issue order per pair of ranks, and an order the two sides disagree
  on would hang: there, both sides issue their operations in one agreed order (by when a unit-
  cost replay produces each message), with receives up to 4 ahead.
- gloo matches by tag, so receives need not wait for this rank's sends: at this rank's first
  message with a peer, every receive of the step from that peer is posted. Early, because gloo's
  own thread moves a send's data only once it has heard of the receive, and that thread shares
  the core with the compute: data whose receive came late can sit until the compute blocks (up
  to 5 ms on 2 pinned CPU ranks; with every receive posted, `minipipe bench` 1F1B small m=8 runs
  8-12 % shorter than with 4 ahead). The price is one buffer per incoming message of the step
  (stage-boundary tensors, small beside the activations a stage keeps). Nothing yields the core
  before a send: on a shared machine that hands it to any runnable process, 0.1-1.6 ms a call.
- Every wait has a timeout, and a timeout says which rank waited for what, to run which action.

A schedule that writes its sends and receives (Schedule.explicit_comms) is run as written: a
result leaves at its SEND, a receive is posted at its RECV (or when the data is needed, if that
comes first), and with NCCL both sides issue them in the order of the sends in a unit-cost replay.
"""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..parallel.errors import CommError, failure_reason, first_line
from ..schedule.deadlock import validated_replay
from ..schedule.ir import Schedule
from ..schedule.ops import Action, boundary, send_of
from ..traffic import TrafficKind, message_kind


def message_plan(schedule: Schedule, in_order: bool = True) -> list[dict[int, list[list[tuple[str, Action]]]]]:
    """For every rank, per peer, its lanes of ("send" | "recv", producer) operations, each lane
    issued in its order: one lane of both kinds when the backend matches in issue order (NCCL),
    else a lane of sends and a lane of receives (gloo)."""
    done = {a: end for acts, row in zip(schedule.actions, validated_replay(schedule)) for a, (_, end) in zip(acts, row)}
    leaves = (lambda producer: done[send_of(producer)]) if schedule.explicit_comms else done.__getitem__
    plan: list[dict[int, list]] = [{} for _ in range(schedule.p)]
    for producer, src, dst in sorted(schedule.messages, key=lambda t: (leaves(t[0]), t[1], t[0])):
        for rank, peer, kind in ((src, dst, "send"), (dst, src, "recv")):
            lanes = plan[rank].setdefault(peer, [[]] if in_order else [[], []])
            lanes[0 if in_order or kind == "send" else 1].append((kind, producer))
    return plan


def tag_of(producer: Action, m: int) -> int:
    """One tag per message of a step: a stage's output activation (F) or input gradient (B or I:
    a micro-batch has one or the other on a stage, never both)."""
    return (producer.stage * m + producer.mb) * 2 + (producer.op != "F")


def wire_device(device: torch.device, backend: str) -> torch.device:
    """Where a message's tensor must be when it is sent or received: gloo moves host memory
    only, so ranks on GPUs that talk over gloo (ranks sharing GPUs, see placement.place) send a
    copy on the CPU and receive into the CPU, then move it to their GPU."""
    return torch.device("cpu") if backend == "gloo" else device


class Mailbox:
    """One rank's messages for one step."""

    def __init__(
        self,
        rank: int,
        schedule: Schedule,
        plan: dict[int, list],
        shapes: list,
        device: torch.device,
        timeout: float,
        clock,
        in_order: bool,
        to_global=None,
    ):
        self.rank, self.m = rank, schedule.m
        # pipeline rank -> global rank: with data or tensor parallelism each pipeline is a slice of
        # the mesh (parallel/mesh.py), and its ranks are addressed by their global ranks
        self.to_global = list(to_global) if to_global is not None else list(range(schedule.p))
        self.me = self.to_global[rank]
        self.owner = schedule.placement
        self.plan = plan
        # (shape, dtype) of each message: shapes[k] for the output of stage k, one micro-batch, or a
        # function of the producer where shapes change with the micro-batch (generation's rounds)
        self.shape_of = shapes if callable(shapes) else lambda producer: shapes[boundary(producer)]
        self.device = device
        self.wire = wire_device(device, dist.get_backend()) if device.type != "cpu" else device
        self.timeout = timeout
        self.clock = clock
        self.in_order = in_order
        self.explicit = schedule.explicit_comms  # receives posted where the schedule writes them, not ahead
        self.ahead = 0 if self.explicit else 4 if in_order else None  # receives posted ahead per peer; None: all
        self.pos = {(peer, lane): 0 for peer in plan for lane in range(len(plan[peer]))}
        self.ready: dict[Action, torch.Tensor] = {}  # produced here, waiting for its turn to be sent
        self.recvs: dict[Action, tuple] = {}  # posted: producer -> (work, buffer)
        self.sends: list[tuple] = []  # (work, producer, peer)
        self.bytes_sent = 0
        self.sent_by_kind = dict.fromkeys((TrafficKind.PP_ACTIVATION, TrafficKind.PP_GRADIENT), 0)
        self.waits: list[tuple] = []  # (kind, producer, peer, start, end): see trace.Wait
        self.posting = 0.0  # seconds inside the backend's isend/irecv calls (see StepRecord)

    def send(self, producer: Action, tensor: torch.Tensor, peer: int) -> None:
        self.ready[producer] = tensor
        self._pump(peer, until=producer if self.explicit and self.in_order else None)

    def post(self, producer: Action) -> None:
        """Post the receive of `producer`'s result now (an explicit RECV), if its turn has come."""
        if producer not in self.recvs:
            self._pump(self.owner[producer.stage], until=producer)

    def recv(self, producer: Action, needed_by: Action) -> torch.Tensor:
        peer = self.owner[producer.stage]
        if producer not in self.recvs:
            self._pump(peer, until=producer)
        if producer not in self.recvs:
            raise CommError(
                f"rank {self.me} cannot post the receive of {producer} (for {needed_by}): an earlier "
                f"send to rank {self.to_global[peer]} has not been produced; the message order is "
                f"inconsistent"
            )
        work, buf = self.recvs.pop(producer)
        start = self.clock()
        self._wait(work, f"waiting for {producer} from rank {self.to_global[peer]} (to run {needed_by})", peer)
        self.waits.append(("recv", producer, peer, start, self.clock()))
        self._pump(peer)
        return buf.to(self.device)

    def finish(self) -> None:
        """Wait for every send of the step to complete."""
        for (peer, lane), pos in self.pos.items():
            if pos != len(self.plan[peer][lane]):
                kind, producer = self.plan[peer][lane][pos]
                raise CommError(
                    f"rank {self.me} ended the step before its {kind} of {producer} with rank {self.to_global[peer]}"
                )
        start = self.clock()
        for work, producer, peer in self.sends:
            self._wait(work, f"sending {producer} to rank {self.to_global[peer]}", peer)
        if self.sends:
            self.waits.append(("send", None, None, start, self.clock()))
        self.sends.clear()

    def _pump(self, peer: int, until: Action | None = None) -> None:
        """Issue this peer's operations, each lane in its order: receives as soon as their turn
        comes (at most `ahead` outstanding, unless one is needed now), sends once produced."""
        for lane, ops in enumerate(self.plan[peer]):
            self._pump_lane(peer, lane, ops, until)

    def _pump_lane(self, peer: int, lane: int, ops: list, until: Action | None) -> None:
        while self.pos[peer, lane] < len(ops):
            kind, producer = ops[self.pos[peer, lane]]
            if kind == "send":
                if producer not in self.ready:
                    return
                tensor = self.ready.pop(producer).to(self.wire)
                posted = time.perf_counter()
                work = dist.isend(tensor, dst=self.to_global[peer], tag=tag_of(producer, self.m))
                self.posting += time.perf_counter() - posted
                self.sends.append((work, producer, peer))
                nbytes = tensor.numel() * tensor.element_size()
                self.bytes_sent += nbytes
                self.sent_by_kind[message_kind(producer)] += nbytes
                if producer == until:
                    until = None
            else:
                if (
                    self.ahead is not None
                    and until is None
                    and sum(1 for a in self.recvs if self.owner[a.stage] == peer) >= self.ahead
                ):
                    return
                shape, dtype = self.shape_of(producer)
                buf = torch.empty(shape, dtype=dtype, device=self.wire)
                posted = time.perf_counter()
                self.recvs[producer] = (dist.irecv(buf, src=self.to_global[peer], tag=tag_of(producer, self.m)), buf)
                self.posting += time.perf_counter() - posted
                if producer == until:
                    until = None
            self.pos[peer, lane] += 1

    def _wait(self, work, what: str, peer: int) -> None:
        peer, started = self.to_global[peer], time.monotonic()
        try:
            work.wait(timeout=timedelta(seconds=self.timeout))
        except RuntimeError as e:
            if failure_reason(started, self.timeout) == "timeout":
                raise CommError(
                    f"rank {self.me} timed out after {self.timeout:g} s {what}; "
                    f"rank {peer} may be stuck or slow (raise `timeout` if it is only slow)",
                    peer,
                    "timeout",
                ) from None
            raise CommError(f"rank {self.me} lost rank {peer} while {what}: {first_line(e)}", peer, "lost") from None


def clock_offset(rank: int, world: int, device=None, rounds: int = 8) -> float:
    """Seconds to add to this rank's perf_counter to read rank 0's clock. Ranks booted on rank 0's
    machine share its clock (perf_counter is CLOCK_MONOTONIC, one clock for the whole machine):
    their offset is exactly 0, where an estimate would carry the round trip's noise (up to ~1 ms on
    a loaded machine, enough to put a message's arrival before its departure). Across machines,
    NTP style: the exchange with the shortest round trip wins, which lines up the traces."""
    best_rtt, offset = float("inf"), 0.0
    probe = torch.zeros(1, dtype=torch.float64, device=device)  # NCCL wants it on the GPU
    here = _boot_key()
    for peer in range(1, world):
        if rank == peer:
            dist.recv(probe, src=0)
            same = here >= 0 and probe.item() == here
            probe.fill_(1.0 if same else 0.0)
            dist.send(probe, dst=0)
        elif rank == 0:
            probe.fill_(here)
            dist.send(probe, dst=peer)
            dist.recv(probe, src=peer)
            same = probe.item() == 1.0
        else:
            continue
        if same:
            continue
        for _ in range(rounds):
            if rank == peer:
                t1 = time.perf_counter()
                dist.send(probe, dst=0)
                dist.recv(probe, src=0)
                t3 = time.perf_counter()
                if t3 - t1 < best_rtt:
                    best_rtt, offset = t3 - t1, probe.item() - (t1 + t3) / 2
            else:
                dist.recv(probe, src=peer)
                probe.fill_(time.perf_counter())
                dist.send(probe, dst=peer)
    return offset


def _boot_key() -> float:
    """This boot of this machine as a number two processes can compare (48 bits of Linux's boot id,
    exact in a float64), or -1 where there is none to read (then clocks are always estimated)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return -1.0
    return float(int(hashlib.sha256(boot.encode()).hexdigest()[:12], 16))
