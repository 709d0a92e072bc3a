"""minipipe's schedules in torch's CSV, and torch's _PipelineScheduleRuntime running them on gloo
with minipipe's executor's losses, bit for bit, in minipipe's order."""

import pytest

from minipipe import Schedule, make_schedule
from minipipe.frameworks.timeline import order_of, planned
from minipipe.frameworks.torch_runtime import from_csv, runtime_runs, to_csv
from minipipe.schedule.lowering import with_sends_and_receives
from tests.support.frameworks import RUNS, executor, need

need("torch")

KINDS = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)]


@pytest.mark.parametrize("kind,v", KINDS + [("inference", 1)])
def test_csv_is_torchs_format_and_reads_back(kind, v):
    from torch.distributed.pipelining.schedules import _Action

    schedule = make_schedule(kind, 4, 8, v)
    text = to_csv(schedule)
    rows = [line.split(",") for line in text.splitlines()]
    assert len(rows) == schedule.p
    for mine, row in zip(schedule.actions, rows):
        assert [str(_Action.from_str(cell)) for cell in row] == [str(a) for a in mine]  # torch's own parser
    back = from_csv(text)
    assert (back.p, back.m, back.v, back.placement) == (schedule.p, schedule.m, schedule.v, schedule.placement)
    assert planned(back) == planned(schedule)


def test_from_csv_reads_a_placement_and_refuses_a_stage_on_two_ranks():
    v_shape = Schedule.custom([["0F0", "3F0", "3B0", "0B0"], ["1F0", "2F0", "2B0", "1B0"]], v=2, placement=[0, 1, 1, 0])
    assert from_csv(to_csv(v_shape)).placement == (0, 1, 1, 0)
    with pytest.raises(ValueError, match="stage 0 has actions on ranks 0 and 1"):
        from_csv("0F0,0B0\n0F1,0B1\n")
    with pytest.raises(ValueError, match="no rows"):
        from_csv("\n")


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_torchs_runtime_trains_minipipes_schedules_with_the_executors_losses():
    names = ("1f1b", "interleaved", "zb-h1", "zb-v", "last-first")  # the last: a schedule of your own
    written = RUNS["zb-h1"].replace(schedule=with_sends_and_receives(make_schedule("zb-h1", 2, 4)))  # as written
    runs = runtime_runs([*(RUNS[n] for n in names), written])
    for name, run in zip((*names, "zb-h1"), runs):
        assert run.losses == executor(name).losses, name  # bit for bit
        for trace in run.traces:  # torch ran minipipe's lists, in order
            assert order_of(trace) == planned(run.plan.schedule), name
        lowered = [a for a in run.lowered[0] if "SEND" in a or "RECV" in a]
        assert lowered, "torch adds the sends and receives when it lowers the CSV"
        if run.plan.schedule.explicit_comms:  # written: torch runs it as it is
            assert run.lowered == {r: row.split(",") for r, row in enumerate(to_csv(run.plan.schedule).splitlines())}
    with pytest.raises(ValueError, match="tp=2"):
        runtime_runs([RUNS["1f1b"].replace(tp=2)])
