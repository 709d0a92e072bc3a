"""Write (or bring up to date) the message catalogs the translations live in.

    python -m minipipe.course.i18n.extract        every catalog of every language
    python -m minipipe.course.i18n.extract de     German only

One catalog per notebook and language: i18n/<lang>/lessons/<stem>.po for lessons/<stem>.ipynb,
i18n/<lang>/exercises/<stem>.po for exercises/source/<stem>.py, i18n/<lang>/decide/<stem>.po for
decide/<stem>.ipynb (the decision makers' track). Each entry is one block of a markdown
cell (blocks.py): msgid the English block exactly, msgstr its translation. Bringing a catalog up to
date keeps every translation whose English block is unchanged, adds the new blocks untranslated, and
marks the entries whose English block is gone obsolete (gettext's `#~`), so nothing a translator wrote
is lost: a changed paragraph's old translation stays beside it for the translator to revise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jupytext
import polib

from minipipe.course.i18n.blocks import split_blocks
from minipipe.course.i18n.terms import TERM_CELL_ID

ROOT = Path(__file__).resolve().parents[3]
I18N = ROOT / "i18n"
LANGUAGES = {"de": "German", "nl": "Dutch"}


NOTEBOOK_FOLDERS = ("lessons", "decide")  # translated as they are; the exercises from their sources


def english_notebooks(root: Path = ROOT) -> dict[str, list[str]]:
    """'lessons/<stem>', 'decide/<stem>' or 'exercises/<stem>' -> the markdown cells' sources, in order
    (the glossary's term table left out: build.py writes it in each language from i18n/terms.tsv)."""
    found: dict[str, list[str]] = {}
    for folder in NOTEBOOK_FOLDERS:
        for path in sorted((root / folder).glob("*.ipynb")):
            cells = json.loads(path.read_text())["cells"]
            found[f"{folder}/{path.stem}"] = [
                "".join(c["source"]) for c in cells if c["cell_type"] == "markdown" and c.get("id") != TERM_CELL_ID
            ]
    for path in sorted((root / "exercises" / "source").glob("[0-9][0-9]_*.py")):
        nb = jupytext.read(path, fmt="py:percent")
        found[f"exercises/{path.stem}"] = [c.source for c in nb.cells if c.cell_type == "markdown"]
    for path in sorted((ROOT / "decide").glob("*.ipynb")):  # the decision makers' track
        cells = json.loads(path.read_text())["cells"]
        found[f"decide/{path.stem}"] = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return found


def update(lang: str, name: str, cells: list[str], i18n: Path = I18N) -> polib.POFile:
    path = i18n / lang / f"{name}.po"
    old = polib.pofile(str(path)) if path.exists() else None
    kept = {e.msgid: e for e in old} if old else {}
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": f"minipipe {name}",
        "Language": lang,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    seen: set[str] = set()
    for n, cell in enumerate(cells):
        for block in split_blocks(cell):
            if block in seen:
                continue
            seen.add(block)
            entry = polib.POEntry(msgid=block, msgstr="", occurrences=[(f"markdown-cell-{n}", "")])
            if block in kept and not kept[block].obsolete:
                entry.msgstr, entry.flags = kept[block].msgstr, list(kept[block].flags)
            elif (
                block in kept and kept[block].msgstr
            ):  # an English block back as it was: its old translation, to confirm
                entry.msgstr, entry.flags = kept[block].msgstr, ["fuzzy"]
            po.append(entry)
    for e in kept.values():
        if e.msgid not in seen and e.msgstr:
            e.obsolete = True
            po.append(e)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return po


def main(argv: list[str]) -> int:
    languages = argv or list(LANGUAGES)
    notebooks = english_notebooks()
    for lang in languages:
        todo = 0
        for name, cells in notebooks.items():
            po = update(lang, name, cells)
            todo += len([e for e in po if not e.obsolete and (not e.msgstr or "fuzzy" in e.flags)])
        print(f"{lang}: {len(notebooks)} catalogs, {todo} blocks untranslated or stale")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
