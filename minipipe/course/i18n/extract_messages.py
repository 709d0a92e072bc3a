"""Write (or bring up to date) the catalogs of what the checkers and the grader say (messages.py).

    python -m minipipe.course.i18n.extract_messages        German and Dutch
    python -m minipipe.course.i18n.extract_messages de     German only

Every `_("...")` call in the modules that speak to a learner (SPEAKERS) is found in their syntax tree,
as xgettext would: its first argument, a plain string (implicitly joined pieces included), is a msgid
of that module's catalog i18n/<lang>/checkers/<module>.po. A `_()` of anything else (an f-string, a
name) cannot be looked up and is refused, naming the line. Bringing a catalog up to date keeps every
translation whose English is unchanged, adds the new messages untranslated (so a test finds them),
and keeps the translations of removed messages as obsolete entries (`#~`) for the translator.
"""

from __future__ import annotations

import ast
import string
import sys
from pathlib import Path

import polib

from .messages import CATALOGS

PACKAGE = Path(__file__).resolve().parents[2]  # minipipe/
SPEAKERS = (
    "course/exercises/*.py",
    "course/grading/run.py",
    "course/grading/__main__.py",
    "course/grading/words.py",
    "course/grading/watch.py",
    "course/grading/judge.py",
    "course/grading/sandbox.py",
)
TRANSLATED = ("de", "nl")


def catalog_name(path: Path) -> str:
    """exercises/gpipe.py -> "gpipe"; grading/run.py -> "grading.run", grading/__main__.py -> "grading.main"."""
    return path.stem if path.parent.name == "exercises" else f"{path.parent.name}.{path.stem.strip('_')}"


def messages_in(path: Path) -> list[str]:
    """The msgids of `path`'s `_()` calls, in the order they are written, each once."""
    found: list[str] = []
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_"
    ]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        first = node.args[0] if node.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            raise ValueError(
                f"{path.name}:{node.lineno}: _() needs a plain string as its first argument (the English text, "
                f'with {{name}} fields passed by name: _("took {{t}} s", t=t)), not an f-string or an expression'
            )
        if first.value not in found:
            found.append(first.value)
    return found


def english() -> dict[str, list[str]]:
    """catalog name -> its msgids, for every module that speaks to a learner and has any."""
    out: dict[str, list[str]] = {}
    for pattern in SPEAKERS:
        for path in sorted(PACKAGE.glob(pattern)):
            found = messages_in(path)
            if found:
                out[catalog_name(path)] = found
    return out


def catalog_path(lang: str, name: str) -> Path:
    return CATALOGS / lang / "checkers" / f"{name}.po"


def update(lang: str, name: str, msgids: list[str]) -> polib.POFile:
    path = catalog_path(lang, name)
    old = {e.msgid: e for e in polib.pofile(str(path))} if path.exists() else {}
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": f"minipipe checkers/{name}",
        "Language": lang,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    for msgid in msgids:
        entry = polib.POEntry(msgid=msgid, msgstr="")
        kept = old.get(msgid)
        if kept is not None:
            entry.msgstr, entry.flags = kept.msgstr, list(kept.flags)
        po.append(entry)
    for e in old.values():
        if e.msgid not in msgids and e.msgstr:
            e.obsolete = True
            po.append(e)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return po


def fields(text: str) -> list[str]:
    """The str.format fields of `text` as written ("{mine:g}", "{value!r:.40}"), in order."""
    out = []
    for _literal, name, spec, conversion in string.Formatter().parse(text):
        if name is not None:
            out.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return out


def problems(lang: str) -> list[str]:
    """What is wrong with `lang`'s catalogs against the code: a message with no translation (new, or
    fuzzy), a catalog missing, a translation that drops or changes a field of its English."""
    found = []
    for name, msgids in english().items():
        path = catalog_path(lang, name)
        po = {e.msgid: e for e in polib.pofile(str(path)) if not e.obsolete} if path.exists() else {}
        for msgid in msgids:
            entry = po.get(msgid)
            if entry is None or not entry.translated():
                found.append(f"{path.relative_to(CATALOGS.parent)}: untranslated: {msgid!r}")
            elif set(fields(entry.msgstr)) != set(fields(msgid)):
                found.append(
                    f"{path.relative_to(CATALOGS.parent)}: the translation of {msgid!r} has the fields "
                    f"{sorted(set(fields(entry.msgstr)))}, its English {sorted(set(fields(msgid)))}"
                )
    return found


def main(argv: list[str]) -> int:
    found = english()
    for lang in argv or TRANSLATED:
        todo = sum(
            1 for name, ids in found.items() for e in update(lang, name, ids) if not e.obsolete and not e.translated()
        )
        print(f"{lang}: {len(found)} catalogs, {sum(map(len, found.values()))} messages, {todo} untranslated or stale")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
