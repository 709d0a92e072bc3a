"""What the checkers and the grader say to a learner, in the learner's language.

    from minipipe.course.i18n.messages import say as _
    raise Mistake(_("at p={p}, m={m} rank {r} holds {held}", p=p, m=m, r=r, held=held))

The English text is the msgid, written with str.format fields ({p}, {mine:g}, {value!r:.40}); the
fields are passed by name, so a translation may put them in another order. The translations are the
gettext catalogs i18n/<lang>/checkers/<module>.po (one per module that speaks to a learner, brought up
to date by `python -m minipipe.course.i18n.extract_messages`), read with polib. A message with no
translation (new, or marked fuzzy) is said in English; in English the catalogs are never read, so
the English verdicts are exactly the msgids.
"""

from __future__ import annotations

import functools
from pathlib import Path

from . import language

CATALOGS = Path(__file__).resolve().parents[3] / "i18n"


@functools.cache
def translations(lang: str) -> dict[str, str]:
    """msgid -> msgstr of every checker catalog of `lang`, the untranslated and fuzzy left out."""
    if lang == "en":
        return {}
    import polib

    found: dict[str, str] = {}
    for path in sorted((CATALOGS / lang / "checkers").glob("*.po")):
        for entry in polib.pofile(str(path)):
            if entry.msgstr and not entry.obsolete and "fuzzy" not in entry.flags:
                found[entry.msgid] = entry.msgstr
    return found


def say(message: str, /, **fields: object) -> str:
    """`message` in the learner's language, its fields filled in. Imported as `_`, gettext's name,
    which the extractor looks for. Formatted even without fields, so that a field left unpassed
    fails loudly (KeyError) rather than reaching a learner as "{gaps}"; a brace meant literally is
    written {{ or }}."""
    return translations(language()).get(message, message).format(**fields)
