"""The teacher's materials, from the lessons themselves: `minipipe workshop materials`.

    build(out="build/workshop")            # every lesson executed once, timed, and turned into:
      out/slides/NN_name.html                 reveal.js slides, offline (reveal.js, require.js, jQuery
                                              and MathJax copied beside them; plotly.js in the page)
      out/notes.html                          teaching/notes.md with the times measured by this build
      out/plan.html                           teaching/plan.md: three hours, with exercise time
      out/index.html                          links to all of them

No second copy of a lesson: the slides are the executed notebook, cut at its headings — a `#` or
`##` heading opens a slide, `###` a sub-slide, every other cell continues the slide it is on
(slides longer than the screen scroll). The cut is made on the executed copy, never in lessons/.
"""

from __future__ import annotations

import copy
import datetime
import html
import re
import shutil
import sys
import time
from pathlib import Path

from ..viz.offline import drop_cdn_mathjax
from .room import LESSON_FILES, REPO

LESSONS = REPO / "lessons"
TEACHING = REPO / "teaching"
TEMPLATE = Path(__file__).resolve().parent / "slides_template"
ASSETS = {  # in out/slides/: where from (node_modules of the venv, installed by `make workshop`)
    "reveal.js/dist": "reveal.js/dist",
    "reveal.js/plugin": "reveal.js/plugin",
    "require.js": "requirejs/require.js",
    "jquery.min.js": "jquery/dist/jquery.min.js",
}


def node_modules() -> Path:
    return Path(sys.prefix) / "node_modules"


def lesson_paths(only: list[str] | None = None) -> list[Path]:
    found = sorted(LESSONS.glob(LESSON_FILES))
    if only:
        chosen = [p for p in found if p.stem in only or _number(p) in only]
        missing = [o for o in only if not any(p.stem == o or _number(p) == o for p in found)]
        if missing:
            raise ValueError(f"no lesson {', '.join(missing)} in {LESSONS}; lessons are named like 00 or 00_start_here")
        return chosen
    return found


def _number(lesson: Path) -> str:
    """A lesson's number as it is named: 09 for 09_zero_bubble, 09b for 09b_asynchronous_pipelines."""
    return lesson.stem.split("_")[0]


HEADING = re.compile(r"^#{1,3} ", re.M)


def cut_into_slides(nb):
    """A copy of `nb` cut into reveal.js slides at its headings: a markdown cell is split before
    each heading in it (the text above a heading stays on the slide before), and each cell carries
    its slide type. Plotly's figures ask a CDN for MathJax 3; the slides bring MathJax 2, so those
    script tags are dropped from the copy."""
    import nbformat

    cells = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "```" in cell.source:
            cells.append(copy.deepcopy(cell))
            continue
        starts = sorted({0, *(m.start() for m in HEADING.finditer(cell.source))})
        for a, b in zip(starts, starts[1:] + [len(cell.source)]):
            if cell.source[a:b].strip():
                piece = nbformat.v4.new_markdown_cell(cell.source[a:b].strip("\n"))
                if cell.get("attachments"):
                    piece.attachments = cell.attachments
                cells.append(piece)
    for cell in cells:
        first = cell.source.lstrip().split("\n", 1)[0] if cell.cell_type == "markdown" else ""
        kind = "slide" if first.startswith(("# ", "## ")) else "subslide" if first.startswith("### ") else "-"
        cell.metadata["slideshow"] = {"slide_type": kind}
        for out in cell.get("outputs", []):
            if "text/html" in out.get("data", {}):
                out["data"]["text/html"] = drop_cdn_mathjax("".join(out["data"]["text/html"]))
    sliced = copy.deepcopy(nb)
    sliced.cells = cells
    return sliced


def execute(path: Path, workdir: Path, timeout: float) -> tuple[object, float]:
    """Run a lesson top to bottom in a fresh kernel of this Python, in a scratch copy of lessons/;
    returns the executed notebook and the seconds it took."""
    import nbformat

    from ..course.exercises.notebook import execute_here

    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(LESSONS / "README.md", workdir / "README.md")
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute_here(nb, workdir, timeout)
    return nb, time.perf_counter() - start


