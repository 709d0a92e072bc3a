"""Plugins for the whole suite: executed notebooks (tests/support/executed_notebooks.py) and, with
--no-processes (`make check`), a test that starts a process fails (tests/support/no_processes.py)."""

import pytest

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


def pytest_addoption(parser):
    parser.addoption(
        "--no-processes",
        action="store_true",
        help="fail each test that starts a process (`make check`: mark such tests `distributed`)",
    )


def pytest_configure(config):
    # registered, not conftest hooks: they must see nbval's cells in lessons/ and exercises/ too
    config.pluginmanager.register(Recorder(), PLUGIN)
    if config.getoption("no_processes"):
        config.pluginmanager.register(NoProcesses().install(), "minipipe-no-processes")
