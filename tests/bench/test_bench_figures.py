"""`minipipe bench`'s figures and progress: the executor's overhead counted over rank 0's own span;
a bar on a terminal, a line per configuration in a log."""

import io

import pytest

from minipipe import Action, Event, Trace, Wait, make_schedule
from minipipe.bench.cli import BenchProgress
from minipipe.bench.suite import executor_overhead


def test_executor_overhead_is_rank_0s_span_less_its_actions_and_the_waits_inside_it():
    s = make_schedule("gpipe", 2, 1)
    f0, f1, b1, b0 = Action("F", 0, 0), Action("F", 1, 0), Action("B", 1, 0), Action("B", 0, 0)
    events = [Event(0, f0, 0.0, 1.0), Event(1, f1, 1.2, 2.2), Event(1, b1, 2.2, 3.2), Event(0, b0, 3.5, 4.5)]
    waits = [
        Wait(0, "recv", b1, 1.0, 3.4, 1),  # inside rank 0's span: not overhead
        Wait(0, "recv", b1, 3.3, 3.45, 1),  # overlaps the one before: counted once
        Wait(0, "send", None, 4.5, 9.0),
    ]  # the sends' completion after its last action: outside the span
    trace = Trace(s, events, source="measured", waits=waits)
    # span 4.5 ms, actions 2 ms, waits inside 2.45 ms: 0.05 ms over 2 actions
    assert executor_overhead(trace) == pytest.approx(25.0)


def rounds(name, of):
    return [{"kind": "round", "rank": 0, "round": r, "of": of, "name": name} for r in range(of)]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_one_line_per_configuration_and_no_carriage_returns():
    log = io.StringIO()
    progress = BenchProgress(log)
    for event in (
        rounds("small m=4", 17)
        + rounds("small m=8", 17)
        + [{"kind": "round", "rank": 1, "round": 16, "of": 17, "name": "small m=8"}]
    ):
        progress(event)
    progress.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split(":")[1].strip() for line in lines] == ["small m=4", "small m=8"]
    assert all("17 rounds done" in line for line in lines)


def test_a_terminal_gets_a_bar():
    screen = Terminal()
    progress = BenchProgress(screen)
    for event in rounds("small m=4", 3):
        progress(event)
    progress.close()
    assert "\r" in screen.getvalue() and "3round" in screen.getvalue().replace(" ", "")


def test_the_data_parallel_comparison_gives_minipipe_ddps_bucket_size():
    from torch.nn.parallel import distributed as ddp

    from minipipe.bench.dp_tp_vs_torch import DDP_BUCKET_BYTES, mesh_job
    from minipipe.engine.config import RunConfig
    from minipipe.models.catalog import task_of
    from minipipe.parallel.data import assign_buckets

    job = mesh_job()
    assert DDP_BUCKET_BYTES == ddp._DEFAULT_BUCKET_CAP_MB * 1024 * 1024  # torch's own default
    params = [p for layer in task_of(RunConfig(**job.size)).layers() for p in layer.parameters()]
    for name in ("minipipe DP4", "minipipe DP4 (after backward)"):
        assert job.plans[name].config.dp_bucket_bytes == DDP_BUCKET_BYTES
    assert len(assign_buckets(params, DDP_BUCKET_BYTES)) == 2
