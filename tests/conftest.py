"""Plugins for the whole suite."""
from executed_notebooks import Recorder


def pytest_configure(config):
    # registered, not a conftest hook: it must see nbval's cells in lessons/ and exercises/ too;
    # it also brings the `executed` fixture
    config.pluginmanager.register(Recorder(), "minipipe-executed-notebooks")
