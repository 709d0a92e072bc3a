"""Make the German and Dutch notebooks from the English ones and the catalogs (`make translations`).

    python -m minipipe.course.i18n.build           write course/de/ and course/nl/ (and the glossaries' term table)
    python -m minipipe.course.i18n.build --check   fail, naming them, on stale blocks and out-of-date notebooks

The English notebooks are the one source. course/<lang>/ mirrors their layout, so that every link
between notebooks keeps working: course/<lang>/lessons/<stem>.ipynb from lessons/<stem>.ipynb,
course/<lang>/decide/<stem>.ipynb from decide/<stem>.ipynb, and course/<lang>/exercises/<stem>.ipynb
and course/<lang>/exercises/solutions/<stem>.ipynb made by exercises/build.py's own functions from
exercises/source/<stem>.py with its markdown translated. A link to anything else (a README, a file
of the package) is rewritten to reach the same file from the deeper folder. Only markdown changes:
every code cell, and so every assert, is the English one byte for byte, with the same cell id, and
the notebook's metadata says its language (metadata.minipipe.language) beside what a course kernel
reports. Each markdown cell is cut into blocks (blocks.py) and each block replaced by its catalog
entry's translation; a block whose entry is missing, empty or fuzzy stays English and is stale.

How a change to an English lesson reaches the translations:

1. Someone edits an English markdown cell (or adds one). Its changed blocks no longer match any msgid
   in i18n/<lang>/…/<stem>.po, so the built notebooks would show them in English: `make check` (its
   test runs `python -m minipipe.course.i18n.build --check`) fails, naming each such block by language,
   notebook and first words, until it is translated.
2. `python -m minipipe.course.i18n.extract` brings the catalogs up to date: the changed block becomes a
   new, empty entry, and the old block's translation is kept as an obsolete entry (`#~`) beside it, for
   the translator to revise rather than start over; unchanged blocks keep their translations.
3. The translator fills the new msgstr (removing the obsolete one) and runs `make translations`, which
   rewrites course/de/ and course/nl/; committing catalogs and notebooks together makes `--check` pass.
   A changed code cell needs no translator: `make translations` copies it, and `--check` names the built
   notebooks that still hold the old one.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import posixpath
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import nbformat
import polib

from minipipe.course.i18n.blocks import join_blocks, split_blocks
from minipipe.course.i18n.extract import LANGUAGES, NOTEBOOK_FOLDERS, ROOT
from minipipe.course.i18n.terms import TERM_CELL_ID, read_terms, term_cell

GLOSSARY = "lessons/glossary"
# a markdown link or image's target: ](target) or ](target "title")
LINK = re.compile(r"(\]\()([^)\s]+)")


@dataclass(frozen=True)
class Stale:
    lang: str
    notebook: str  # 'lessons/01_why_split'
    block: str
    why: str

    def __str__(self) -> str:
        words = " ".join(self.block.split()[:8])
        return f'{self.lang} {self.notebook}: "{words}…" ({self.why})'


def exercises_build() -> ModuleType:
    """exercises/build.py, a script beside the exercises: its functions make the learner's and the
    solution's notebook from a source, here from a translated one."""
    spec = importlib.util.spec_from_file_location("exercises_build", ROOT / "exercises" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_catalog(path: Path) -> dict[str, polib.POEntry]:
    return {e.msgid: e for e in polib.pofile(str(path)) if not e.obsolete} if path.exists() else {}


def translate(text: str, catalog: dict[str, polib.POEntry], lang: str, name: str, stale: list[Stale]) -> str:
    """A markdown cell in `lang`: each block's translation, or the English block, noted in `stale`."""
    out = []
    for block in split_blocks(text):
        entry = catalog.get(block)
        if entry is None:
            why = "not in the catalog: new or changed in English"
        elif not entry.msgstr.strip():
            why = "untranslated"
        elif "fuzzy" in entry.flags:
            why = "fuzzy"
        else:
            out.append(entry.msgstr)
            continue
        stale.append(Stale(lang, name, block, why))
        out.append(block)
    return join_blocks(out)


def relink(text: str, written_from: str, built_in: str, mirrored: set[str]) -> str:
    """Links as written from `written_from` (a folder, relative to the checkout) made right from
    `built_in`: a notebook the edition has keeps its link (the layout is mirrored), anything else is
    reached from the deeper folder."""

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        path, _, anchor = target.partition("#")
        if not path or ":" in path or path.startswith("/"):
            return match.group(0)  # an anchor on the page, a web address, an absolute path
        resolved = posixpath.normpath(posixpath.join(written_from, path))
        if resolved in mirrored:
            return match.group(0)
        moved = posixpath.relpath(resolved, built_in)
        return match.group(1) + moved + (f"#{anchor}" if anchor else "")

    return LINK.sub(fix, text)


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """A committed notebook, each cell without an id given one by its place, so rebuilds agree."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(raw["cells"]):
        cell.setdefault("id", f"{path.stem[:20]}-{i:02d}")
    raw["nbformat_minor"] = max(raw.get("nbformat_minor", 0), 5)
    return nbformat.reads(json.dumps(raw), as_version=4)


def with_term_table(nb: nbformat.NotebookNode, lang: str, root: Path) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if c.get("id") != TERM_CELL_ID]
    cell = nbformat.v4.new_markdown_cell(term_cell(lang, read_terms(root / "i18n" / "terms.tsv")))
    cell.id = TERM_CELL_ID
    nb.cells.append(cell)
    return nb


def labelled(nb: nbformat.NotebookNode, lang: str, source: str) -> nbformat.NotebookNode:
    nb.metadata["minipipe"] = {"language": lang, "translated_from": source}
    return nb


def text_of(nb: nbformat.NotebookNode) -> str:
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def editions(root: Path = ROOT, languages: tuple[str, ...] = tuple(LANGUAGES)) -> tuple[dict[Path, str], list[Stale]]:
    """Every notebook the build writes (the translations and the English glossary), with its text,
    and every block left in English."""
    build = exercises_build()
    i18n = root / "i18n"
    notebooks = {
        f"{folder}/{p.stem}": p for folder in NOTEBOOK_FOLDERS for p in sorted((root / folder).glob("*.ipynb"))
    }
    sources = {f"exercises/{p.stem}": p for p in sorted((root / "exercises" / "source").glob("[0-9][0-9]_*.py"))}
    mirrored = {f"{name}.ipynb" for name in notebooks}
    mirrored |= {f"exercises/{p.stem}.ipynb" for p in sources.values()}
    mirrored |= {f"exercises/solutions/{p.stem}.ipynb" for p in sources.values()}
    made: dict[Path, str] = {}
    stale: list[Stale] = []
    if GLOSSARY in notebooks:
        made[notebooks[GLOSSARY]] = text_of(with_term_table(read_notebook(notebooks[GLOSSARY]), "en", root))
    for lang in languages:
        out = root / "course" / lang
        for name, path in notebooks.items():
            catalog = read_catalog(i18n / lang / f"{name}.po")
            nb = read_notebook(path)
            folder = posixpath.dirname(name)
            for cell in nb.cells:
                if cell.cell_type == "markdown" and cell.id != TERM_CELL_ID:
                    cell.source = relink(
                        translate(cell.source, catalog, lang, name, stale), folder, f"course/{lang}/{folder}", mirrored
                    )
            if name == GLOSSARY:
                nb = with_term_table(nb, lang, root)
            made[out / f"{name}.ipynb"] = text_of(labelled(nb, lang, f"{name}.ipynb"))
        for name, path in sources.items():
            catalog = read_catalog(i18n / lang / f"{name}.po")
            source = build.read_source(path)
            for cell in source.cells:
                if cell.cell_type == "markdown":
                    translated = translate(cell.source, catalog, lang, name, stale)
                    cell.source = relink(translated, "exercises", f"course/{lang}/exercises", mirrored)
            origin = f"exercises/source/{path.name}"
            made[out / f"{name}.ipynb"] = text_of(labelled(build.learner_notebook(source), lang, origin))
            solved = labelled(build.solution_notebook(source), lang, origin)
            made[out / "exercises" / "solutions" / f"{path.stem}.ipynb"] = text_of(solved)
    return made, stale


def drift(made: dict[Path, str], root: Path = ROOT) -> list[str]:
    """Built notebooks that are missing, differ from what the catalogs make, or have no English source."""
    wrong = [p for p, text in made.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    orphans = [
        p for p in (root / "course").glob("*/**/*.ipynb") if p not in made and ".ipynb_checkpoints" not in p.parts
    ]
    return sorted(str(p.relative_to(root)) for p in wrong + orphans)


def check(root: Path = ROOT, languages: tuple[str, ...] = tuple(LANGUAGES)) -> list[str]:
    """What `--check` reports, one line each; empty when every edition is whole and built."""
    made, stale = editions(root, languages)
    problems = [f"stale: {s}" for s in stale]
    problems += [f"out of date: {p}" for p in drift(made, root)]
    return problems


def write(root: Path = ROOT, languages: tuple[str, ...] = tuple(LANGUAGES)) -> list[Stale]:
    """Write every built notebook that differs, remove those without an English source any more."""
    made, stale = editions(root, languages)
    for path, text in made.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(root)}")
    for name in drift(made, root):  # what is left over has no English source any more
        (root / name).unlink()
        print(f"removed {name}")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on stale blocks and out-of-date notebooks")
    args = parser.parse_args(argv)
    if not args.check:
        stale = write()
        counts = ", ".join(f"{lang} {sum(s.lang == lang for s in stale)}" for lang in LANGUAGES)
        print(f"blocks left in English: {counts} (`python -m minipipe.course.i18n.build --check` names them)")
        return 0
    problems = check()
    print("\n".join(problems))
    stale = sum(p.startswith("stale:") for p in problems)
    if stale:
        print(
            f"{stale} blocks left in English: run `python -m minipipe.course.i18n.extract`, translate the empty "
            "and fuzzy entries of the catalogs named (i18n/<lang>/<notebook>.po), then `make translations`"
        )
    if len(problems) > stale:
        print(f"{len(problems) - stale} built notebooks out of date: run `make translations` and commit them")
    if problems:
        return 1
    print("every German and Dutch notebook is whole and matches the English ones and the catalogs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
