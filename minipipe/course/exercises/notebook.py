"""Run a learner's exercise notebook headless and read its verdicts: `minipipe check PATH...`.

Every cell runs, top to bottom, in a fresh kernel of this Python (the one minipipe is installed
in), from the notebook's folder. The check cells (tagged `check`) give the verdicts; an error in
any other cell is reported too, since a check after it cannot be trusted. A notebook passes when
every check cell passed and no cell raised.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .verdict import FAIL, PASS, TODO

STATUSES = ("passed", "not done yet", "wrong", "error")
MARK = {"passed": PASS, "not done yet": TODO, "wrong": FAIL, "error": FAIL}


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
        """passed, or the worst of what went wrong: an error outside a check, a wrong answer, not done yet."""
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


def _this_python_kernel():
    """A kernel manager for this Python, whatever kernels Jupyter knows of (as nbval's current env)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                              display_name="this Python", language="python", resource_dir="")

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def run_notebook(path: str | Path, timeout: float = 600.0) -> NotebookResult:
    """Execute the notebook at `path` (the file is not changed) and collect what each cell did."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    km = _this_python_kernel()
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    try:
        client.execute()
    finally:   # a kernel manager we made ourselves is ours to stop: nbclient stops only its own
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    result = NotebookResult(path)
    for i, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        check = "check" in cell.metadata.get("tags", [])
        error = next((o for o in cell.outputs if o.output_type == "error"), None)
        stdout = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").strip()
        if error is None:
            if check:
                result.cells.append(CellResult(i, True, "passed", stdout or f"{PASS} passed"))
            continue
        status = {"NotDoneYet": "not done yet", "WrongAnswer": "wrong"}.get(error.ename, "error")
        text = (error.evalue if status != "error" else
                f"{error.ename}: {error.evalue}" + ("\n(every cell above must run first)" if check else ""))
        result.cells.append(CellResult(i, check, status, text))
    return result


def exercise_notebooks(paths: list[str]) -> list[Path]:
    """The notebooks named: files as they are, folders by their exercise notebooks (NN_*.ipynb)."""
    found = []
    for name in paths:
        p = Path(name)
        if p.is_dir():
            found += sorted(q for q in p.glob("[0-9][0-9]_*.ipynb"))
        elif p.is_file() and p.suffix == ".ipynb":
            found.append(p)
        else:
            raise ValueError(f"{name}: no such notebook or folder; give an exercise notebook (exercises/03_one_f_one_b.ipynb) "
                             f"or a folder of them (exercises/)")
    if not found:
        raise ValueError(f"no exercise notebooks (NN_name.ipynb) in {', '.join(paths)}")
    return found


def check_notebooks(paths: list[str], timeout: float = 600.0, out=print) -> int:
    """`minipipe check`: run each notebook, print its verdicts; 0 when all passed, else 1."""
    notebooks = exercise_notebooks(paths)
    results = []
    for path in notebooks:
        result = run_notebook(path, timeout)
        out(result.report())
        results.append(result)
    if len(results) > 1:
        counts = {s: sum(r.status == s for r in results) for s in STATUSES}
        out(f"\n{len(results)} notebooks: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 0 if all(r.passed for r in results) else 1
