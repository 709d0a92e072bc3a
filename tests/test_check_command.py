"""`minipipe check` never hangs: a cell that never returns, an endless loop in a called function, a
kernel that dies, SIGTERM; and it refuses, before any kernel starts, timeouts that cannot work and
files that are not notebooks."""
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest
from notebooks import REPO

from minipipe.cli import main
from minipipe.course.exercises.notebook import GRACE, run_notebook

SLACK = 20.0      # a kernel's start and stop on a busy 2-core machine


def notebook(tmp_path, *cells, name="01_mine.ipynb"):
    """A notebook of (source, is_check) cells."""
    nb = nbformat.v4.new_notebook()
    for source, check in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = ["check"] if check else []
        nb.cells.append(cell)
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_timeouts_that_cannot_work_are_refused(tmp_path, capsys, timeout):
    path = notebook(tmp_path, ("1", True))
    assert main(["check", "--timeout", timeout, str(path)]) == 2
    assert "it must be a number > 0" in capsys.readouterr().err


def test_a_file_that_is_not_a_notebook_has_its_own_message(tmp_path, capsys):
    assert main(["check", str(REPO / "README.md")]) == 2
    assert "README.md is not a notebook (a .ipynb file)" in capsys.readouterr().err
    bad = tmp_path / "01_broken.ipynb"
    bad.write_text("hello")
    assert main(["check", str(bad)]) == 2
    assert "is not a Jupyter notebook" in capsys.readouterr().err


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cells", [
    [("x = 1", False), ("while True:\n    pass", True)],
    [("def stuck():\n    while True:\n        x = sum(range(10))", False), ("stuck()\nprint('never')", True)],
    [("import time\ntime.sleep(3600)", False), ("print('never')", True)],
], ids=["a cell that never returns", "an endless loop in a called function", "a cell that sleeps"])
def test_a_cell_that_never_returns_ends_the_check_with_its_verdict(tmp_path, cells):
    start = time.monotonic()
    result = run_notebook(notebook(tmp_path, *cells), timeout=3)
    assert time.monotonic() - start < 3 + GRACE + SLACK
    assert result.status == "timed out"
    stuck = next(c for c in result.cells if c.status == "timed out")
    assert "did not finish within 3 s" in stuck.text
    assert all(c.status == "not run" for c in result.checks if c.index > stuck.index)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_kernel_that_dies_is_named(tmp_path, capsys):
    path = notebook(tmp_path, ("import os\nos._exit(0)", False), ("print('never')", True))
    start = time.monotonic()
    assert main(["check", "--timeout", "60", str(path)]) == 1
    assert time.monotonic() - start < SLACK
    out = capsys.readouterr().out
    assert "kernel died" in out and "not run: cell 1 stopped the notebook" in out


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_ends_the_check_and_its_kernel(tmp_path):
    path = notebook(tmp_path, ("while True:\n    pass", True))
    proc = subprocess.Popen([sys.executable, "-m", "minipipe", "check", "--timeout", "600", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 60
        while not _children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        kernels = _children(proc.pid)
        assert kernels, "the check started no kernel"
        time.sleep(2)                               # the kernel is in the endless cell now
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=GRACE + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in out
    assert not any(_alive(k) for k in kernels), "the kernel outlived the check"
