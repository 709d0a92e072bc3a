"""Every way a minipipe command can end is one message on stderr and a documented exit code, never
a traceback: bad input exits 2 before anything runs (output paths included), a run that failed
exits 1 with the engine's own words, Ctrl-C exits 130. What would print an empty table or quietly
ignore an option is refused."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import minipipe.engine.launch as launch
import minipipe.engine.workers as workers
from minipipe.cli import EXIT_CODES, build_parser, main
from minipipe.engine.checkpoint import CheckpointError
from minipipe.engine.workers import WorkerError
from tests.support.processes import workers_alive


@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """Fail if anything started processes; run in an empty folder and check it stays empty."""
    monkeypatch.setattr(workers, "launch", lambda *a, **k: pytest.fail("processes were started for bad input"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert list(tmp_path.iterdir()) == [], "bad input left files behind"


def ends(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["compare", "--world", "0"], r"world must be a whole number >= 1 \(processes\), got 0"),
        (["compare", "--world", "-3"], r"world must be a whole number >= 1 \(processes\), got -3"),
        (["plan", "--top", "0"], r"--top must be a whole number >= 1 .*got 0"),
        (["serve", "--poisson"], r"poisson arrivals need a rate: give --rate"),
        (["simulate", "--forward", "0", "--backward", "0"], r"forward and backward are both 0"),
        (["train", "--trace", "{tmp}/a-file/trace.json"], r"--trace: .*a-file' is a file, so no file can be made"),
        (["train", "--json", "/proc/minipipe/out.json"], r"--json: cannot write in '/proc'"),
        (["train", "--trace", "{tmp}"], r"--trace .* is a folder; give a file name"),
        (["serve", "--trace", "/proc/minipipe/t.json"], r"--trace: cannot write in '/proc'"),
        (["simulate", "--chrome", "/proc/minipipe/t.json"], r"--chrome: cannot write in '/proc'"),
    ],
)
def test_bad_input_exits_2_with_one_message_before_anything_runs(no_launch, capsys, argv, message):
    if any("a-file" in a for a in argv):
        (no_launch / "a-file").write_text("")
    argv = [a.format(tmp=no_launch) for a in argv]
    code, err = ends(argv, capsys)
    assert code == 2 and re.search(message, err), err
    assert err.startswith(f"minipipe {argv[0]}: error: ") and err.count("\n") == 1, err
    for leftover in no_launch.iterdir():
        leftover.unlink()


@pytest.mark.parametrize(
    "config,size,note",
    [
        (
            dict(requests=8, microbatch=100),
            8,
            "microbatch=100 is more than the 8 requests: serving them as one micro-batch of 8",
        ),
        (
            dict(prompts=[[1, 2]], microbatch=3),
            1,
            "microbatch=3 is more than the 1 prompt: serving them as one micro-batch of 1",
        ),
        (dict(requests=8, microbatch=8), 8, None),
    ],
)
def test_serving_never_reports_micro_batches_larger_than_what_it_serves(config, size, note):
    from minipipe.serve.api import GenerateConfig, ServeConfig, prepare

    plan = prepare((GenerateConfig if "prompts" in config else ServeConfig)(p=2, **config))
    assert plan.config.microbatch == size and plan.note == note
    rows = plan.work.inputs if "requests" in config else plan.work.prompts
    assert len(rows) == size  # no rows padded in that nobody asked for


@pytest.mark.parametrize(
    "error,code,message",
    [
        (
            WorkerError(
                "rank 1 died (killed by signal 9) in step 3, running 1F2.\nwhere each rank was:\n  rank 0: ..."
            ),
            1,
            r"minipipe train: rank 1 died \(killed by signal 9\) in step 3, running 1F2\.\nwhere each rank was",
        ),
        (
            CheckpointError("saving the checkpoint of step 4 in ckpt failed: no space left on device"),
            2,
            r"minipipe train: error: saving the checkpoint of step 4 .*no space left on device",
        ),
        (
            OSError(28, "No space left on device", "runs/trace.json"),
            1,
            r"minipipe train: runs/trace\.json: no space left on device",
        ),
        (KeyboardInterrupt(), 130, r"minipipe train: interrupted \(Ctrl-C\); every worker process was stopped"),
    ],
)
def test_a_run_that_fails_ends_with_its_message_and_exit_code(monkeypatch, tmp_path, capsys, error, code, message):
    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(launch, "run", fails)
    monkeypatch.chdir(tmp_path)
    got, err = ends(["train", "--steps", "2"], capsys)
    assert got == code and re.search(message, err), err


def test_the_exit_codes_are_documented_in_the_help_and_the_readme():
    readme = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
    text = build_parser().format_help()
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"\b{code}\b[^\n]*{re.escape(meaning.split(':')[0])}", text), (code, text)
        assert re.search(rf"\b{code}\b[^\n]*{re.escape(meaning.split(':')[0])}", readme), code
    assert set(EXIT_CODES) == {0, 1, 2, 130}


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_ctrl_c_while_training_stops_the_run_with_one_line_and_no_process_left(tmp_path):
    before = workers_alive()
    proc = subprocess.Popen(
        [sys.executable, "-m", "minipipe", "train", "--steps", "100000", "--trace", str(tmp_path / "t.json")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen = ""
    while "loss=" not in seen and proc.poll() is None:  # the progress bar shows a step's loss: training
        seen += proc.stderr.read(1)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "minipipe train: interrupted (Ctrl-C)" in err, err
    deadline = time.monotonic() + 10
    while workers_alive() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers_alive() - before
