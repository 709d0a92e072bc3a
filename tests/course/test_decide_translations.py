"""The decision makers' track in German and Dutch: every block of every decide/ notebook translated and
current in i18n/<lang>/decide/, and the term base (i18n/terms.tsv) kept."""

import csv
import re

import polib
import pytest

from minipipe.course.i18n.blocks import split_blocks
from minipipe.course.i18n.extract import I18N, LANGUAGES, english_notebooks

TRACK = {name: cells for name, cells in english_notebooks().items() if name.startswith("decide/")}


def terms() -> list[dict[str, str]]:
    lines = [line for line in (I18N / "terms.tsv").read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def catalog(lang: str, name: str) -> dict[str, polib.POEntry]:
    return {e.msgid: e for e in polib.pofile(str(I18N / lang / f"{name}.po")) if not e.obsolete}


def test_the_track_has_its_four_notebooks():
    assert len(TRACK) == 4


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("name", sorted(TRACK))
def test_every_block_is_translated_and_current(lang, name):
    blocks = [block for cell in TRACK[name] for block in split_blocks(cell)]
    entries = catalog(lang, name)
    missing = [b[:60] for b in blocks if b not in entries]
    assert not missing, (
        f"{name}: blocks not in i18n/{lang}/{name}.po (run python -m minipipe.course.i18n.extract): {missing}"
    )
    todo = [b[:60] for b in blocks if not entries[b].msgstr.strip() or "fuzzy" in entries[b].flags]
    assert not todo, f"i18n/{lang}/{name}.po: untranslated or stale: {todo}"
    for block in blocks:  # headings stay headings, lists stay lists: the built notebook keeps the English shape
        assert entries[block].msgstr.lstrip().startswith("#") == block.lstrip().startswith("#"), block[:60]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_term_base_is_kept(lang):
    broken = []
    for name in TRACK:
        for english, entry in catalog(lang, name).items():
            for term in terms():
                if re.search(rf"\b{re.escape(term['en'])}", english, re.IGNORECASE):
                    said = term[lang].split("|")
                    if not any(word.lower() in entry.msgstr.lower() for word in said):
                        broken.append(f"{name}: '{term['en']}' not said as {' or '.join(said)} in: {entry.msgstr[:60]}")
    assert not broken, "\n".join(broken)
