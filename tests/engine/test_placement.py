"""Where ranks run: one GPU each over NCCL when there are enough, else shared GPUs that exchange
tensors through host memory over gloo, said once. All on the CPU, with made-up GPU counts."""

import collections
import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import minipipe.engine.comm as comm
import minipipe.engine.config as config
import minipipe.engine.model_cut as model_cut
import minipipe.engine.run_checks as run_checks
from minipipe import Action, make_schedule
from minipipe.engine.comm import Mailbox, message_plan, wire_device
from minipipe.engine.launch import job_of
from minipipe.engine.placement import place
from minipipe.engine.workers import Job, launch, tell


def test_enough_gpus_one_per_rank_over_nccl():
    for device in ("auto", "cuda"):
        where = place(4, 8, device)
        assert (where.device, where.backend, where.gpus, where.via_host, where.note) == (
            "cuda",
            "nccl",
            (0, 1, 2, 3),
            False,
            None,
        )


@pytest.mark.parametrize(
    "ranks,gpus,expected",
    [
        (4, 1, (0, 0, 0, 0)),
        (2, 1, (0, 0)),
        (4, 2, (0, 1, 0, 1)),
        (3, 2, (0, 1, 0)),
        (8, 3, (0, 1, 2, 0, 1, 2, 0, 1)),
    ],
)
def test_fewer_gpus_than_ranks_share_them_over_gloo(ranks, gpus, expected):
    where = place(ranks, gpus, "cuda")
    assert (where.device, where.backend, where.gpus, where.via_host) == ("cuda", "gloo", expected, True)
    assert f"{ranks} ranks share {gpus} GPU" in where.note and "through host memory over gloo" in where.note


def test_the_note_says_which_ranks_share_which_gpu():
    assert "(ranks 0, 2 on cuda:0; ranks 1, 3 on cuda:1)" in place(4, 2, "cuda").note
    assert "(ranks 0, 2 on cuda:0; rank 1 on cuda:1)" in place(3, 2, "cuda").note


@pytest.mark.parametrize("ranks,gpus", [(2, 1), (4, 1), (4, 2), (8, 3)])
def test_auto_with_fewer_gpus_than_ranks_shares_them_and_says_so(ranks, gpus):
    # a workshop participant given one GPU runs every p >= 2 lesson on it, not on the CPU
    assert place(ranks, gpus, "auto") == place(ranks, gpus, "cuda")
    where = place(ranks, gpus, "auto")
    assert (where.device, where.backend, where.via_host) == ("cuda", "gloo", True)
    assert f"{ranks} ranks share {gpus} GPU" in where.note


def test_auto_without_gpus_or_with_gloo_asked_stays_on_the_cpu():
    assert place(2, 0, "auto") == place(2, 0, "cpu")
    assert place(2, 0, "auto").note is None  # no GPU at all: nothing to say
    assert place(2, 4, "auto", "gloo").device == "cpu"
    assert place(4, 1, "auto", "gloo").device == "cpu"


def test_the_label_of_a_timing_says_where_the_ranks_ran():
    assert place(2, 0).label == "on the CPU (gloo)"
    assert place(2, 1).label == "2 ranks sharing 1 GPU (gloo, via host memory)"
    assert place(4, 2).label == "4 ranks sharing 2 GPUs (gloo, via host memory)"
    assert place(2, 2).label == "one GPU per rank (nccl)"
    assert place(2, 2, "cuda", "gloo").label == "one GPU per rank (gloo, via host memory)"


def test_gloo_on_enough_gpus_goes_through_host_memory():
    where = place(2, 2, "cuda", "gloo")
    assert (where.backend, where.gpus, where.via_host) == ("gloo", (0, 1), True) and "host memory" in where.note


