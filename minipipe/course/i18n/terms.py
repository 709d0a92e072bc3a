"""The term base, i18n/terms.tsv: how the course says each term in English, German and Dutch.

Each row names a term in the three languages; a cell's alternatives (inflected forms) are separated
by |, lines starting with # are comments, the first other line is the header (en, de, nl). The
glossary of every edition ends with the table made from it (term_cell), written by build.py, so the
glossary cannot say otherwise than the file the translations are tested against.
"""

from __future__ import annotations

from pathlib import Path

TERMS = Path(__file__).resolve().parents[3] / "i18n" / "terms.tsv"
COLUMNS = ("en", "de", "nl")
# the glossary's last cell, the table; the extractor leaves it out of the catalogs, the build writes it
TERM_CELL_ID = "term-base"

_INTRO = {
    "en": (
        "## The term base",
        "How the German and Dutch editions of the course say each term. The English terms practitioners use "
        "(Pipeline Bubble, Micro-Batch, 1F1B) stay English, as German and Dutch engineers write them. The table "
        "is made from `i18n/terms.tsv`, and the tests hold every translated paragraph to it.",
    ),
    "de": (
        "## Die Begriffe in drei Sprachen",
        "So nennt die deutsche und die niederländische Ausgabe des Kurses jeden Begriff. Die englischen "
        "Begriffe, die Praktiker verwenden (Pipeline Bubble, Micro-Batch, 1F1B), bleiben englisch, so wie "
        "deutsche Ingenieure sie schreiben. Die Tabelle wird aus `i18n/terms.tsv` erzeugt, und die Tests "
        "prüfen jeden übersetzten Absatz gegen sie.",
    ),
    "nl": (
        "## De termen in drie talen",
        "Zo noemen de Duitse en de Nederlandse uitgave van de cursus elke term. De Engelse termen die "
        "vakmensen gebruiken (pipeline bubble, micro-batch, 1F1B) blijven Engels, zoals Nederlandse "
        "engineers ze schrijven. De tabel wordt gemaakt uit `i18n/terms.tsv`, en de tests houden elke "
        "vertaalde alinea eraan.",
    ),
}
_HEADER = {"en": "English", "de": "Deutsch", "nl": "Nederlands"}


def read_terms(path: Path = TERMS) -> list[dict[str, list[str]]]:
    """Each row as {"en": [...], "de": [...], "nl": [...]}, every cell's alternatives in order."""
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and line[0] != "#"]
    header = rows[0].split("\t")
    if tuple(header) != COLUMNS:
        raise ValueError(f"{path}: the header line must be {'<tab>'.join(COLUMNS)}, not {rows[0]!r}")
    terms = []
    for number, line in enumerate(rows[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(COLUMNS) or not all(c.strip() for c in cells):
            raise ValueError(f"{path}: row {number} ({line!r}) needs a term in each of {', '.join(COLUMNS)}")
        terms.append({lang: [a.strip() for a in cell.split("|") if a.strip()] for lang, cell in zip(COLUMNS, cells)})
    return terms


def term_cell(lang: str, terms: list[dict[str, list[str]]]) -> str:
    """The glossary's last cell in `lang`: a heading, what the table is, and the table."""
    heading, intro = _INTRO[lang]
    lines = [
        "| " + " | ".join(_HEADER[c] for c in COLUMNS) + " |",
        "| " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    lines += ["| " + " | ".join(", ".join(row[c]) for c in COLUMNS) + " |" for row in terms]
    return "\n\n".join([heading, intro, "\n".join(lines)])
