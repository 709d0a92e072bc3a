"""Build the course as a website: the lessons, executed, in the order of lessons/README.md.

    python site/build.py [--out build/site] [--executed DIR] [--languages en,de,nl]      (or: make site)

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

In three languages: English into --out, German and Dutch into --out/de and --out/nl (--languages
to build fewer), each page with a bar linking to the same page in the others (conf.py). The German
and Dutch pages are the English executed lessons with each markdown cell translated block by block
from the catalogs i18n/<lang>/lessons/<name>.po (minipipe.course.i18n.blocks); a block with no
translation yet, or a stale (fuzzy) one, stays English. Code cells and their outputs are the ones
the English build shows: nothing is executed twice.
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
CATALOGS = REPO / "i18n"
LANGUAGES = ("en", "de", "nl")  # English first: the others are made from its executed lessons


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


def translated_landing_page(lang: str, order: list[str]) -> str:
    """The landing page in `lang`: README.<lang>.md (the course in that language, its lessons' list), each
    lesson's name a link to its page, and the table of contents."""
    readme = REPO / f"README.{lang}.md"
    text = readme.read_text() if readme.exists() else landing_page(order).split("\n```{toctree}", 1)[0]
    text = re.sub(r"^.*\]\(README[.\w]*\.md\).*\n", "", text, flags=re.M)  # its links to the READMEs: the bar does that
    text = re.sub(
        r"`(\d\d[a-z]?_\w+|glossary)`", lambda m: f"[{m[1]}](lessons/{m[1]}.ipynb)" if m[1] in order else m[0], text
    )
    toc = "\n".join(f"lessons/{name}" for name in order)
    return f"{text.rstrip()}\n\n```{{toctree}}\n:hidden:\n\n{toc}\n```\n"


def translate(notebook: Path, catalog: Path, out: Path) -> None:
    """Write `notebook` to `out` with each markdown cell translated block by block from `catalog`
    (msgid an English block, msgstr its translation); what the catalog does not translate, or marks
    fuzzy, stays as it is. Code cells and outputs are kept byte for byte."""
    import nbformat
    import polib

    from minipipe.course.i18n.blocks import join_blocks, split_blocks

    said = {}
    if catalog.exists():
        said = {
            e.msgid: e.msgstr
            for e in polib.pofile(str(catalog))
            if e.msgstr and not e.obsolete and "fuzzy" not in e.flags
        }
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            blocks = split_blocks(cell.source)
            if any(b in said for b in blocks):
                cell.source = join_blocks([said.get(b, b) for b in blocks])
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


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


def build(
    out: Path, executed: Path | None = None, languages: tuple[str, ...] = LANGUAGES, catalogs: Path = CATALOGS
) -> Path:
    """Stage and build the site into `out` (English) and `out`/<lang> (the others); the path of the
    English index.html. The staged projects stay beside it (`out`-src, `out`-src-<lang>), the English
    one with the executed lessons in its lessons/."""
    src = out.parent / f"{out.name}-src"
    order = pages()
    stage(src, order, executed)
    run_unexecuted(src, order)
    if out.exists():
        shutil.rmtree(out)
    built = ("en", *[lang for lang in languages if lang != "en"])
    for lang in built:
        start = time.perf_counter()
        if lang == "en":
            sphinx(src, out, "en", built)
        else:
            translated = out.parent / f"{out.name}-src-{lang}"
            stage_translation(translated, src, order, lang, catalogs)
            sphinx(translated, out / lang, lang, built)
        print(f"pages in {lang} in {time.perf_counter() - start:.0f} s", flush=True)
    return out / "index.html"


def stage_translation(dest: Path, english: Path, order: list[str], lang: str, catalogs: Path) -> None:
    """The Sphinx project of `lang` in `dest`: the English one's conf.py and _static/, a landing page in
    `lang`, and each of the English project's executed lessons translated (translate)."""
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lessons").mkdir(parents=True)
    shutil.copy(english / "conf.py", dest / "conf.py")
    shutil.copytree(english / "_static", dest / "_static")
    (dest / "index.md").write_text(translated_landing_page(lang, order))
    for name in order:
        translate(
            english / "lessons" / f"{name}.ipynb",
            catalogs / lang / "lessons" / f"{name}.po",
            dest / "lessons" / f"{name}.ipynb",
        )


def run_unexecuted(src: Path, order: list[str]) -> None:
    """Execute each staged lesson that has not run (executed copies were not given for it)."""
    for name in order:
        staged = src / "lessons" / f"{name}.ipynb"
        if unexecuted(staged):
            start = time.perf_counter()
            try:
                execute(LESSONS / f"{name}.ipynb", staged)
            except NotebookFailed as e:
                raise SystemExit(f"the site did not build: {e}") from None
            print(f"executed {name} in {time.perf_counter() - start:.0f} s", flush=True)


def sphinx(src: Path, out: Path, lang: str, built: tuple[str, ...]) -> None:
    """Sphinx writes the pages of the staged project `src` in `lang` into it, then they move to `out`;
    `built`: the languages of the whole site, for each page's bar of links (written beside conf.py, which reads it)."""
    (src / "languages.txt").write_text(" ".join(built) + "\n")
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
            "-D",
            f"language={lang}",
            "-d",
            str(src / "_build" / "doctrees"),
            str(src),
            str(html),
        ],
        cwd=src,
    )
    if done.returncode:
        raise SystemExit(f"the {lang} site did not build (sphinx exited {done.returncode}); see the messages above")
    if out.exists():
        shutil.rmtree(out)
    shutil.move(html, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "site", help="where the pages go")
    parser.add_argument("--executed", type=Path, help="a folder of lessons already executed, to use as they are")
    parser.add_argument(
        "--languages", default=",".join(LANGUAGES), help="comma-separated, of en,de,nl (English is always built)"
    )
    parser.add_argument("--catalogs", type=Path, default=CATALOGS, help="the translations' folder (i18n/)")
    args = parser.parse_args()
    languages = tuple(lang.strip() for lang in args.languages.split(",") if lang.strip())
    unknown = sorted(set(languages) - set(LANGUAGES))
    if unknown:
        parser.error(f"--languages: {', '.join(unknown)} is not one of {', '.join(LANGUAGES)}")
    index = build(args.out.resolve(), args.executed.resolve() if args.executed else None, languages, args.catalogs)
    print(f"the course website: {index}")


if __name__ == "__main__":
    main()
