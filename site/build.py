"""Build the course as a website: the lessons, executed, in the order of lessons/README.md.

    python site/build.py [--out build/site] [--executed DIR]      (or: make site)

Stages a Sphinx project in build/site-src/: this folder's conf.py, a landing page made from the
README's introduction and the lessons' table with the table of contents in that order, each lesson
executed, and a local MathJax; Sphinx with myst-nb then writes the pages to --out, from the
executed lessons as they are (myst-nb executes nothing). A lesson added to lessons/ and to the
table in lessons/README.md appears with no edit here; one in lessons/ but not in the table comes
last, the glossary (lessons/glossary.ipynb) after them. --executed DIR takes lessons already
executed (DIR/NN_name.ipynb, as `jupyter nbconvert --to notebook --execute` writes them;
the test suite passes the copies nbval's run left in artifacts/executed/lessons/); each lesson
not there is executed here, as nbconvert does: in
lessons/, the committed notebook never written to. The pages need no network: figures carry
plotly.js, widgets their static pictures (minipipe.viz.offline), formulas MathJax.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LESSONS = REPO / "lessons"
TABLE_ROW = re.compile(r"^\|\s*`(\d\d[a-z]?_\w+)`\s*\|", re.M)  # | `00_start_here` | what it teaches |
LESSON_FILES = "[0-9][0-9]*_*.ipynb"  # 00_start_here …, and 09b_… (a lesson put after 09, the later ones kept)


def lesson_order(readme: str, found: list[str]) -> list[str]:
    """The lessons in `found` (names without .ipynb) in the order of the README's table; any
    not in the table after them, by name."""
    listed = [name for name in TABLE_ROW.findall(readme) if name in found]
    return listed + sorted(set(found) - set(listed))


def lessons() -> list[str]:
    found = [path.stem for path in LESSONS.glob(LESSON_FILES)]
    return lesson_order((LESSONS / "README.md").read_text(), found)


def pages() -> list[str]:
    """The site's pages from lessons/: the lessons, then the glossary (lessons/glossary.ipynb)."""
    return lessons() + (["glossary"] if (LESSONS / "glossary.ipynb").exists() else [])


def landing_page(order: list[str]) -> str:
    """The README's introduction (up to its first section), then lessons/README.md's text for
    learners (up to its notes for authors), each lesson's name a link to its page, and the table
    of contents."""
    intro = (REPO / "README.md").read_text().split("\n## ", 1)[0]
    course = (LESSONS / "README.md").read_text().split("\n## How a lesson is written", 1)[0]
    course = re.sub(r"^# ", "## ", course, flags=re.M)
    course = TABLE_ROW.sub(lambda m: f"| [{m[1]}](lessons/{m[1]}.ipynb) |" if m[1] in order else m[0], course)
    course = re.sub(r"\]\(([\w-]+\.ipynb)\)", r"](lessons/\1)", course)  # its links into lessons/, from here
    toc = "\n".join(f"lessons/{name}" for name in order)
    return f"{intro.rstrip()}\n\n{course.rstrip()}\n\n```{{toctree}}\n:caption: Lessons\n:hidden:\n\n{toc}\n```\n"


def mathjax_folder() -> Path:
    import jupyter_server_mathjax

    folder = Path(jupyter_server_mathjax.__file__).parent / "static"
    if not (folder / "MathJax.js").exists():
        raise SystemExit(f"no MathJax.js in {folder}: reinstall jupyter-server-mathjax (pip install -e '.[site]')")
    return folder


class NotebookFailed(Exception):
    """A cell of a notebook raised: the message names the notebook, the cell and the error."""

    def __init__(self, notebook: Path, cell: int, error: Exception):
        self.notebook, self.cell = notebook, cell  # cell: nbval's number, code cells from 0
        super().__init__(f"{notebook.parent.name}/{notebook.name}, Cell {cell} failed:\n{error}")


def execute(notebook: Path, out: Path, timeout: int = 600) -> Path:
    """Run `notebook` top to bottom as `jupyter nbconvert --to notebook --execute` does (nbclient,
    the notebook's own kernel, in the notebook's folder, widget state kept) and write the executed
    copy to `out`. A failing cell raises NotebookFailed, naming it as nbval does ("Cell N": its
    code cells counted from 0)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(notebook.parent)}})
    started = []
    client.on_cell_execute = lambda cell, cell_index: started.append(cell_index)
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        if not started:
            raise
        raise NotebookFailed(notebook, sum(c.cell_type == "code" for c in nb.cells[: started[-1]]), e) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def unexecuted(notebook: Path) -> bool:
    """Whether a code cell of `notebook` has not run (no execution count): a committed lesson."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    return any(c.cell_type == "code" and c.source.strip() and c.execution_count is None for c in cells)


def stage(src: Path, order: list[str], executed: Path | None) -> None:
    """A fresh Sphinx project in `src`: conf.py, index.md, lessons/ (each lesson's executed copy
    from `executed` where there is one, else the committed lesson), _static/ (with mathjax/)."""
    if src.exists():
        shutil.rmtree(src)
    (src / "lessons").mkdir(parents=True)
    shutil.copy(HERE / "conf.py", src / "conf.py")
    (src / "index.md").write_text(landing_page(order))
    for name in order:
        done = executed / f"{name}.ipynb" if executed else None
        shutil.copy(done if done and done.exists() else LESSONS / f"{name}.ipynb", src / "lessons" / f"{name}.ipynb")
    shutil.copytree(HERE / "_static", src / "_static")
    shutil.copytree(mathjax_folder(), src / "_static" / "mathjax")


def build(out: Path, executed: Path | None = None) -> Path:
    """Stage and build the site into `out`; the path of its index.html. The staged project stays
    beside it (`out`-src), with the executed lessons in its lessons/."""
    src = out.parent / f"{out.name}-src"
    order = pages()
    stage(src, order, executed)
    for name in order:
        staged = src / "lessons" / f"{name}.ipynb"
        if unexecuted(staged):
            start = time.perf_counter()
            try:
                execute(LESSONS / f"{name}.ipynb", staged)
            except NotebookFailed as e:
                raise SystemExit(f"the site did not build: {e}") from None
            print(f"executed {name} in {time.perf_counter() - start:.0f} s", flush=True)
    # Sphinx writes into the staged project, then the pages move to `out`
    html = src / "_build" / "html"
    # -T: a lesson that fails prints its cell and error here, not into a file in /tmp
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-T",
            "-d",
            str(src / "_build" / "doctrees"),
            str(src),
            str(html),
        ],
        cwd=src,
    )
    if done.returncode:
        raise SystemExit(f"the site did not build (sphinx exited {done.returncode}); see the messages above")
    if out.exists():
        shutil.rmtree(out)
    shutil.move(html, out)
    return out / "index.html"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "site", help="where the pages go")
    parser.add_argument("--executed", type=Path, help="a folder of lessons already executed, to use as they are")
    args = parser.parse_args()
    index = build(args.out.resolve(), args.executed.resolve() if args.executed else None)
    print(f"the course website: {index}")


if __name__ == "__main__":
    main()
