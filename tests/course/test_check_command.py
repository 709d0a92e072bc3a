"""`minipipe check` never hangs and never leaves a process: a cell that never returns, an answer
that loops when the check calls it, a sandbox that dies, SIGTERM; and it refuses, before anything
runs, timeouts that cannot work, files that are not notebooks, and what is not a regular file (a
FIFO would block a reader forever). Its exit codes are the README's: 0 all passed, 1 one did not,
2 bad input, 128 + the signal's number when stopped."""

import os
import signal
import subprocess
import sys
import time

import pytest

from minipipe.cli import main
from minipipe.course.grading import procs
from minipipe.course.grading.run import grade_notebook
from tests.support.handed_in import handed_in
from tests.support.notebooks import REPO

SLACK = 60.0  # a judge's start (torch imported, the domain built) and stop on a busy 2-core machine
EXERCISE = "02_write_gpipe"


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_timeouts_that_cannot_work_are_refused(tmp_path, capsys, timeout):
    path = handed_in(tmp_path / f"{EXERCISE}.ipynb", EXERCISE)
    assert main(["check", "--timeout", timeout, str(path)]) == 2
    assert "it must be a number > 0" in capsys.readouterr().err


def test_a_file_that_is_not_a_notebook_has_its_own_message(tmp_path, capsys):
    assert main(["check", str(REPO / "README.md")]) == 2
    assert "README.md is not a notebook (a .ipynb file)" in capsys.readouterr().err
    bad = tmp_path / "01_broken.ipynb"
    bad.write_text("hello")
    assert main(["check", str(bad)]) == 2
    assert "is not a Jupyter notebook" in capsys.readouterr().err


NOT_FILES = {
    "fifo": "is a FIFO (named pipe), not a notebook file; it was not read",
    "device": "is a device, not a notebook file; it was not read",
    "folder of no notebooks": "no exercise notebooks (NN_name.ipynb) in",
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", NOT_FILES)
@pytest.mark.timeout(30)
def test_what_is_not_a_regular_file_is_refused_at_once_and_never_read(tmp_path, capsys, kind):
    path = tmp_path / f"{EXERCISE}.ipynb"
    if kind == "fifo":
        os.mkfifo(path)  # opened for reading the usual way, it blocks until a writer comes: never
    elif kind == "device":
        path.symlink_to("/dev/zero")  # read to its end, it never ends
    else:
        path.mkdir()  # a folder is searched for notebooks
    started = time.monotonic()
    assert main(["check", str(path)]) == 2
    assert NOT_FILES[kind] in capsys.readouterr().err
    assert time.monotonic() - started < 5


def test_a_notebook_that_is_no_exercise_is_named(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "99_mine.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="is not one of the course's exercises"):
        grade_notebook(path)


HANGS = {
    "a cell that never returns": dict(added_before=["while True:\n    pass"]),
    "a cell that sleeps": dict(added_before=["import time\ntime.sleep(3600)"]),
    "an answer that loops when called": dict(answer="def gpipe(p, m):\n    while True:\n        x = sum(range(10))\n"),
}


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", HANGS)
def test_what_never_returns_ends_the_check_with_its_verdict(tmp_path, how):
    path = handed_in(tmp_path / f"{EXERCISE}.ipynb", EXERCISE, **HANGS[how])
    start = time.monotonic()
    result = grade_notebook(path, timeout=3)
    assert time.monotonic() - start < 3 + SLACK
    assert result.status == "timed out", result
    assert "did not finish within 3 s" in result.text, result.text
    if how != "an answer that loops when called":
        stuck = next(c for c in result.cells if c.status == "timed out")
        assert stuck.label.endswith("(yours)")


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_sandbox_that_dies_is_named_at_once(tmp_path, capsys):
    path = handed_in(tmp_path / f"{EXERCISE}.ipynb", EXERCISE, added_before=["import os\nos._exit(3)"])
    start = time.monotonic()
    assert main(["check", "--timeout", "600", str(path)]) == 1
    assert time.monotonic() - start < SLACK
    out = capsys.readouterr().out
    assert "died: the process running your code ended" in out and "(exit code 3)" in out, out


def _carriers() -> set[int]:
    """Processes of any grading (they carry the token in their environment)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if (procs.TOKEN + "=").encode() in f.read():
                        found.add(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_ends_the_check_and_every_process_of_it(tmp_path):
    path = handed_in(tmp_path / f"{EXERCISE}.ipynb", EXERCISE, added_before=["while True:\n    pass"])
    before = _carriers()
    proc = subprocess.Popen(
        [sys.executable, "-m", "minipipe", "check", "--timeout", "600", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        while len(_carriers() - before) < 2 and time.monotonic() < deadline:  # the judge and its sandbox
            time.sleep(0.2)
        grading = _carriers() - before
        assert len(grading) >= 2, "the check started no judge and sandbox"
        time.sleep(1)  # the sandbox is in the endless cell now
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in out
    time.sleep(0.2)
    assert not (grading & _carriers()), "a process of the check outlived it"