def copy_assets(slides: Path) -> None:
    modules = node_modules()
    for there, here in ASSETS.items():
        source = modules / here
        if not source.exists():
            raise ValueError(
                f"{source} is missing: `make workshop` installs reveal.js, requirejs and jquery "
                f"(npm install --prefix {sys.prefix} ...), so that the slides need no network"
            )
        target = slides / there
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    import jupyter_server_mathjax

    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", slides / "mathjax", dirs_exist_ok=True)


def export_slides(nb, target: Path) -> None:
    from nbconvert import SlidesExporter

    exporter = SlidesExporter(
        extra_template_basedirs=[str(TEMPLATE.parent)],
        template_name=TEMPLATE.name,
        reveal_url_prefix="reveal.js",
        reveal_scroll=True,
        reveal_theme="white",  # its fonts come with reveal.js (others load Google's)
        require_js_url="require.js",
        jquery_url="jquery.min.js",
        mathjax_url="mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe",
    )
    cut = cut_into_slides(nb)
    # without the widgets' saved state nbconvert shows each widget's static picture (viz/offline.py,
    # course/question.py) and loads no widget manager, which it would fetch from a CDN
    cut.metadata.pop("widgets", None)
    body, _ = exporter.from_notebook_node(cut)
    target.write_text(body)


def page(title: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body {{ font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; line-height: 1.45; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
code {{ background: #f3f3f3; padding: 0 3px; }}</style></head><body>
{body}
</body></html>
"""


def markdown(text: str) -> str:
    import mistune

    return mistune.create_markdown(plugins=["table"])(text)


def machine_words() -> str:
    from ..course.lesson import machine

    here = machine()
    gpus = ", ".join(here.gpus) if here.gpus else "no GPU"
    return f"{here.cores} CPU cores, {gpus}, torch {here.torch}"


def build(
    out: str | Path = "build/workshop",
    only: list[str] | None = None,
    executed: str | Path | None = None,
    timeout: float = 600.0,
    progress=print,
) -> dict[str, float | None]:
    """Build the materials; returns the seconds each lesson took (None: taken from `executed`)."""
    import nbformat

    out = Path(out)
    slides = out / "slides"
    slides.mkdir(parents=True, exist_ok=True)
    copy_assets(slides)
    times: dict[str, float | None] = {}
    for path in lesson_paths(only):
        if executed is not None:
            source = Path(executed) / path.name
            if not source.exists():
                raise ValueError(f"{source} is missing: --executed takes a folder of executed lessons (NN_name.ipynb)")
            nb, seconds = nbformat.read(source, as_version=4), None
        else:
            nb, seconds = execute(path, out / "executed", timeout)
            nbformat.write(nb, out / "executed" / path.name)
        export_slides(nb, slides / f"{path.stem}.html")
        times[path.stem] = seconds
        if progress is not None:
            progress(f"{path.stem}: " + (f"ran in {seconds:.0f} s, " if seconds is not None else "") + "slides written")
    write_pages(out, times)
    return times


def write_pages(out: Path, times: dict[str, float | None]) -> None:
    when = datetime.date.today().isoformat()
    measured = [f"| `{name}` | {f'{s:.0f} s' if s is not None else 'not run here'} |" for name, s in times.items()]
    table = "\n".join(["| lesson | top to bottom |", "| --- | --- |", *measured])
    gpu = "" if "no GPU" not in machine_words() else " Not measured on a GPU: this machine has none."
    heading = (
        f"## Measured by this build\n\nEach lesson run top to bottom on this machine ({machine_words()}), "
        f"{when}:{gpu}\n\n{table}\n"
    )
    notes = (TEACHING / "notes.md").read_text()
    (out / "notes.html").write_text(page("Instructor notes", markdown(notes.replace("<!-- build: times -->", heading))))
    (out / "plan.html").write_text(page("Three hours", markdown((TEACHING / "plan.md").read_text())))
    links = "".join(f"<li><a href='slides/{name}.html'>{name}</a></li>" for name in times)
    (out / "index.html").write_text(
        page(
            "Workshop",
            f"<h1>The workshop</h1><p><a href='plan.html'>The plan</a> · "
            f"<a href='notes.html'>Instructor notes</a></p>"
            f"<h2>Slides</h2><ul>{links}</ul>",
        )
    )
