"""torch's communication and FSDP actions in a schedule: typed, printed and parsed as torch does,
written out from the derived ones (schedule/lowering.py), validated for what they mean, simulated
with the computations' own times, drawn, and exported to torch's runtime CSV."""

import pytest

from minipipe import Costs, Schedule, kinds, make_schedule, simulate
from minipipe.schedule.lowering import with_fsdp, with_sends_and_receives
from minipipe.schedule.ops import COMPUTE, FSDP, SENDS_AND_RECEIVES, Action, F, OpType
from minipipe.schedule.validate import ScheduleError, validate

TRAINING = [
    (k.name, p, v)
    for k in kinds.KINDS.values()
    if k.name != "inference"
    for p, v in ((2, k.default_v), (3, k.default_v))
]


def lowered(kind: str, p: int, m: int, v: int = 1) -> Schedule:
    """The kind's schedule with every send, receive and FSDP action written out."""
    return with_sends_and_receives(with_fsdp(make_schedule(kind, p, m, v)))


def edited(s: Schedule, rank: int, change) -> Schedule:
    """`s` with rank's list of tokens changed by `change(list) -> list` (not validated)."""
    lists = [s.tokens(r) for r in range(s.p)]
    lists[rank] = change(lists[rank])
    return Schedule.build(s.kind, s.p, s.m, s.v, lists, s.placement)


def moved(tokens: list, token: str, after: str) -> list:
    out = [t for t in tokens if t != token]
    out.insert(out.index(after) + 1, token)
    return out


def rejected(s: Schedule) -> str:
    with pytest.raises(ScheduleError) as info:
        validate(s)
    return info.value.reason


# -- the type ---------------------------------------------------------------------------------
def test_ops_are_torchs_computation_types_and_equal_their_text():
    torch_types = pytest.importorskip("torch.distributed.pipelining.schedules")._ComputationType
    theirs = {t.name: t.value for t in torch_types if t.name != "OVERLAP_F_B"}  # a pair: Schedule.paired
    assert {t.name: t.value for t in OpType} == theirs
    assert Action("F", 2, 5) == F(2, 5) and Action("F", 2, 5).op is OpType.FORWARD  # typed, whatever is given
    assert hash(OpType.SEND_F) == hash("SEND_F") and {"B": 1}[OpType.FULL_BACKWARD] == 1
    with pytest.raises(ValueError, match="not an op"):
        Action("X", 0, 0)


@pytest.mark.parametrize(
    "text",
    ["2F5", "2SEND_F5", "3RECV_F5", "3SEND_B5", "2RECV_B5", "2UNSHARD", "2RESHARD", "2REDUCE_GRAD", "10REDUCE_GRAD"],
)
def test_actions_print_and_parse_as_torchs(text):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    a = Action.parse(text)
    assert str(a) == text and Action.parse(str(a)) == a
    theirs = schedules._Action.from_str(text)
    assert (theirs.stage_index, theirs.computation_type.value, theirs.microbatch_index) == (a.stage, a.op, a.mb)


@pytest.mark.parametrize("text", ["0UNSHARD3", "0SEND_F", "0F", "0SEND_X1", "UNSHARD"])
def test_what_is_not_an_action_is_refused(text):
    with pytest.raises(ValueError, match="is not an action"):
        Action.parse(text)


# -- written out, checked, simulated ------------------------------------------------------------
@pytest.mark.parametrize("kind,p,v", TRAINING)
def test_every_kind_written_out_runs_as_its_computations_do(kind, p, v):
    k = kinds.get(kind)
    m = next(m for m in (2 * p, 4 * p) if kinds.unsuited(k, p, m, v) is None)
    s = make_schedule(kind, p, m, v)
    x = lowered(kind, p, m, v)
    assert x.computations == s.actions and x.messages == s.messages
    sends = sum(a.op in SENDS_AND_RECEIVES for acts in x.actions for a in acts)
    assert sends == 2 * len(s.messages)  # one send and one receive each
    assert sum(a.op in FSDP for acts in x.actions for a in acts) == 3 * s.n_stages
    assert Schedule.from_text(x.to_text()) == x
    costs = Costs(forward=1.0, backward=2.0, latency=0.25, activation_bytes=8.0, bandwidth=16.0)

    def computed(trace):
        return sorted((e.rank, e.action, e.start, e.end) for e in trace.events if e.action.op in COMPUTE)

    assert computed(simulate(x, costs)) == computed(simulate(s, costs))


