"""The torchtitan command for a minipipe schedule: the schedule name torchtitan places the CSV's
stages by (torchtitan/distributed/pipeline_parallel.py reads two facts of torch's class for it:
single-stage or not, V or not), its micro-batches, and its layers per stage."""

import math

import pytest

from minipipe import Schedule, make_schedule
from minipipe.frameworks import torchtitan as tt
from tests.support.frameworks import need

need("torch")

KINDS = [
    ("1f1b", 1),
    ("gpipe", 1),
    ("zb-h1", 1),
    ("interleaved", 2),
    ("interleaved", 3),
    ("bfs", 2),
    ("zb-v", 2),
    ("dualpipe-v", 2),
]


def options(flags: list[str]) -> dict[str, str]:
    assert len(flags) % 2 == 0 and all(f.startswith("--") for f in flags[::2])
    return dict(zip(flags[::2], flags[1::2]))


@pytest.mark.parametrize("kind,v", KINDS)
@pytest.mark.parametrize("p", [2, 4])
def test_the_schedule_name_places_the_stages_as_the_csv_does(kind, v, p):
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleSingle,
        ScheduleDualPipeV,
        ScheduleZBVZeroBubble,
        get_schedule_class,
    )

    schedule = make_schedule(kind, p, 4 * p, v)
    got = options(tt.flags(schedule, "s.csv", microbatch_size=2, num_layers=10))
    cls = get_schedule_class(got["--parallelism.pipeline_parallel_schedule"])  # torch's, as torchtitan asks
    v_shaped = v == 2 and schedule.placement == tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))
    assert (cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV)) == v_shaped == (kind.endswith("-v"))
    assert issubclass(cls, PipelineScheduleSingle) == (v == 1)  # one stage per rank, else 2
    assert got["--parallelism.pipeline_parallel_degree"] == str(p)
    assert got["--parallelism.pipeline_parallel_schedule_csv"] == "s.csv"
    assert int(got["--training.local_batch_size"]) == schedule.m * int(
        got["--parallelism.pipeline_parallel_microbatch_size"]
    )
    if v > 2:  # more than torchtitan's default two: layers per stage say
        size = int(got["--parallelism.pipeline_parallel_layers_per_stage"])
        assert math.ceil((10 + tt.FIRST_LESS + tt.LAST_LESS) / size) == schedule.n_stages
    else:
        assert "--parallelism.pipeline_parallel_layers_per_stage" not in got


def test_layers_per_stage_at_its_limits():
    three = make_schedule("interleaved", 2, 8, 3)  # 6 stages
    assert tt.layers_per_stage(three, 4) == 1  # 4 + 2 = 6 stages of 1
    for layers in (3, 5):  # 5 or 7 in all: no size makes 6
        with pytest.raises(ValueError, match="choose v"):
            tt.layers_per_stage(three, layers)
    with pytest.raises(ValueError, match="give num_layers"):
        tt.flags(three, "s.csv")


def test_a_placement_torchtitan_cannot_build_is_refused():
    crossed = Schedule.custom([["1F0", "2F0", "2B0", "1B0"], ["0F0", "3F0", "3B0", "0B0"]], v=2, placement=[1, 0, 0, 1])
    with pytest.raises(ValueError, match="neither"):
        tt.flags(crossed, "s.csv")


def test_the_command_runs_torchtitans_trainer_on_p_processes():
    schedule = make_schedule("zb-v", 4, 8, 2)
    line = tt.command(schedule, "zb-v.csv")
    assert line[:5] == ["torchrun", "--nproc_per_node", "4", "-m", "torchtitan.train"]
    assert options(line[5:])["--module"] == "llama3" and line[-len(tt.flags(schedule, "zb-v.csv")) :] == tt.flags(
        schedule, "zb-v.csv"
    )
