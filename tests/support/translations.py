"""What the tests hold the German and Dutch editions to (tests/course/test_translations.py), as functions
that take what they judge, so that each can be shown a planted fault.

- same_code: a built notebook's code cells are the English notebook's, byte for byte, same ids.
- structure: valid nbformat, the edition's metadata, every relative link's target exists from the
  built notebook's folder, the headings (count and levels, as markdown-it parses them) the English ones.
- wrong_language: lingua (restricted to English, German, Dutch) over each block of prose. A block is
  prose when, with its code (fenced and inline), formulas ($…$, $$…$$), link targets, HTML tags and
  table rules taken out, it keeps at least PROSE_WORDS words of letters and those letters are at least
  half of what it had: shorter blocks (a heading, a label) and blocks mostly of code, maths or
  identifiers are not judged, since there a detector guesses.
- term_violations: where an English block names a term of i18n/terms.tsv (whole word, any case), its
  translation names one of the term's forms in that language (any case; at a word's start, so
  inflections count, "Schicht" in "Schichten", or ending a compound, "Eingabegradienten").
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
from markdown_it import MarkdownIt

from minipipe.course.kernel import NOTEBOOK_METADATA

REPO = Path(__file__).resolve().parents[2]
PROSE_WORDS = 8

_md = MarkdownIt("commonmark").enable("table")


def english_of(built: Path, root: Path = REPO) -> Path:
    """course/de/lessons/01_why_split.ipynb -> lessons/01_why_split.ipynb (and so for exercises/, decide/)."""
    rel = built.relative_to(root / "course")
    return root.joinpath(*rel.parts[1:])


def same_code(built: nbformat.NotebookNode, english: nbformat.NotebookNode) -> list[str]:
    mine = [c for c in built.cells if c.cell_type == "code"]
    theirs = [c for c in english.cells if c.cell_type == "code"]
    if len(mine) != len(theirs):
        return [f"{len(mine)} code cells where the English notebook has {len(theirs)}"]
    return [
        f"code cell {b.get('id')} differs from the English cell {e.get('id')}"
        for b, e in zip(mine, theirs)
        if (b.source, b.get("id"), b.metadata, b.outputs) != (e.source, e.get("id"), e.metadata, e.outputs)
    ]


def headings(nb: nbformat.NotebookNode) -> list[str]:
    return [
        t.tag
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for t in _md.parse(cell.source)
        if t.type == "heading_open"
    ]


def link_targets(text: str) -> list[str]:
    found = []
    for token in _md.parse(text):
        for child in token.children or []:
            target = child.attrGet("href") if child.type == "link_open" else child.attrGet("src")
            if child.type in ("link_open", "image") and isinstance(target, str):
                found.append(target)
    return found


def structure(path: Path, lang: str, root: Path = REPO) -> list[str]:
    """What is wrong with a built notebook's form, against its English notebook."""
    nb = nbformat.read(path, as_version=4)
    english = nbformat.read(english_of(path, root), as_version=4)
    wrong = []
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        wrong.append(f"not a valid notebook: {e.message}")
    meta = {k: v for k, v in nb.metadata.items() if k != "minipipe"}
    if meta != NOTEBOOK_METADATA or nb.metadata.get("minipipe", {}).get("language") != lang:
        wrong.append(f"metadata {dict(nb.metadata)}: a course kernel's, with minipipe.language {lang!r}")
    if headings(nb) != headings(english):
        wrong.append(f"headings {headings(nb)} where the English notebook has {headings(english)}")
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for target in link_targets(cell.source):
            file = target.partition("#")[0]
            if file and ":" not in file and not (path.parent / file).exists():
                wrong.append(f"cell {cell.get('id')} links {target}, which is not there")
    return wrong


_STRIP = [
    re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M),  # fenced code
    re.compile(r"\$\$.*?\$\$", re.S),  # display maths
    re.compile(r"\$[^$\n]+\$"),  # inline maths
    re.compile(r"`[^`\n]+`"),  # inline code
    re.compile(r"\]\([^)]*\)"),  # a link's target (its text stays)
    re.compile(r"https?://\S+"),
    re.compile(r"<[^>\n]+>"),  # HTML tags
    re.compile(r'"[^"\n]+"|“[^”\n]+”|„[^“\n]+“'),  # a quoted title
    re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.M),  # a table's rule
]
_WORD = re.compile(r"[^\W\d_]{2,}")