def test_torchs_own_dry_run_accepts_the_written_sends_and_receives():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    for kind, p, v in (("1f1b", 4, 1), ("interleaved", 2, 2), ("zb-v", 2, 2), ("zb-h1", 3, 1)):
        x = with_sends_and_receives(make_schedule(kind, p, 2 * p, v))  # torch's dry run knows no FSDP actions
        order = {r: [schedules._Action.from_str(str(a)) for a in acts] for r, acts in enumerate(x.actions)}
        schedules._simulate_comms_compute(order, lambda s: x.placement[s], x.n_stages)  # raises if it cannot finish


def test_a_send_leaves_where_it_is_written():
    """Moved later, 0SEND_F0 makes 1F0 wait for 0F1 too; moved after 0B0, which waits on rank 1,
    it deadlocks."""
    x = with_sends_and_receives(make_schedule("1f1b", 2, 4))
    later = validate(edited(x, 0, lambda t: moved(t, "0SEND_F0", after="0SEND_F1")))
    start = {e.action: e.start for e in simulate(later).events}
    assert start[Action.parse("1F0")] == start[Action.parse("0SEND_F1")] == 2.0
    assert start[Action.parse("1F0")] > {e.action: e.start for e in simulate(x).events}[Action.parse("1F0")]
    assert "deadlock" in rejected(edited(x, 0, lambda t: moved(t, "0SEND_F0", after="0B0")))


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda t: [c for c in t if c != "0SEND_F1"], "but not 0SEND_F1"),
        (lambda t: moved(t, "0SEND_F1", after="0F0"), "sends 0SEND_F1 before it computes 0F1"),
        (lambda t: t + ["0SEND_F3"], "0SEND_F3 appears twice"),
        (lambda t: t + ["0SEND_B0"], "there is no stage -1"),
    ],
)
def test_sends_are_where_they_belong(change, words):
    assert words in rejected(edited(with_sends_and_receives(make_schedule("1f1b", 2, 4)), 0, change))


def test_a_gradient_sent_to_stage_0_of_a_forward_only_schedule_is_named_as_one_no_computation_moves():
    """Stage 0 exists (its peer is named apart from a stage that does not): there is just no gradient."""
    x = with_sends_and_receives(make_schedule("inference", 2, 2))
    assert "runs 1SEND_B0, but no computation of the schedule moves that (a forward-only schedule has no" in rejected(
        edited(x, 1, lambda t: t + ["1SEND_B0"])
    )


def test_receives_come_before_what_needs_them_and_nothing_crosses_within_a_rank():
    x = with_sends_and_receives(make_schedule("1f1b", 2, 4))
    assert "receives 1RECV_F2 after 1F2" in rejected(edited(x, 1, lambda t: moved(t, "1RECV_F2", after="1F2")))
    assert "but not 1RECV_F2" in rejected(edited(x, 1, lambda t: [c for c in t if c != "1RECV_F2"]))
    v = with_sends_and_receives(make_schedule("zb-v", 2, 4, 2))  # stages 1 and 2 share rank 1
    assert "stage 2 lives on rank 1 too" in rejected(edited(v, 1, lambda t: moved(t, "1SEND_F0", after="1F0")))


def test_written_and_derived_sends_do_not_mix():
    x = with_sends_and_receives(make_schedule("1f1b", 2, 4))
    half = edited(x, 1, lambda t: [c for c in t if "SEND" not in c and "RECV" not in c])
    assert "write every one, or none" in rejected(half)


@pytest.mark.parametrize(
    "change,words",
    [
        (
            lambda t: moved(t, "0RESHARD", after="0B2"),
            "runs 0B3 while stage 0's parameters are sharded",
        ),  # a reshard early
        (
            lambda t: moved(t, "0UNSHARD", after="0F0"),
            "runs 0F0 while stage 0's parameters are sharded",
        ),  # an unshard late
        (lambda t: ["0UNSHARD"] + t, "unshards stage 0 twice"),
        (lambda t: t + ["0UNSHARD", "0RESHARD"], "no computation of the stage between"),
        (lambda t: [c for c in t if c != "0RESHARD"], "never reshards stage 0"),
        (lambda t: moved(t, "0REDUCE_GRAD", after="0B2"), "before its last backward 0B3"),
        (lambda t: [c for c in t if c != "0REDUCE_GRAD"], "stage 0 never reduces its gradients"),
        (lambda t: [c for c in t if c not in ("0UNSHARD", "0RESHARD")], "stage 0 computes without an UNSHARD"),
    ],
)
def test_fsdp_actions_mean_what_torchs_runtime_does_with_them(change, words):
    x = with_fsdp(make_schedule("1f1b", 2, 4))
    validate(edited(x, 0, lambda t: t))  # the unchanged one passes
    validate(edited(x, 0, lambda t: moved(t, "0REDUCE_GRAD", after="0RESHARD")))  # torch's runtime runs it alike
    assert words in rejected(edited(x, 0, change))


