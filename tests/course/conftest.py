"""Every verdict a test of tests/course/ gets from a checker (through tests/support/judged.py) is compared,
whole, with the one recorded for it in __snapshots__/ (syrupy): a test that looks for a few words still
holds the rest of what the learner reads. The checkers' fresh draws (random.Random()) are seeded from a
count kept per test, so each test draws the same cases every run. After changing what a checker says:
`pytest tests/course --snapshot-update`, and read the diff of __snapshots__/ before committing it."""

import itertools
import random
import re
from pathlib import Path

import pytest

import minipipe
from tests.support import judged, refusals


@pytest.fixture(autouse=True)
def verdicts_in_full(snapshot, monkeypatch):
    seeds = itertools.count()

    class Seeded(random.Random):
        def __init__(self, x=None):
            super().__init__(next(seeds) if x is None else x)

    monkeypatch.setattr(random, "Random", Seeded)
    judged.SAID = []
    yield
    said, judged.SAID = judged.SAID, None
    if said:
        assert [(how, _steady(text)) for how, text in said] == snapshot


ROOT = Path(minipipe.__file__).resolve().parent.parent
# the checkout's path as a verdict may print it: wrapped anywhere (textwrap breaks at spaces and hyphens)
_ROOT = re.compile(r"\s*".join(map(re.escape, str(ROOT))))


def _steady(text: str) -> str:
    """What varies from run to run taken out: what refusals.steady takes out, the line of a test's own
    function a refusal names ("at line 305 of <lambda>": it moves as the test file grows), times measured
    against each other (exercise 08's "in at most 1.2× the reference's time", its dynamic programme's
    milliseconds), and the checkout's path (the verdict then compared with its lines joined, as it wraps by
    the path's length)."""
    text = refusals.steady(text)
    # a test file's lines move; the verdict may wrap anywhere in "line 96 of", so its spaces are kept as they are
    text = re.sub(r"\b(line|Zeile|regel)(\s+)\d+(\s+)(of|von|van)(\s)", r"\1\2…\3\4\5", text)
    text = re.sub(r"\d+(\.\d+)?×", "…×", text)
    text = re.sub(r"(within )[\d.]+( s \(…× what a dynamic programme takes here, )\d+( ms)", r"\1…\2…\3", text)
    if _ROOT.search(text):
        text = _ROOT.sub("<checkout>", " ".join(text.split()))
    return text
