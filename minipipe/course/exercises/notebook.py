"""Run a learner's exercise notebook headless and read its verdicts: `minipipe check PATH...`.

Every cell runs, top to bottom, in a fresh kernel of this Python (the one minipipe is installed
in), from the notebook's folder. The check cells (tagged `check`) give the verdicts; an error in
any other cell is reported too, since a check after it cannot be trusted. A notebook passes when
every check cell passed and no cell raised.

A check never hangs. Each cell may run `timeout` seconds: then the kernel is interrupted (and
killed if it does not stop), the cell's verdict says "timed out", and the cells after it are not
run. A kernel that dies (a crash, `os._exit` in a cell) is noticed within a fraction of a second
and named. SIGTERM (and Ctrl-C) end the check and its kernel. The cells are sent to the kernel one
by one and its messages read with short waits, so that all of these are seen while a cell runs.
"""
from __future__ import annotations

import math
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .verdict import FAIL, PASS, TODO

STATUSES = ("passed", "not done yet", "wrong", "error", "timed out", "kernel died", "not run")
MARK = {"passed": PASS, "not done yet": TODO, "wrong": FAIL, "error": FAIL, "timed out": FAIL, "kernel died": FAIL,
        "not run": "·"}
STOPPED = ("kernel died", "timed out")     # a cell that stops the notebook: the cells after it do not run
GRACE = 5.0                                # seconds an interrupted cell has to stop before the kernel is killed
START = 120.0                              # seconds a kernel may take to start


@dataclass
class CellResult:
    index: int               # the cell's position in the notebook, counting from 1
    check: bool              # a check cell
    status: str              # one of STATUSES
    text: str                # the verdict, or the error


@dataclass
class NotebookResult:
    path: Path
    cells: list[CellResult] = field(default_factory=list)

    @property
    def checks(self) -> list[CellResult]:
        return [c for c in self.cells if c.check]

    @property
    def status(self) -> str:
        """passed, or the worst of what went wrong: the kernel died or a cell timed out, an error
        outside a check, a wrong answer, not done yet."""
        for status in STOPPED:
            if any(c.status == status for c in self.cells):
                return status
        if not self.checks:
            return "error"
        others = [c for c in self.cells if not c.check and c.status != "passed"]
        if others:
            return "error"
        for status in ("error", "wrong", "not done yet"):
            if any(c.status == status for c in self.checks):
                return status
        return "passed"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def report(self) -> str:
        lines = [f"{MARK[self.status]} {self.path}: {self.status}"]
        if not self.checks:
            lines.append("    this notebook has no check cell (a code cell tagged 'check'); is it an exercise?")
        for c in self.cells:
            if c.check or c.status != "passed":
                lines.append(f"  cell {c.index}{' (check)' if c.check else ''}:")
                lines += [f"    {line}" for line in c.text.splitlines()]
        return "\n".join(lines)


def check_timeout(timeout) -> float:
    """The seconds one cell may run: a number > 0 and finite, else a ValueError that says so."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--timeout is the number of seconds one cell may run; it must be a number > 0, got {timeout!r} "
                         f"(the default, 600, suits every exercise)")
    return seconds


def read_notebook(path: Path):
    """The notebook at `path`, or a ValueError that says it is not one."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except Exception as e:    # not JSON, not a notebook's JSON, unreadable: nbformat raises several kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not a Jupyter notebook ({first[:120]}); give an exercise notebook "
                         f"(exercises/03_one_f_one_b.ipynb) or a folder of them") from None


def this_python_kernel():
    """A kernel manager for this Python, whatever kernels Jupyter knows of (as nbval's current env)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                                    "--log-level=ERROR"],   # not its warning about TCP on every start
                              display_name="this Python", language="python", resource_dir="")

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def execute_here(nb, folder, timeout: int, env: dict | None = None) -> None:
    """Run `nb` top to bottom in a kernel of this Python started in `folder`, and always stop that
    kernel afterwards (nbclient leaves a kernel manager it was handed running)."""
    from nbclient import NotebookClient

    km = this_python_kernel()
    try:
        NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(folder)}}).execute(
            **({"env": env} if env is not None else {}))
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)


class _Kernel:
    """One kernel for one notebook: started in the notebook's folder, cells run one at a time."""

    def __init__(self, folder: Path, preexec=None):
        self.km = this_python_kernel()
        # preexec: run in the kernel's process before it starts (a workshop's gradebook puts it in the
        # participant's cgroup, so that their notebook runs within their limits, and as their user:
        # then it also says how the kernel must be started, workshop/accounts.py's AsParticipant)
        start = getattr(preexec, "kernel_kwargs", None)
        self.km.start_kernel(cwd=str(folder), **(start(self.km) if start else {"preexec_fn": preexec} if preexec else {}))
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=START)
        except RuntimeError as e:
            self.close()
            raise RuntimeError(f"the notebook's kernel did not start within {START:g} s: {e}") from None

    def run(self, source: str, timeout: float) -> tuple[str | None, str, dict | None]:
        """(what stopped it: None, "timed out" or "kernel died"; its printed text; its error
        {ename, evalue} or None)."""
        msg_id = self.kc.execute(source, store_history=False, allow_stdin=False)
        deadline, text, error = time.monotonic() + timeout, [], None
        interrupted_at = None
        while True:
            if not self.km.is_alive():
                return "kernel died", "".join(text), error
            now = time.monotonic()
            if interrupted_at is None and now > deadline:
                self.km.interrupt_kernel()          # a KeyboardInterrupt in the cell: most loops stop here
                interrupted_at = now
            if interrupted_at is not None and now > interrupted_at + GRACE:
                self.km.shutdown_kernel(now=True)   # it did not stop: a loop in C, or one that catches it
                return "timed out", "".join(text), error
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content.get("text", ""))
            elif kind == "error":
                error = {"ename": content.get("ename", ""), "evalue": content.get("evalue", "")}
            elif kind == "status" and content.get("execution_state") == "idle":
                return ("timed out" if interrupted_at is not None else None), "".join(text), error

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=True)