@pytest.mark.parametrize(
    "args,message",
    [
        (
            (4, 1, "cuda", "nccl"),
            "backend='nccl' needs one GPU per rank: 4 ranks on this machine but 1 GPU visible; "
            "use backend='auto' to share the GPUs over gloo, or at most 1 ranks",
        ),
        ((2, 0, "cuda"), "device='cuda' but no GPU is visible to torch; use device='cpu'"),
        ((2, 4, "cpu", "nccl"), "backend='nccl' needs GPUs"),
        ((2, 4, "tpu"), "unknown device 'tpu'"),
        ((2, 4, "auto", "mpi"), "unknown backend 'mpi'"),
    ],
)
def test_impossible_placements_say_what_to_change(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        place(*args)


@given(
    ranks=st.integers(1, 16),
    gpus=st.integers(0, 8),
    device=st.sampled_from(["auto", "cpu", "cuda"]),
    backend=st.sampled_from(["auto", "gloo", "nccl"]),
)
def test_every_placement_is_balanced_and_honest(ranks, gpus, device, backend):
    try:
        where = place(ranks, gpus, device, backend)
    except ValueError as e:
        assert "use" in str(e)
        return
    assert where.via_host == (where.device == "cuda" and where.backend == "gloo")
    if where.device == "cpu":
        assert where.gpus == () and where.backend == "gloo"
        return
    assert len(where.gpus) == ranks and all(0 <= g < gpus for g in where.gpus)
    load = collections.Counter(where.gpus)
    assert max(load.values()) - min(load.values()) <= 1  # round robin: no GPU carries two more
    if where.backend == "nccl":
        assert len(load) == ranks  # NCCL refuses two ranks on one GPU
    if max(load.values()) > 1:
        assert "share" in where.note  # sharing is always said


def test_prepare_places_the_ranks_and_the_workers_get_it(monkeypatch):
    monkeypatch.setattr(run_checks, "visible_gpus", lambda: 1)
    plan = config.prepare(config.RunConfig(p=4, m=4, device="cuda", model_args={"width": 8, "depth": 4}))
    assert (plan.device, plan.backend, plan.gpus) == ("cuda", "gloo", (0, 0, 0, 0))
    assert not plan.in_order and "4 ranks share 1 GPU" in plan.note
    job = job_of(plan)
    assert (job.backend, job.gpus, job.pin_cores, job.schedule) == ("gloo", (0, 0, 0, 0), False, plan.schedule)
    monkeypatch.setattr(run_checks, "visible_gpus", lambda: 0)
    assert config.prepare(config.RunConfig(p=2, model_args={"width": 8, "depth": 4})).gpus == ()


def test_a_lesson_on_one_gpu_with_two_ranks_uses_the_gpu(monkeypatch):
    # what a lesson writes (no device=), on a participant's slice of one GPU
    monkeypatch.setattr(run_checks, "visible_gpus", lambda: 1)
    plan = config.prepare(config.RunConfig(schedule="1f1b", p=2, m=4, model="gpt", steps=20))
    assert (plan.device, plan.backend, plan.gpus) == ("cuda", "gloo", (0, 0))
    assert "2 ranks share 1 GPU" in plan.note and not plan.pin_cores


def test_time_partitions_are_profiled_on_the_device_the_ranks_use(monkeypatch):
    assert model_cut.profile_device(place(2, 1)) == torch.device("cuda", 0)
    assert model_cut.profile_device(place(3, 2, "cuda")) == torch.device("cuda", 0)
    assert model_cut.profile_device(place(2, 0)) == torch.device("cpu")
    # No GPU here: "meta" stands in for the ranks' GPU; what matters is where the layers were timed.
    monkeypatch.setattr(run_checks, "visible_gpus", lambda: 1)
    monkeypatch.setattr(model_cut, "profile_device", lambda where: torch.device("meta"))
    timed = []
    real = model_cut.partition

    def watch(layers, n_stages, method="uniform", sample_input=None, **kw):
        timed.append(
            (
                method,
                {p.device.type for layer in layers for p in layer.parameters()},
                None if sample_input is None else sample_input.device.type,
            )
        )
        return real(layers, n_stages, method, sample_input=sample_input, **kw)

    monkeypatch.setattr(model_cut, "partition", watch)
    plan = config.prepare(config.RunConfig(p=2, m=4, partition="time", model_args={"width": 8, "depth": 4}))
    assert timed == [("time", {"meta"}, "meta")] and plan.device == "cuda"


def test_the_note_is_said_once_to_progress_or_as_a_warning():
    events = []
    tell("4 ranks share 1 GPU", events.append)
    assert events == [{"kind": "note", "text": "4 ranks share 1 GPU"}]
    with pytest.warns(UserWarning, match="4 ranks share 1 GPU"):
        tell("4 ranks share 1 GPU")
    tell(None, events.append)
    assert len(events) == 1


def test_jobs_of_one_group_must_agree_on_devices():
    with pytest.raises(ValueError, match="same backend, gpus and pin_cores"):
        launch([Job(None, gpus=(0, 0)), Job(None, gpus=(0, 1))], 2, body=None)
    with pytest.raises(ValueError, match="gpus names a device for 3 ranks, but the group has 2"):
        launch([Job(None, gpus=(0, 0, 0))], 2, body=None)


# -- the mailbox of a rank on a GPU that talks over gloo -----------------------------------------
def test_messages_travel_on_the_cpu_when_gloo_carries_them():
    assert wire_device(torch.device("cuda", 1), "gloo") == torch.device("cpu")
    assert wire_device(torch.device("cuda", 1), "nccl") == torch.device("cuda", 1)
    assert wire_device(torch.device("cpu"), "gloo") == torch.device("cpu")


class FakeDist:
    """Records what the mailbox hands to gloo; every operation completes at once."""

    def __init__(self):
        self.sent, self.posted = [], []

    def get_backend(self):
        return "gloo"

    def isend(self, tensor, dst, tag):
        self.sent.append(tensor)
        return types.SimpleNamespace(wait=lambda timeout=None: None)

    def irecv(self, buf, src, tag):
        self.posted.append(buf)
        buf.fill_(7.0)
        return types.SimpleNamespace(wait=lambda timeout=None: None)


def test_the_mailbox_sends_host_copies_and_receives_into_host_buffers(monkeypatch):
    # No GPU here: "meta" stands in for the rank's device; what matters is that only host
    # tensors reach gloo, and a received tensor comes back on the rank's own device.
    fake = FakeDist()
    monkeypatch.setattr(comm, "dist", fake)
    schedule = make_schedule("gpipe", 2, 2)
    shapes = [((2, 4), torch.float32)] * 2
    device = torch.device("meta")
    mail = Mailbox(
        0, schedule, message_plan(schedule, in_order=False)[0], shapes, device, 1.0, clock=lambda: 0.0, in_order=False
    )
    assert mail.wire == torch.device("cpu")
    mail.send(Action("F", 0, 0), torch.ones(2, 4), peer=1)
    grad = mail.recv(Action("B", 1, 0), needed_by=Action("B", 0, 0))
    assert [t.device.type for t in fake.sent] == ["cpu"]
    assert fake.posted and all(b.device.type == "cpu" for b in fake.posted)
    assert grad.device == device and grad.shape == (2, 4)
