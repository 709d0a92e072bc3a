"""Each notebook executed once per run: nbval checks it, and the HTML export and the site read
the copy that run left.

nbval (`--nbval-lax --nbval-current-env`, pyproject.toml) runs each notebook of `testpaths` cell
by cell in a kernel started in the notebook's folder, and keeps no outputs. `Recorder`, a pytest
plugin that tests/conftest.py registers, listens to the messages nbval reads from that kernel and
hands those of each cell to nbclient, the library `jupyter nbconvert --execute` runs on: outputs,
display updates, cleared outputs, Output widgets and widget state land in a copy of the notebook
as nbconvert would write them. When every code cell of a notebook has passed, the copy is written
to artifacts/executed/ under the notebook's own path (artifacts/executed/lessons/00_start_here.ipynb).

A test that reads executed notebooks asks for the `executed` fixture (below; tests/conftest.py
brings it) and runs after nbval's cells: the plugin orders it so. A notebook nbval did not run to the end in this run
(a test run alone, `-k`) is executed when first asked for, once, by site/build.py's `execute()`;
one whose cell failed under nbval fails each test that asks for it, naming that cell, and is not
run again. Copies left by an earlier run are never read.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete
from nbval.plugin import IPyNbCell

from tests.support.notebooks import REPO

EXECUTED = REPO / "artifacts" / "executed"
PLUGIN = "minipipe-executed-notebooks"  # the Recorder's name, as registered


@functools.cache
def site_builder():
    """site/build.py, a script: its `execute()`, `lessons()`, `build()`…"""
    spec = importlib.util.spec_from_file_location("site_build", REPO / "site" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recording:
    """A copy of one notebook, filled by nbclient from the messages of nbval's kernel."""

    def __init__(self, file):
        self.nb = copy.deepcopy(file.nb)  # nbval's own stays as committed: it compares against it
        self.code = [i for i, cell in enumerate(self.nb.cells) if cell.cell_type == "code"]
        self.passed: set[int] = set()
        self.executed = 0  # cells run so far
        # A client with no kernel of its own: it only processes messages. nbval's kernel client
        # lets it answer an Output widget as a front-end (and nbconvert) does.
        self.client = NotebookClient(self.nb, record_timing=False)
        self.client.kc = file.kernel.kc

    @property
    def complete(self) -> bool:
        return self.passed == set(range(len(self.code)))

    @contextlib.contextmanager
    def listening(self, item: IPyNbCell):
        """While nbval runs `item`, one code cell: the messages its execution caused, to nbclient,
        as nbclient's own execute_cell() would pass them."""
        index = self.code[item.cell_num]
        cell = self.nb.cells[index]
        cell.outputs, self.client.clear_before_next_output = [], False
        file, kernel, requests = item.parent, item.parent.kernel, []
        send, receive = kernel.execute_cell_input, file.get_kernel_message

        def execute(*args, **kwargs):
            requests.append(send(*args, **kwargs))
            return requests[-1]

        def get_message(*args, **kwargs):
            msg = receive(*args, **kwargs)
            if msg["parent_header"].get("msg_id") in requests:
                with contextlib.suppress(CellExecutionComplete):  # the kernel went idle
                    self.client.process_message(msg, cell, index)
            return msg

        kernel.execute_cell_input, file.get_kernel_message = execute, get_message
        try:
            yield
        finally:
            del kernel.execute_cell_input, file.get_kernel_message  # nbval's own methods again
            # nbval executes with store_history=False, so the kernel counts no cells: number them
            # as a kernel that keeps history (nbconvert's) does
            self.executed += 1
            cell.execution_count = self.executed
            for output in cell.outputs:
                if output.output_type == "execute_result":
                    output.execution_count = self.executed

    def write(self, path: Path) -> Path:
        self.client.set_widgets_metadata()
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(self.nb, path)
        return path


class Recorder:
    """The plugin: records what nbval runs, and hands out executed notebooks (those under `root`,
    their copies under `out`)."""

    def __init__(self, root: Path = REPO, out: Path = EXECUTED):
        self.root, self.out = root, out
        self.recordings: dict[Path, Recording] = {}  # notebook -> its copy, while nbval runs it
        self.done: dict[Path, Path] = {}  # notebook -> its executed copy, from this run
        self.failed: dict[Path, str] = {}  # notebook -> its first failing cell, "Cell N"

    def copy_path(self, notebook: Path) -> Path:
        """Where the executed copy of a notebook goes: under `out`, by its path under `root`."""
        return self.out / notebook.resolve().relative_to(self.root)

    def pytest_itemcollected(self, item):
        if isinstance(item, IPyNbCell):
            item.add_marker(pytest.mark.distributed)  # a notebook starts a kernel, and most start workers

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        """The tests that read executed notebooks after every other, nbval's cells among them."""
        readers = [item for item in items if "executed" in getattr(item, "fixturenames", ())]
        ids = set(map(id, readers))
        items[:] = [item for item in items if id(item) not in ids] + readers

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if not isinstance(item, IPyNbCell):
            return (yield)
        notebook = item.parent.path.resolve()
        if notebook not in self.recordings:
            self.recordings[notebook] = Recording(item.parent)
            self.done.pop(notebook, None)
            self.failed.pop(notebook, None)
            self.copy_path(notebook).unlink(missing_ok=True)
        recording = self.recordings[notebook]
        try:
            with recording.listening(item):
                result = yield
            recording.passed.add(item.cell_num)
            return result
        except Exception:  # a skipped cell (BaseException) is no failure
            self.failed.setdefault(notebook, item.name)
            raise
        finally:
            if item.cell_num == len(recording.code) - 1:  # its last cell: the copy, if all passed
                del self.recordings[notebook]
                if recording.complete:
                    self.done[notebook] = recording.write(self.copy_path(notebook))

    def copy_of(self, notebook: Path) -> Path:
        """The executed copy of `notebook` from this run; executed now if nbval did not run it."""
        notebook = notebook.resolve()
        name = notebook.relative_to(self.root)
        if notebook in self.failed:
            pytest.fail(
                f"{name} failed in this run ({self.failed[notebook]}; see its test): no executed copy to read",
                pytrace=False,
            )
        if notebook not in self.done:
            builder = site_builder()
            try:
                self.done[notebook] = builder.execute(notebook, self.copy_path(notebook))
            except builder.NotebookFailed as e:
                self.failed[notebook] = f"Cell {e.cell}"
                pytest.fail(str(e), pytrace=False)
        return self.done[notebook]


@pytest.fixture(scope="session")
def executed(pytestconfig):
    """`executed(notebook)`: the path of the notebook's executed copy from this run."""
    return pytestconfig.pluginmanager.get_plugin(PLUGIN).copy_of
