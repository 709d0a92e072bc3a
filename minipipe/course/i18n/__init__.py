"""The course in German and Dutch: the English notebooks are the one source, their translations are
gettext catalogs in i18n/<lang>/ (one per notebook, one entry per markdown block: blocks.py), brought up
to date by extract.py; build.py makes the German and Dutch notebooks in course/<lang>/ from them.

language() is what the checkers ask to answer in the learner's language; it imports nothing heavy."""

from __future__ import annotations

import os
from pathlib import Path

LANGUAGES = ("en", "de", "nl")


def language(cwd: Path | None = None) -> str:
    """The learner's language, "en", "de" or "nl": MINIPIPE_LANG where set (`de`, `nl`, `de_DE.UTF-8`,
    any case), else that of the notebook being run, known by the kernel's working folder (JupyterLab
    and nbval start a notebook's kernel in the notebook's folder) lying in course/de/ or course/nl/,
    else English."""
    chosen = os.environ.get("MINIPIPE_LANG", "").strip().lower()[:2]
    if chosen:
        return chosen if chosen in LANGUAGES else "en"
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if folder.parent.name == "course" and folder.name in LANGUAGES:
            return folder.name
    return "en"