def test_a_stage_may_be_gathered_and_freed_more_than_once():
    """torch's own lowering evicts a stage to make room and unshards it again."""
    x = with_fsdp(make_schedule("gpipe", 2, 2))
    again = edited(
        x, 0, lambda t: ["0UNSHARD", "0F0", "0F1", "0RESHARD", "0UNSHARD", "0B0", "0B1", "0REDUCE_GRAD", "0RESHARD"]
    )
    assert validate(again) is again


def test_a_forward_only_schedule_has_no_gradients_to_reduce_or_send():
    serve = make_schedule("inference", 2, 4)
    assert "no gradients to reduce" in rejected(
        Schedule.build(
            "custom",
            2,
            4,
            1,
            [["0UNSHARD", *serve.tokens(0), "0REDUCE_GRAD", "0RESHARD"], ["1UNSHARD", *serve.tokens(1), "1RESHARD"]],
        )
    )
    sent = with_sends_and_receives(serve)
    assert "a forward-only schedule has no gradients" in rejected(
        Schedule.build("custom", 2, 4, 1, [sent.tokens(0) + ["0RECV_B0"], sent.tokens(1)])
    )


def test_a_pair_stays_whole_when_written_out():
    s = make_schedule("dualpipe-v", 2, 4, 2)
    x = lowered("dualpipe-v", 2, 4, 2)
    assert len(x.paired) == len(s.paired)
    assert all(x.actions[r][i].op == "F" and x.actions[r][i + 1].op in ("B", "I") for r, i in x.paired)


# -- drawn, exported ------------------------------------------------------------------------------
def test_the_timeline_marks_every_written_action():
    from minipipe.viz import timeline

    x = lowered("1f1b", 2, 4)
    marks = [d for d in timeline(simulate(x)).data if d.type == "scatter"]
    assert {d.name.split()[0] for d in marks} == {str(t) for t in SENDS_AND_RECEIVES | FSDP}
    assert sum(len(d.x) for d in marks) == sum(a.op not in COMPUTE for acts in x.actions for a in acts)
    assert not [d for d in timeline(simulate(make_schedule("1f1b", 2, 4))).data if d.type == "scatter"]


def test_a_pp_fsdp_schedule_exports_to_torchs_compute_comms_csv():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from minipipe.frameworks.torch_runtime import csv_format, from_csv, to_csv

    plain, fsdp = make_schedule("interleaved", 2, 4, 2), with_fsdp(make_schedule("interleaved", 2, 4, 2))
    assert (csv_format(plain), csv_format(fsdp)) == ("compute_only", "compute_comms")
    text = to_csv(fsdp)  # its sends and receives written, as torch needs there
    back = from_csv(text)
    assert back.actions == with_sends_and_receives(fsdp).actions and back.placement == fsdp.placement
    for row, mine in zip(text.splitlines(), back.actions):
        assert [str(schedules._Action.from_str(cell)) for cell in row.split(",")] == [str(a) for a in mine]


def test_each_send_and_receive_names_the_computation_whose_result_it_moves():
    from minipipe.schedule.ops import BACKWARD_INPUT, FULL_BACKWARD, RECV_B, RECV_F, SEND_B, SEND_F, producer_of

    def grad(stage, mb):  # as a schedule that splits some backwards (stage 3's, and micro-batch 4's), not all
        return BACKWARD_INPUT if stage == 3 or mb == 4 else FULL_BACKWARD

    assert producer_of(Action(SEND_F, 2, 3), grad) == Action("F", 2, 3)
    assert producer_of(Action(SEND_B, 2, 3), grad) == Action("B", 2, 3)
    assert producer_of(Action(SEND_B, 2, 4), grad) == Action("I", 2, 4)
    assert producer_of(Action(RECV_F, 2, 3), grad) == Action("F", 1, 3)  # the stage before's forward
    assert producer_of(Action(RECV_B, 2, 3), grad) == Action("I", 3, 3)  # the stage after's input gradient
    assert producer_of(Action(RECV_B, 1, 3), grad) == Action("B", 2, 3)
    assert producer_of(Action(RECV_B, 1, 4), grad) == Action("I", 2, 4)
