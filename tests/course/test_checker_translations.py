"""What the checkers and the grader say, in German and Dutch (minipipe/course/i18n/messages.py).

Every `_()` message of the modules that speak to a learner is in each language's catalogs, translated,
with every field of its English; under MINIPIPE_LANG=de or nl a wrong answer gets its verdict in that
language; a message no catalog has falls back to English; and in English nothing is read from a catalog.
"""

from __future__ import annotations

import shutil

import polib
import pytest

from minipipe.course.exercises import (
    WrongAnswer,
    check_balance,
    check_bubble_arithmetic,
    check_gpipe,
    check_loss_scaling,
    check_one_f_one_b,
    check_stage_step,
)
from minipipe.course.exercises.balance_clock import lightest
from minipipe.course.grading.domain import Origin
from minipipe.course.grading.words import words
from minipipe.course.i18n import extract_messages, messages
from minipipe.schedule.ops import B, F
from tests.support.judged import direct, sandboxed, zygote


@pytest.fixture(autouse=True)
def fresh_catalogs():
    messages.translations.cache_clear()
    yield
    messages.translations.cache_clear()


def naive(p, m):  # exercise 02's classic mistake: each micro-batch forward and back before the next
    return [[a for mb in range(m) for a in (F(r, mb), B(r, mb))] for r in range(p)]


def verdict_on(check, *answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return str(info.value)


@pytest.mark.parametrize("lang", extract_messages.TRANSLATED)
def test_every_message_is_translated_with_its_fields(lang):
    found = extract_messages.english()
    assert sum(map(len, found.values())) > 50  # the extractor finds the messages at all
    assert {"verdict", "gpipe", "schedules", "grading.run", "balance", "layer_clock"} <= set(found)
    assert {"grading.words", "grading.watch"} <= set(found)  # what a refusal says
    assert extract_messages.problems(lang) == []


def test_a_translation_that_drops_a_field_is_named(tmp_path, monkeypatch):
    shutil.copytree(messages.CATALOGS / "de", tmp_path / "de")
    monkeypatch.setattr(extract_messages, "CATALOGS", tmp_path)
    path = tmp_path / "de" / "checkers" / "verdict.po"
    po = polib.pofile(str(path))
    entry = po.find("{passed}/{n} checks passed")
    entry.msgstr = "{passed} Checks bestanden"  # the {n} lost
    po.save(str(path))
    said = extract_messages.problems("de")
    assert len(said) == 1 and "{passed}/{n} checks passed" in said[0] and "'{passed}'" in said[0]


def test_a_new_english_message_shows_up_untranslated(tmp_path, monkeypatch):
    speaker = tmp_path / "course" / "exercises" / "speaker.py"
    speaker.parent.mkdir(parents=True)
    speaker.write_text('from x import _\n\nSAID = _("a new message, {n} of it", n=1) + _("two " "pieces")\n')
    monkeypatch.setattr(extract_messages, "PACKAGE", tmp_path)
    assert extract_messages.english() == {"speaker": ["a new message, {n} of it", "two pieces"]}
    assert extract_messages.problems("de") == [
        "i18n/de/checkers/speaker.po: untranslated: 'a new message, {n} of it'",
        "i18n/de/checkers/speaker.po: untranslated: 'two pieces'",
    ]
    speaker.write_text('from x import _\n\nn = 1\nSAID = _(f"at {n}")\n')
    with pytest.raises(ValueError, match=r"speaker.py:4: _\(\) needs a plain string"):
        extract_messages.english()


def test_a_wrong_answer_is_judged_in_german(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    text = verdict_on(check_gpipe, naive)
    assert text.startswith("✗ 1/5 Checks bestanden\n  ✓ gültig: jeder Forward und Backward")
    assert "\n  ✗ Makespan unter einem Kostenmodell:\n      bei p=3, m=4 (Forward 1, Backward 2 Zeiteinheiten)" in text
    assert "Das ist naive Modellparallelität" in " ".join(text.split())
    assert "\n  · Spitzenspeicher (nicht gelaufen)" in text
    assert "checks passed" not in text and "not run" not in text


def test_a_wrong_answer_is_judged_in_dutch(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "nl")

    def oldest_first(p, m):  # right but for the order of the backwards: 3 of 5 checks pass
        return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)]

    text = verdict_on(check_gpipe, oldest_first)
    assert text.startswith("✗ 3/5 checks geslaagd\n  ✓ geldig:")
    assert "zet de nieuwste vooraan" in text and "deze oefening vraagt om de andere" in text


def by_count(costs, p):  # exercise 08's classic mistake: as many layers on each stage
    size, extra = divmod(len(costs), p)
    bounds = [0]
    for s in range(p):
        bounds.append(bounds[-1] + size + (s < extra))
    return bounds


def parameter_counts(layers, sample):  # and its other one: weighing the layers by their parameters
    return [float(sum(t.numel() for t in layer.parameters())) for layer in layers]


