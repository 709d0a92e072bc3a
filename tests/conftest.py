"""Plugins for the whole suite: executed notebooks (tests/executed_notebooks.py) and, with
--no-processes (`make check`), a test that starts a process fails (tests/no_processes.py)."""
from executed_notebooks import Recorder
from no_processes import NoProcesses


def pytest_addoption(parser):
    parser.addoption("--no-processes", action="store_true",
                     help="fail each test that starts a process (`make check`: mark such tests `distributed`)")


def pytest_configure(config):
    # registered, not conftest hooks: they must see nbval's cells in lessons/ and exercises/ too;
    # the recorder also brings the `executed` fixture
    config.pluginmanager.register(Recorder(), "minipipe-executed-notebooks")
    if config.getoption("no_processes"):
        config.pluginmanager.register(NoProcesses().install(), "minipipe-no-processes")