def prose(block: str, kept: tuple[str, ...] = ()) -> str | None:
    """The block's words to judge, or None when it is not prose (the rule above). `kept`: the words
    the term base keeps English in the translation (Stage, Bubble, Schedule), taken out first: they
    say nothing about the language a sentence is written in."""
    if block.lstrip().startswith("#"):
        return None  # a heading: a label, not prose
    text = block
    for pattern in _STRIP:
        text = pattern.sub(" ", text)
    for word in kept:
        text = re.sub(rf"(?<!\w){re.escape(word)}\w*", " ", text, flags=re.I)
    words = _WORD.findall(text)
    letters, before = sum(map(len, words)), sum(map(len, _WORD.findall(block)))
    if len(words) < PROSE_WORDS or letters < 0.5 * before:
        return None
    return " ".join(words)


@functools.cache
def _detector():  # type: ignore[no-untyped-def]
    from lingua import Language, LanguageDetectorBuilder

    return LanguageDetectorBuilder.from_languages(Language.ENGLISH, Language.GERMAN, Language.DUTCH).build()


_CODES = {"ENGLISH": "en", "GERMAN": "de", "DUTCH": "nl"}


def detected(text: str) -> str | None:
    found = _detector().detect_language_of(text)
    return _CODES.get(found.name) if found is not None else None


def kept_english(terms: list[dict[str, list[str]]], lang: str) -> tuple[str, ...]:
    """The term base's forms in `lang` that are the English term itself (Pipeline Bubble, Micro-Batch)."""
    return tuple(form for row in terms for form in row[lang] if form.lower() in {t.lower() for t in row["en"]})


def wrong_language(blocks: list[tuple[str, str]], lang: str, kept: tuple[str, ...] = ()) -> list[str]:
    """(where, block) pairs whose prose lingua does not take for `lang`."""
    wrong = []
    for where, block in blocks:
        words = prose(block, kept)
        if words is not None and (found := detected(words)) != lang:
            wrong.append(f'{where}: "{" ".join(block.split()[:8])}…" reads as {found}, not {lang}')
    return wrong


# code, inline code, link targets and a checker message's str.format fields ({latency:g}): English by rule
_CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$|`[^`\n]+`|\]\([^)]*\)|\{\w+(?:![rsa])?(?::[^{}]*)?\}", re.S | re.M)


def _names(term: str, text: str) -> bool:
    """`text` names the form `term`: at a word's start (inflections: Schicht, Schichten) or as a
    compound's last part with at most three letters after it (Eingabegradienten, trainingsstap)."""
    t = re.escape(term)
    return re.search(rf"(?<!\w){t}|{t}\w{{0,3}}(?!\w)", text, re.I) is not None


def term_violations(pairs: list[tuple[str, str, str]], lang: str, terms: list[dict[str, list[str]]]) -> list[str]:
    """(where, English block, translation) triples whose translation misses a term the English names.
    Code, inline code and link targets are left out on both sides (they stay English by rule), and
    a capitalised English occurrence the translation keeps as it is (a paper's title, a name) counts."""
    wrong = []
    for where, msgid, msgstr in pairs:
        english, translated = _CODE.sub(" ", msgid), _CODE.sub(" ", msgstr)
        for row in terms:
            found = [m.group(0) for t in row["en"] for m in re.finditer(rf"(?<!\w){re.escape(t)}(?!\w)", english, re.I)]
            if not found or any(_names(form, translated) for form in row[lang]):
                continue
            if all(f[0].isupper() and re.search(rf"(?<!\w){re.escape(f)}(?!\w)", translated) for f in found):
                continue
            wrong.append(f"{where}: '{row['en'][0]}' without {' or '.join(repr(t) for t in row[lang])}")
    return wrong
