"""`make check`'s --no-processes (tests/support/no_processes.py): a test that starts a process fails,
naming what it started; one that starts none, or only looks for a program that is not there,
passes; one marked `distributed` is not run."""

import os
import subprocess
import sys

import pytest

from tests.support.notebooks import REPO

INNER_CONFTEST = """
from tests.support.no_processes import NoProcesses


def pytest_configure(config):
    config.addinivalue_line("markers", "distributed: starts processes")
    config.pluginmanager.register(NoProcesses().install(), "no-processes")
"""
INNER_TESTS = """
import multiprocessing
import subprocess
import sys

import pytest


def test_starts_nothing():
    assert sum(range(3)) == 3


def test_looks_for_a_program_that_is_not_there():
    with pytest.raises(FileNotFoundError):
        subprocess.run(["no-such-program-anywhere"])


def test_runs_a_program():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_a_worker():
    worker = multiprocessing.get_context("spawn").Process(target=print, name="the-worker")
    worker.start()
    worker.join()


@pytest.mark.distributed
def test_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_test_that_starts_a_process_fails_and_says_what(tmp_path):
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    paths = [str(REPO), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, COLUMNS="1000", PYTHONPATH=os.pathsep.join(filter(None, paths)))  # summary lines whole
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-m", "not distributed", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    said = done.stdout + done.stderr
    errors = {line.split(" - ")[0].split("::")[-1]: line for line in said.splitlines() if line.startswith("ERROR ")}
    assert set(errors) == {"test_runs_a_program", "test_starts_a_worker"}, said[-3000:]
    assert f"`{sys.executable} -c pass`" in errors["test_runs_a_program"], errors
    assert "a multiprocessing process (the-worker)" in errors["test_starts_a_worker"], errors
    assert "mark it @pytest.mark.distributed" in errors["test_starts_a_worker"], errors
    assert "1 deselected" in said and done.returncode == 1, said[-3000:]
