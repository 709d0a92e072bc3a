"""`make check` runs the tests that start no process and no browser; with `--no-processes` (which
`make check` passes) a test that starts a process anyway fails, naming what it started.

A process is a program run by subprocess (the CLI, a kernel, any tool), a fork, or a
multiprocessing process (the engine's workers). A test that starts one is marked `distributed`
(one that drives Chromium: `browser`), so that `make check` stays the short inner loop it
promises; `make test` runs every test.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import subprocess
import sys

import pytest

AUDITED = ("os.fork", "os.forkpty", "os.system", "os.posix_spawn", "os.spawn")


class NoProcesses:
    """The plugin (tests/conftest.py registers it with --no-processes)."""

    def __init__(self):
        self.started: list[str] | None = None  # while a test runs: what it started

    def saw(self, what: str) -> None:
        if self.started is not None:
            self.started.append(what)

    def install(self) -> NoProcesses:
        """Watch every way a process starts, for the rest of this pytest process."""
        # jupytext runs `pandoc --version` when first imported: imported now, that counts for no test
        with contextlib.suppress(ImportError):
            import jupytext  # noqa: F401
        guard, popen_init, process_start = self, subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start

        def init(popen, args, *rest, **kwargs):
            popen_init(popen, args, *rest, **kwargs)  # a program that is not there started nothing
            guard.saw(f"`{args if isinstance(args, str) else ' '.join(map(str, args))}`")

        def start(process):
            guard.saw(f"a multiprocessing process ({process.name})")
            return process_start(process)

        subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start = init, start
        sys.addaudithook(lambda event, args: guard.saw(event) if event in AUDITED else None)
        return self

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.started = []
        try:
            return (yield)
        finally:
            self.started = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "teardown" and self.started:
            what = list(dict.fromkeys(self.started))
            report.outcome = "failed"
            report.longrepr = (
                f"started {len(self.started)} process(es): {'; '.join(what[:3])}"
                f"{' …' if len(what) > 3 else ''}. `make check` runs only tests that start none: "
                "mark it @pytest.mark.distributed (`make test` runs it)"
            )
        return report
