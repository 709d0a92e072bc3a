"""The gradebook believes the grader, never the notebook: a participant's untouched stub is "not
yet" however its check cell was printed over, its output faked, muted (IPython's custom exception
hook, sys.excepthook, a try/except), the check function rebound, the cell emptied or deleted; a
solved notebook is passed whatever became of its check cell; and the teacher sees, in the CSV and
the HTML, which check cells were edited or deleted and which answer cell is gone."""

import csv

import nbformat
import pytest

from minipipe.course.grading.submission import read_submission
from minipipe.workshop.gradebook import grade
from tests.support.handed_in import handed_in, solution_of

EXERCISE = "09_bubble_arithmetic"  # judged on the simulator alone: no worker processes
CALL = "check_bubble_arithmetic(makespan, bubble, messages)"
PASS_TEXT = "print('✓ 5/5 checks passed')"
SOLVED = solution_of(EXERCISE)

# participant: (what they did, whether the grader runs anything, the note the teacher sees)
STUB_LEFT = {
    "printed": (dict(check=PASS_TEXT), False, "the check cell (cell 5) was edited"),
    "faked_output": (dict(output=True), False, None),
    "emptied": (dict(check=""), False, "the check cell (cell 5) was edited"),
    "deleted": (dict(check=None), False, "the check cell was deleted"),
    "try_except": (
        dict(check=f"try:\n    {CALL}\nexcept Exception:\n    {PASS_TEXT}"),
        False,
        "the check cell (cell 5) was edited",
    ),
    "custom_exc": (
        dict(added_before=["get_ipython().set_custom_exc((Exception,), lambda *a, **k: print('✓'))"]),
        True,
        None,
    ),
    "excepthook": (
        dict(added_before=["import sys\nsys.excepthook = lambda *a: print('✓ 5/5 checks passed')"]),
        True,
        None,
    ),
    "rebound": (dict(added_before=[f"check_bubble_arithmetic = lambda *a, **k: {PASS_TEXT}"]), True, None),
    "added_check": (dict(added=[PASS_TEXT], tag_added=True), True, "a cell tagged 'check' was added"),
    "answer_deleted": (
        dict(delete=("c03",)),
        False,
        "your answer cell c03 (def makespan(kind, p, m, v, f, b)) is not in the notebook",
    ),
}
SOLVED_BY = {
    "solved_printed": (dict(answer=SOLVED, check=PASS_TEXT), "the check cell (cell 5) was edited"),
    "solved_deleted": (dict(answer=SOLVED, check=None), "the check cell was deleted"),
}


def _hand_in(folder, how: dict):
    how = dict(how)
    output, tag = how.pop("output", False), how.pop("tag_added", False)
    path = handed_in(folder / f"{EXERCISE}.ipynb", EXERCISE, **how)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if output and "check" in cell.metadata.get("tags", []):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ 5/5 checks passed\n")]
            cell.execution_count = 4
        if tag and cell.cell_type == "code" and cell.source == PASS_TEXT:
            cell.metadata["tags"] = ["check"]
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("who", STUB_LEFT)
def test_what_the_grader_takes_from_a_tampered_notebook(tmp_path, who):
    how, runs, note = STUB_LEFT[who]
    sub = read_submission(_hand_in(tmp_path, how))
    assert sub.untouched is not runs, "an untouched stub with nothing of the learner's added is not run"
    assert sub.check == "check_bubble_arithmetic" and sub.targets == ["makespan", "bubble", "messages"]
    assert (note is None and sub.notes == []) or any(note in n for n in sub.notes), sub.notes
    assert not any(PASS_TEXT in source for label, learner, source in sub.cells if not learner)


@pytest.mark.distributed  # judges for the notebooks whose added cells run
@pytest.mark.timeout(600)
def test_the_gradebook_never_passes_a_stub_however_its_check_cells_look(tmp_path):
    for who, (how, _, _) in STUB_LEFT.items():
        _hand_in(tmp_path / who, how)
    for who, (how, _) in SOLVED_BY.items():
        _hand_in(tmp_path / who, how)
    book = grade(tmp_path, timeout=120, jobs=2, only=[EXERCISE])
    for who, (_, _runs, note) in STUB_LEFT.items():
        mark = book.mark(who, EXERCISE)
        assert mark.verdict == "not yet", (who, mark)
        assert "not done yet" in mark.message, (who, mark)
        assert (note is None and mark.notes == ()) or any(note in n for n in mark.notes), (who, mark)
    for who, (_, note) in SOLVED_BY.items():
        mark = book.mark(who, EXERCISE)
        assert mark.verdict == "passed" and any(note in n for n in mark.notes), (who, mark)
    csv_path, html_path = book.write(tmp_path / "out")
    rows = {row["participant"]: row for row in csv.DictReader(csv_path.open())}
    assert rows["printed"]["verdict"] == "not yet" and "was edited" in rows["printed"]["notes"]
    assert "was deleted" in rows["solved_deleted"]["notes"] and rows["solved_deleted"]["verdict"] == "passed"
    page = html_path.read_text()
    assert page.count("⚑ the check cell") >= 5 and "answer cell c03" in page


def test_a_copy_saved_under_another_name_is_graded_as_its_exercise(tmp_path):
    path = handed_in(tmp_path / "my try.ipynb", EXERCISE, answer=SOLVED)
    sub = read_submission(path)
    assert sub.exercise == EXERCISE and not sub.untouched and sub.check == "check_bubble_arithmetic"