def run_notebook(path: str | Path, timeout: float = 600.0, preexec=None) -> NotebookResult:
    """Execute the notebook at `path` (the file is not changed) and collect what each cell did;
    `preexec` runs in the kernel's process before it starts."""
    timeout = check_timeout(timeout)
    path = Path(path)
    nb = read_notebook(path)
    result = NotebookResult(path)
    kernel = _Kernel(path.parent.resolve(), preexec)
    stopped = None
    try:
        for i, cell in enumerate(nb.cells, 1):
            if cell.cell_type != "code":
                continue
            check = "check" in cell.metadata.get("tags", [])
            if stopped:
                if check:
                    result.cells.append(CellResult(i, True, "not run", f"not run: cell {stopped} stopped the notebook"))
                continue
            problem, text, error = kernel.run(cell.source, timeout)
            if problem:
                stopped = i
                result.cells.append(CellResult(i, check, problem, _stopped_text(problem, timeout, text)))
            elif error is None:
                if check:
                    result.cells.append(CellResult(i, True, "passed", text.strip() or f"{PASS} passed"))
            else:
                status = {"NotDoneYet": "not done yet", "WrongAnswer": "wrong"}.get(error["ename"], "error")
                shown = (error["evalue"] if status != "error" else f"{error['ename']}: {error['evalue']}"
                         + ("\n(every cell above must run first)" if check else ""))
                result.cells.append(CellResult(i, check, status, shown))
    finally:
        kernel.close()
    return result


def _stopped_text(problem: str, timeout: float, text: str) -> str:
    if problem == "timed out":
        why = (f"timed out: the cell did not finish within {timeout:g} s, so it was stopped. Does it loop forever, "
               f"or wait for something that never comes? (minipipe check --timeout SECONDS allows longer.)")
    else:
        why = ("kernel died: the Python process running this notebook ended while the cell ran (os._exit, exit(), a "
               "crash, or memory running out); the cells after it were not run")
    return why + (f"\nits output before that:\n{text.strip()[-600:]}" if text.strip() else "")


def exercise_notebooks(paths: list[str]) -> list[Path]:
    """The notebooks named: files as they are, folders by their exercise notebooks (NN_*.ipynb).
    Every one is read first, so that a file that is not a notebook is refused before any runs."""
    found = []
    for name in paths:
        p = Path(name)
        if p.is_dir():
            found += sorted(q for q in p.glob("[0-9][0-9]_*.ipynb"))
        elif p.is_file():
            if p.suffix != ".ipynb":
                raise ValueError(f"{name} is not a notebook (a .ipynb file); give an exercise notebook "
                                 f"(exercises/03_one_f_one_b.ipynb) or a folder of them (exercises/)")
            found.append(p)
        else:
            raise ValueError(f"{name}: no such notebook or folder; give an exercise notebook (exercises/03_one_f_one_b.ipynb) "
                             f"or a folder of them (exercises/)")
    if not found:
        raise ValueError(f"no exercise notebooks (NN_name.ipynb) in {', '.join(paths)}")
    for p in found:
        read_notebook(p)
    return found


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: the check ends, and its kernel with it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def check_notebooks(paths: list[str], timeout: float = 600.0, out=print) -> int:
    """`minipipe check`: run each notebook, print its verdicts; 0 when all passed, else 1; on
    SIGTERM or SIGINT, 128 + the signal's number, the running kernel shut down."""
    timeout = check_timeout(timeout)
    notebooks = exercise_notebooks(paths)
    main = threading.current_thread() is threading.main_thread()
    before = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    results = []
    try:
        for path in notebooks:
            result = run_notebook(path, timeout)
            out(result.report())
            results.append(result)
    except Stopped as e:
        out(f"stopped by {e} after {len(results)} of {len(notebooks)} notebook(s); the running kernel was shut down")
        return 128 + e.signum
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if len(results) > 1:
        counts = {s: sum(r.status == s for r in results) for s in STATUSES}
        out(f"\n{len(results)} notebooks: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 0 if all(r.passed for r in results) else 1