def test_exercise_08_is_judged_in_german(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    text = verdict_on(check_balance, by_count, parameter_counts)
    assert text.startswith("✗ 1/5 Checks bestanden\n  ✓ gültige Grenzen: 65 Fälle, bis zu 12 Schichten und 5 Stages")
    flat = " ".join(text.split())
    assert "✗ die langsamste Stage so leicht wie möglich: Kosten [" in flat
    assert "Deiner schneidet nach der Zahl der Schichten, als ob jede Schicht gleich viel kostete." in flat
    assert "· lange Modelle rechtzeitig geschnitten: 60 bis 80 Schichten, 10 bis 16 Stages (nicht gelaufen)" in flat
    assert "your cut" not in flat and "checks passed" not in flat


def test_exercise_08s_layer_costs_are_judged_in_dutch(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "nl")
    text = " ".join(verdict_on(check_balance, lambda costs, p: lightest(costs, p)[1], parameter_counts).split())
    assert text.startswith("✗ 3/5 checks geslaagd ✓ geldige grenzen: 65 gevallen, tot 12 lagen en 5 stages")
    assert "✓ lange modellen op tijd geknipt: 60 tot 80 lagen, 10 tot 16 stages: 3 modellen van " in text
    assert "✗ de lagen van de GPT's naar tijd gewogen: je kosten (" in text
    assert "zijn de aantallen parameters van de lagen. De embedding heeft 51,200 parameters" in text
    assert "parameter counts" not in text


def test_a_refused_call_is_named_in_german_and_dutch(monkeypatch):
    partition = Origin("minipipe.engine.partition", "partition", "minipipe/engine/partition.py")
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    assert words(partition) == "ruft den eigenen Partitioner der Engine (minipipe.engine.partition.partition) auf"
    assert words(("/venv/torch/distributed/pipelining/schedules.py", "ScheduleGPipe.step")) == (
        "ruft ScheduleGPipe.step aus torch (torch.distributed.pipelining.schedules) auf"
    )
    monkeypatch.setenv("MINIPIPE_LANG", "nl")
    assert words(partition, copy=True) == (
        "roept een kopie van de eigen partitioner van de engine (minipipe.engine.partition.partition) aan"
    )
    monkeypatch.delenv("MINIPIPE_LANG")
    assert words(partition, verb=False) == "the engine's own partitioner (minipipe.engine.partition.partition)"


def test_minipipe_check_prints_its_lines_in_dutch(monkeypatch):
    from pathlib import Path

    from minipipe.course.exercises.notebook import report
    from minipipe.course.grading.run import CellReport, GradeResult

    cells = [CellReport("cell 3 (yours)", "refused", "cell 3 (yours) starts a thread")]
    result = GradeResult(Path("exercises/08_balance_the_stages.ipynb"), "wrong", "✗ 1/5", cells, ["kept"])
    monkeypatch.setenv("MINIPIPE_LANG", "nl")
    assert report(result).splitlines() == [
        "✗ exercises/08_balance_the_stages.ipynb: fout",
        "  ✗ 1/5",
        "  cell 3 (yours): geweigerd",
        "    cell 3 (yours) starts a thread",
        "  opmerking: kept",
    ]
    monkeypatch.delenv("MINIPIPE_LANG")
    assert report(result).splitlines()[::2] == [
        "✗ exercises/08_balance_the_stages.ipynb: wrong",
        "  cell 3 (yours): refused",
        "  note: kept",
    ]


def test_numbers_fill_the_translated_fields(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "de")

    def makespan(kind, p, m, v, f, b):
        return (m + p) * (f + b)  # one slot too many

    def unused(*args):
        raise NotImplementedError()

    text = " ".join(verdict_on(check_bubble_arithmetic, makespan, unused, unused).split())
    assert "Du sagst" in text and "der Simulator sagt" in text
    assert "Zähl Fill und Drain noch einmal nach: Das letzte Micro-Batch startet p − 1 Slots nach dem ersten." in text


def test_english_is_the_msgid_and_reads_no_catalog(monkeypatch):
    monkeypatch.delenv("MINIPIPE_LANG", raising=False)
    monkeypatch.setattr(messages, "CATALOGS", messages.CATALOGS / "nowhere")
    text = verdict_on(check_one_f_one_b, naive)
    assert text.startswith("✗ 1/5 checks passed\n  ✓ valid: ")
    assert messages.language() == "en"


def test_an_untranslated_message_and_an_unknown_language_fall_back_to_english(monkeypatch):
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    assert messages.say("{passed}/{n} checks passed", passed=1, n=2) == "1/2 Checks bestanden"
    assert messages.say("no catalog has this, {x}", x=3) == "no catalog has this, 3"
    monkeypatch.setenv("MINIPIPE_LANG", "fr")
    assert messages.language() == "en"
    assert messages.say("{passed}/{n} checks passed", passed=1, n=2) == "1/2 checks passed"


def test_a_fuzzy_translation_is_not_said(tmp_path, monkeypatch):
    shutil.copytree(messages.CATALOGS / "de", tmp_path / "de")
    path = tmp_path / "de" / "checkers" / "verdict.po"
    po = polib.pofile(str(path))
    po.find("{passed}/{n} checks passed").flags.append("fuzzy")
    po.save(str(path))
    monkeypatch.setattr(messages, "CATALOGS", tmp_path)
    monkeypatch.setattr(extract_messages, "CATALOGS", tmp_path)
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    assert messages.say("{passed}/{n} checks passed", passed=1, n=2) == "1/2 checks passed"
    (said,) = extract_messages.problems("de")
    assert said.endswith("de/checkers/verdict.po: untranslated: '{passed}/{n} checks passed'")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_check_cell_answers_in_the_learners_language(monkeypatch):
    """The check as a notebook's check cell calls it: the answer goes by value to a fresh judge
    process, which must answer in the notebook's language."""
    monkeypatch.setenv("MINIPIPE_LANG", "nl")
    with pytest.raises(WrongAnswer) as info:
        check_gpipe(naive, timeout=120)
    assert str(info.value).startswith("✗ 1/5 checks geslaagd\n  ✓ geldig: elke forward en backward")


def unscaled(model, loss_fn, x, y, m):  # exercise 01's classic mistake: each micro-batch's loss not divided by m
    total = 0.0
    for xs, ys in zip(x.chunk(m), y.chunk(m)):
        loss = loss_fn(model(xs), ys)
        loss.backward()
        total += loss.item()
    return total


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_wrong_loss_scaling_is_judged_in_german_by_the_grader(monkeypatch):
    """Exercise 01 through the real grader (minipipe/course/grading/run.py: a judge process, its sandbox) under
    MINIPIPE_LANG=de: the verdict in German, the English nowhere."""
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    with pytest.raises(WrongAnswer) as info:
        check_loss_scaling(unscaled, timeout=120)
    text = " ".join(str(info.value).split())
    assert text.startswith("✗ 0/4 Checks bestanden ✗ Gradienten gleich denen des ganzen Batches (MLP,")
    assert "Deine sind m = 2-mal zu groß" in text and "Teil den Loss jedes Micro-Batches durch m" in text
    assert "checks passed" not in text and "too large" not in text


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "lang, said",
    [
        ("de", "ruft make_schedule, die eigenen Schedules der Engine (minipipe.schedule.kinds.make_schedule) auf"),
        ("nl", "roept make_schedule, de eigen schedules van de engine (minipipe.schedule.kinds.make_schedule) aan"),
    ],
)
def test_the_watch_refuses_in_the_learners_language(monkeypatch, lang, said):
    """A call the exercise does not allow, refused by the sandbox's watch (minipipe/course/grading/watch.py),
    which words it itself: in the judge's language, though the zygote that forked it started in English."""
    from tests.support.judged import notebook_cells

    monkeypatch.delenv("MINIPIPE_LANG", raising=False)
    zygote()  # started under English
    monkeypatch.setenv("MINIPIPE_LANG", lang)
    gpipe = (
        "def gpipe(p, m):\n    __import__('minipipe').make_schedule('gpipe', p, m)\n"
        "    return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)]\n"
    )
    cells, names = notebook_cells("02_write_gpipe", gpipe)
    with pytest.raises(WrongAnswer) as info:
        sandboxed("check_gpipe", *names, cells=cells)
    text = " ".join(str(info.value).split())
    assert said in text and ("Zeile 2" if lang == "de" else "regel 2") in text, text
    assert "calls" not in text and "line 2" not in text


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "lang, said, english",
    [
        ("de", "gpipe(3, 4) steht für das eigene GPipe der Engine", "is the engine's"),
        ("nl", "gpipe(3, 4) is de eigen GPipe van de engine", "the engine's own"),
    ],
)
def test_the_engines_function_under_the_learners_name_is_refused_in_her_language(monkeypatch, lang, said, english):
    """The engine's own GPipe passed off as the learner's (minipipe/course/grading/sandbox.py's judge_object,
    before any call), said in the judge's language; in German the phrase keeps the accusative the watch's
    verbs want ("steht für")."""
    from tests.support.judged import notebook_cells

    monkeypatch.setenv("MINIPIPE_LANG", lang)
    cells, names = notebook_cells("02_write_gpipe", "from minipipe.schedule.generators import gpipe\n")
    with pytest.raises(WrongAnswer) as info:
        sandboxed("check_gpipe", *names, cells=cells)
    text = " ".join(str(info.value).split())
    assert said in text and english not in text, text


def raises_in_its_forward(stage, baton):
    raise ValueError("not yet")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_sandbox_speaks_the_judges_language(monkeypatch):
    """What a checker says from inside the sandbox (exercise 06's harness names the action that
    raised) is in the judge's language, though the zygote that forks the sandbox started in English."""
    monkeypatch.delenv("MINIPIPE_LANG", raising=False)
    zygote()  # started under English
    monkeypatch.setenv("MINIPIPE_LANG", "de")
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check_stage_step, raises_in_its_forward)
    text = " ".join(str(info.value).split())
    assert "stage_step auf 0F0 (Forward von Micro-Batch 0 auf Stage 0) hat ValueError ausgelöst: not yet" in text
