"""Build the course as a website: the lessons, executed, in the order of lessons/README.md.

    python site/build.py [--out build/site] [--executed DIR]      (or: make site)

Stages a Sphinx project in build/site-src/: this folder's conf.py, a landing page made from the
README's introduction and the lessons' table with the table of contents in that order, a copy of
each lesson, and a local MathJax. Sphinx with myst-nb then executes the lessons there (the
committed notebooks are never written to) and writes the pages to --out. A lesson added to
lessons/ and to the table in lessons/README.md appears with no edit here; one in lessons/ but not
in the table comes last; the glossary (lessons/glossary.ipynb) after them. --executed DIR takes lessons already executed (DIR/NN_name.ipynb, e.g.
`jupyter nbconvert --execute` output) instead of running them again. The pages need no network:
figures carry plotly.js, widgets their static pictures (minipipe.viz.offline), formulas MathJax.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LESSONS = REPO / "lessons"
TABLE_ROW = re.compile(r"^\|\s*`(\d\d_\w+)`\s*\|", re.M)    # | `00_start_here` | what it teaches |


def lesson_order(readme: str, found: list[str]) -> list[str]:
    """The lessons in `found` (names without .ipynb) in the order of the README's table; any
    not in the table after them, by name."""
    listed = [name for name in TABLE_ROW.findall(readme) if name in found]
    return listed + sorted(set(found) - set(listed))


def lessons() -> list[str]:
    found = [path.stem for path in LESSONS.glob("[0-9][0-9]_*.ipynb")]
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
    course = re.sub(r"\]\(([\w-]+\.ipynb)\)", r"](lessons/\1)", course)    # its links into lessons/, from here
    toc = "\n".join(f"lessons/{name}" for name in order)
    return f"{intro.rstrip()}\n\n{course.rstrip()}\n\n```{{toctree}}\n:caption: Lessons\n:hidden:\n\n{toc}\n```\n"


def mathjax_folder() -> Path:
    import jupyter_server_mathjax

    folder = Path(jupyter_server_mathjax.__file__).parent / "static"
    if not (folder / "MathJax.js").exists():
        raise SystemExit(f"no MathJax.js in {folder}: reinstall jupyter-server-mathjax (pip install -e '.[site]')")
    return folder


def stage(src: Path, order: list[str], executed: Path | None) -> None:
    """A fresh Sphinx project in `src`: conf.py, index.md, lessons/, _static/ (with mathjax/)."""
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
    beside it (`out`-src), with the lessons as executed in _build/jupyter_execute/lessons/."""
    src = out.parent / f"{out.name}-src"
    stage(src, pages(), executed)
    # Sphinx writes into the staged project (myst-nb puts the executed notebooks beside its
    # output folder), then the pages move to `out`
    html = src / "_build" / "html"
    # -T: a lesson that fails prints its cell and error here, not into a file in /tmp
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-T",
                           "-d", str(src / "_build" / "doctrees"), str(src), str(html)], cwd=src)
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
