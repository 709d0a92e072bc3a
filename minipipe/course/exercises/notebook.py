"""`minipipe check PATH...`: the verdict on a learner's exercise notebooks, from the grader.

Nothing the notebook says of itself counts: not its check cells, not its printed output. The
grader (minipipe/course/grading/) takes the learner's answer cells and the cells the learner added,
runs them after the released exercise's given cells in a sandbox, and calls the released check on
what they define, in fresh processes; the verdict is the judge's. A notebook whose answer cells
are as released is "not done yet" at once. What became of its check cells is noted, never judged.

A check never hangs. Each cell, and the check itself, may run `timeout` seconds: then the sandbox
is stopped and the verdict says "timed out" and where. A sandbox that dies (a crash, `os._exit` in
a cell) is noticed at once and named. SIGTERM (and Ctrl-C) end the check and every process of it.
A path that is not a regular file (a FIFO, a device) is refused before anything reads it.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
from pathlib import Path

from ..grading.run import STATUSES, GradeResult, grade_notebook
from ..grading.submission import read_notebook, released_exercises
from ..i18n.messages import say as _
from .verdict import FAIL, PASS, TODO

MARK = {"passed": PASS, "not done yet": TODO, "wrong": FAIL, "error": FAIL, "timed out": FAIL, "died": FAIL}

__all__ = ["check_notebooks", "check_timeout", "exercise_notebooks", "execute_here", "report", "this_python_kernel"]


def check_timeout(timeout) -> float:
    """The seconds one cell may run: a number > 0 and finite, else a ValueError that says so."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(
            _(
                "--timeout is the number of seconds one cell may run; it must be a number > 0, got {timeout!r} "
                "(the default, 600, suits every exercise)",
                timeout=timeout,
            )
        )
    return seconds


def status_words(status: str) -> str:
    """A notebook's status (run.STATUSES) or a cell's (run.CellReport), as `minipipe check` prints it."""
    return {
        "passed": _("passed"),
        "not done yet": _("not done yet"),
        "wrong": _("wrong"),
        "error": _("error"),
        "timed out": _("timed out"),
        "died": _("died"),
        "raised": _("raised"),
        "refused": _("refused"),
    }.get(status, status)


def report(result: GradeResult) -> str:
    """What `minipipe check` prints for one notebook."""
    lines = [f"{MARK[result.status]} {result.path}: {status_words(result.status)}"]
    lines += [f"  {line}" for line in result.text.splitlines()]
    for cell in result.cells:
        lines.append(f"  {cell.label}: {status_words(cell.status)}")
        lines += [f"    {line}" for line in cell.text.splitlines()]
    lines += ["  " + _("note: {note}", note=note) for note in result.notes]
    return "\n".join(lines)


def exercise_notebooks(paths: list[str]) -> list[Path]:
    """The notebooks named: files as they are, folders by their exercise notebooks (NN_*.ipynb).
    Every one is read first, so that a file that is not a notebook (or not a regular file) is
    refused before any runs."""
    found = []
    for name in paths:
        p = Path(name)
        if p.is_dir():
            found += sorted(q for q in p.glob("[0-9][0-9]_*.ipynb"))
        elif p.exists() or p.is_symlink():
            if p.suffix != ".ipynb":
                raise ValueError(
                    _(
                        "{name} is not a notebook (a .ipynb file); give an exercise notebook "
                        "(exercises/03_one_f_one_b.ipynb) or a folder of them (exercises/)",
                        name=name,
                    )
                )
            found.append(p)
        else:
            raise ValueError(
                _(
                    "{name}: no such notebook or folder; give an exercise notebook (exercises/03_one_f_one_b.ipynb) "
                    "or a folder of them (exercises/)",
                    name=name,
                )
            )
    if not found:
        raise ValueError(_("no exercise notebooks (NN_name.ipynb) in {paths}", paths=", ".join(paths)))
    for p in found:
        read_notebook(p)  # through read_file: a FIFO or a device refused before anything blocks
    if not released_exercises():
        raise ValueError(
            _(
                "the course's released exercises (exercises/NN_name.ipynb) are not found beside minipipe: "
                "run minipipe check from a checkout of the course"
            )
        )
    return found


def this_python_kernel():
    """A kernel manager for this Python, whatever kernels Jupyter knows of (as nbval's current env)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(
                argv=[
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                    "--log-level=ERROR",
                ],  # not its warning about TCP on every start
                display_name="this Python",
                language="python",
                resource_dir="",
            )

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def execute_here(nb, folder, timeout: int, env: dict | None = None) -> None:
    """Run `nb` top to bottom in a kernel of this Python started in `folder`, and always stop that
    kernel afterwards (nbclient leaves a kernel manager it was handed running). For the course's
    own materials (a lesson for the slides, the GPU check), never for grading."""
    from nbclient import NotebookClient

    km = this_python_kernel()
    try:
        NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(folder)}}).execute(
            **({"env": env} if env is not None else {})
        )
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: the check ends, and every process of it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def check_notebooks(paths: list[str], timeout: float = 600.0, out=print) -> int:
    """`minipipe check`: judge each notebook, print its verdict; 0 when all passed, else 1; on
    SIGTERM or SIGINT, 128 + the signal's number, every process of the check ended."""
    timeout = check_timeout(timeout)
    notebooks = exercise_notebooks(paths)
    main = threading.current_thread() is threading.main_thread()
    before = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    results = []
    try:
        for path in notebooks:
            try:
                result = grade_notebook(path, timeout)
            except ValueError as e:  # not one of the course's exercises: its own words
                result = GradeResult(path, "error", f"{FAIL} {e}")
            out(report(result))
            results.append(result)
    except Stopped as e:
        out(
            _(
                "stopped by {signal} after {done} of {n} notebook(s); every process of the check was ended",
                signal=e,
                done=len(results),
                n=len(notebooks),
            )
        )
        return 128 + e.signum
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if len(results) > 1:
        counts = {s: sum(r.status == s for r in results) for s in STATUSES}
        tally = ", ".join(f"{n} {status_words(s)}" for s, n in counts.items() if n)
        out("\n" + _("{n} notebooks: {tally}", n=len(results), tally=tally))
    return 0 if all(r.passed for r in results) else 1
