"""What the decision makers' notebooks print, in German and Dutch: every text a code cell passes to
decide.say has its translation, with the same fields, and numbers are written as the language writes them."""

import ast
import json
import re
from pathlib import Path

import pytest

from minipipe.course import decide
from minipipe.course.decide_words import WORDS

REPO = Path(__file__).resolve().parents[2]
FIELD = re.compile(r"\{[^{}]*\}")


def said() -> set[str]:
    """Every literal text the track's code cells hand to say(): its first argument, or a loop's strings whose
    loop variable is handed to it."""
    out = set()
    sources = [(REPO / "minipipe" / "course" / "decide.py").read_text()]  # its layouts' words
    for path in sorted((REPO / "decide").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        sources += ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    for source in sources:
        tree = ast.parse(source)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "say"]
        fed = {c.args[0].id for c in calls if c.args and isinstance(c.args[0], ast.Name)}
        out |= {c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)}
        for loop in ast.walk(tree):
            if isinstance(loop, (ast.For, ast.comprehension)) and isinstance(loop.iter, ast.Tuple):
                names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
                if names & fed:
                    for item in loop.iter.elts:
                        first = item.elts[0] if isinstance(item, ast.Tuple) else item
                        if isinstance(first, ast.Constant) and isinstance(first.value, str):
                            out.add(first.value)
    return {text for text in out if re.search(r"[A-Za-z]", FIELD.sub("", text))}


def test_the_notebooks_say_things():
    texts = said()
    assert "the planner's best" in texts and "days" in texts and len(texts) > 40  # loops' words and calls' words


@pytest.mark.parametrize("lang", ["de", "nl"])
def test_every_text_has_its_translation_with_the_same_fields(lang):
    missing = sorted(said() - set(WORDS[lang]))
    assert not missing, f"minipipe/course/decide_words.py has no {lang} words for: {missing}"
    for english, words in WORDS[lang].items():
        assert sorted(FIELD.findall(words)) == sorted(FIELD.findall(english)), (lang, english)
    assert set(WORDS["de"]) == set(WORDS["nl"])


def test_numbers_as_each_language_writes_them():
    assert decide.say("{x:,.1f}", "en", x=1234.5) == "1,234.5"
    assert decide.say("{x:,.1f}", "de", x=1234.5) == "1.234,5" == decide.say("{x:,.1f}", "nl", x=1234.5)
    assert decide.say("days", "de") == "Tage" and decide.say("{d:,.0f} days", "nl", d=55.1) == "55 dagen"


def test_the_language_is_the_folders_or_the_environments(monkeypatch, tmp_path):
    monkeypatch.delenv("MINIPIPE_LANG", raising=False)
    built = tmp_path / "course" / "de" / "decide"
    built.mkdir(parents=True)
    monkeypatch.chdir(built)
    assert decide.language() == "de"
    monkeypatch.chdir(tmp_path)
    assert decide.language() == "en"
    monkeypatch.setenv("MINIPIPE_LANG", "nl")
    assert decide.language() == "nl"
