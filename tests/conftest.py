"""Plugins for the whole suite: executed notebooks (tests/support/executed_notebooks.py), the core's
refusals compared whole (tests/support/refusals.py), with --no-processes (`make check`) a test that
starts a process fails (tests/support/no_processes.py), and under mutmut minipipe's caches start empty."""

import functools
import gc
import os

import pytest

from tests.support import refusals
from tests.support.executed_notebooks import PLUGIN, Recorder, executed  # noqa: F401  (a fixture, for every test)
from tests.support.no_processes import NoProcesses


@pytest.fixture
def kernel(monkeypatch):
    """An IPython shell that passes for a kernel: displays are captured, cells can be 'run'."""
    from IPython.core.interactiveshell import InteractiveShell

    from minipipe.viz import offline

    shell = InteractiveShell.instance()
    monkeypatch.setattr(offline, "in_kernel", lambda: True)
    yield shell
    offline._displayed.clear()


@pytest.fixture(autouse=True)
def refusals_in_full(request, monkeypatch):
    """The refusals a test of the torch-free core expects, compared whole with its snapshot (hypothesis's
    tests left out: their draws differ from run to run). After changing a message: `pytest PATH
    --snapshot-update`, and read the diff of __snapshots__/ before committing it."""
    where = request.node.path.relative_to(request.config.rootpath).as_posix()
    if not where.startswith(refusals.AREAS) or getattr(request.function, "is_hypothesis_test", False):
        yield
        return
    snapshot = request.getfixturevalue("snapshot")
    monkeypatch.setattr(pytest, "raises", refusals.recording(pytest.raises))
    refusals.SAID = []
    yield
    said, refusals.SAID = refusals.SAID, None
    if said:
        assert said == snapshot


def pytest_addoption(parser):
    parser.addoption(
        "--no-processes",
        action="store_true",
        help="fail each test that starts a process (`make check`: mark such tests `distributed`)",
    )


def pytest_sessionstart(session):
    # mutmut forks each mutant's worker from a process that has collected the tests: a cache that
    # collection filled (evaluate.predictor, timing.checked_schedule, ...) would answer with the
    # unmutated code and hide the mutant
    if "MUTANT_UNDER_TEST" in os.environ:
        for cached in gc.get_objects():
            if isinstance(cached, functools._lru_cache_wrapper) and cached.__module__.startswith("minipipe."):
                cached.cache_clear()


def pytest_configure(config):
    # registered, not conftest hooks: they must see nbval's cells in lessons/ and exercises/ too
    config.pluginmanager.register(Recorder(), PLUGIN)
    if config.getoption("no_processes"):
        config.pluginmanager.register(NoProcesses().install(), "minipipe-no-processes")
