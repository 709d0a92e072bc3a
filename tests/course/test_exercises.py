"""The exercises, both directions: the reference solutions pass (nbval runs exercises/solutions/, see
tests/support/notebooks.py), every untouched learner notebook is "not done yet" without running
anything, every checker's stub is "not done yet", and the ranks played as threads
(minipipe/course/exercises/threads.py) do what they say. How the grader judges (a sandbox, the
watch, the gradebook) is in tests/course/test_grading_*.py; the wrong answers and the engine's
answers in disguise, exercise by exercise, in test_exercise_schedules.py,
test_exercise_training.py, test_exercise_parallel.py, test_exercise_serving.py and
test_exercise_sharded.py; each is refused before any worker process starts."""

import importlib.util
import re
import sys

import pytest
import torch

from minipipe.cli import main
from minipipe.course import exercises as ex
from minipipe.course.exercises.threads import ThreadWorld
from minipipe.course.exercises.verdict import Mistake
from minipipe.course.grading.run import grade_notebook
from minipipe.course.grading.submission import read_notebook, read_submission
from tests.support.judged import direct, solution_judged
from tests.support.notebooks import LESSON_FILES, REPO, find, ids

LEARNER = find(["exercises/[0-9][0-9]_*.ipynb"])


def _build_module():
    spec = importlib.util.spec_from_file_location("exercises_build", REPO / "exercises" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the notebooks ------------------------------------------------------------------------------
def test_notebooks_are_built_from_their_sources():
    build = _build_module()
    assert build.drift() == [], "run `python exercises/build.py` and commit the notebooks"
    stems = {p.stem for p in (REPO / "exercises" / "source").glob("[0-9][0-9]_*.py")}
    assert {p.stem for p in LEARNER} == stems and len(stems) >= 13
    assert {p.stem for p in find(["exercises/solutions/*.ipynb"])} == stems
    numbers = sorted(int(stem[:2]) for stem in stems)
    assert numbers == list(range(1, len(numbers) + 1)), "exercises are numbered 01, 02, ... without gaps"


def test_learner_notebooks_hold_no_solution():
    build = _build_module()
    for src in (REPO / "exercises" / "source").glob("[0-9][0-9]_*.py"):
        nb = build.learner_notebook(build.read_source(src))
        text = "\n".join(cell.source for cell in nb.cells)
        assert "BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text, src.name
        assert any("check" in cell.metadata.get("tags", []) for cell in nb.cells), f"{src.name} has no check cell"
        assert "../lessons/" in nb.cells[0].source, f"{src.name} does not link the lesson it practises"
        assert f"# Exercise {src.stem[:2]} ·" in nb.cells[0].source, f"{src.name}: its title has another number"


def test_every_exercise_says_what_its_code_may_call_and_its_list_names_what_exists():
    from minipipe.course.grading import domain
    from minipipe.course.grading.run import allowlists

    for path in LEARNER:
        text = " ".join(c.source for c in read_notebook(path).cells if c.cell_type == "markdown")
        assert "What your code may call while the check runs it:" in " ".join(text.split()), path
        names = allowlists(read_submission(path).check)
        for which in ("answer", "given"):  # every name resolves: a module renamed would raise here
            domain.allowed(names[which])


def test_every_lesson_points_at_an_exercise_that_exists_and_links_back():
    """Each lesson names an exercise; each exercise is named by a lesson it practises."""
    import json
    import re

    stems = {p.stem for p in LEARNER}
    named = set()
    for lesson in sorted((REPO / "lessons").glob(LESSON_FILES)):
        text = "".join("".join(cell["source"]) for cell in json.loads(lesson.read_text())["cells"])
        mine = set(re.findall(r"exercises/(\d\d_[a-z0-9_]+)\.ipynb", text))
        assert mine, f"{lesson.name} points at no exercise"
        assert mine <= stems, f"{lesson.name} points at {mine - stems}, which do not exist"
        named |= mine
    assert named == stems, f"no lesson points at {stems - named}"


@pytest.mark.parametrize("path", LEARNER, ids=ids(LEARNER))
def test_untouched_learner_notebook_is_not_done_yet_without_running(path):
    sub = read_submission(path)
    assert sub.untouched and sub.check in ex.CHECKERS and sub.targets and sub.notes == []
    result = grade_notebook(path)  # no process: an untouched stub is not run
    assert result.status == "not done yet" and "YOUR CODE HERE" in result.text, result


@pytest.mark.parametrize("path", find(["exercises/solutions/*.ipynb"]), ids=ids(find(["exercises/solutions/*.ipynb"])))
def test_a_solution_is_read_as_the_learners_code_of_its_exercise(path):
    sub = read_submission(path)
    assert not sub.untouched and sub.exercise == path.stem
    assert [label for label, learner, _ in sub.cells if learner], "the solution's answer cells are the learner's code"


@pytest.mark.distributed  # a judge process grades the solution
def test_minipipe_check_prints_verdicts_and_exits_0_only_when_all_pass(capsys):
    solved = "exercises/solutions/09_bubble_arithmetic.ipynb"
    assert main(["check", str(REPO / solved)]) == 0
    assert "✓ 5/5 checks passed" in capsys.readouterr().out
    assert main(["check", str(REPO / solved), str(REPO / "exercises/09_bubble_arithmetic.ipynb")]) == 1
    out = capsys.readouterr().out
    assert "not done yet: your answer cells are as the exercise hands them out" in out
    assert "2 notebooks: 1 passed, 1 not done yet" in out
    assert main(["check", str(REPO / "exercises/no_such.ipynb")]) == 2
    assert "no such notebook or folder" in capsys.readouterr().err


def test_minipipe_checks_report_names_the_notebook_each_cell_and_each_note():
    from pathlib import Path

    from minipipe.course.exercises.notebook import report
    from minipipe.course.grading.run import CellReport, GradeResult

    cells = [CellReport("cell 3 (yours)", "refused", "cell 3 (yours) starts a thread\nat line 2")]
    result = GradeResult(Path("exercises/08_balance_the_stages.ipynb"), "wrong", "✗ 1/5\n  ✓ one", cells, ["kept"])
    assert report(result).splitlines() == [
        "✗ exercises/08_balance_the_stages.ipynb: wrong",
        "  ✗ 1/5",
        "    ✓ one",
        "  cell 3 (yours): refused",
        "    cell 3 (yours) starts a thread",
        "    at line 2",
        "  note: kept",
    ]
    assert report(GradeResult(Path("a.ipynb"), "passed", "✓ 3/3")).splitlines() == ["✓ a.ipynb: passed", "  ✓ 3/3"]


@pytest.mark.parametrize(
    "exercise",
    ["01_scale_the_loss", "09_bubble_arithmetic", "13_choose_a_layout", "14_serve_and_generate"],
)
def test_a_solution_passes_every_check_that_starts_no_process(exercise, snapshot):
    """The checkers that judge on the cost model alone (05 measures real ranks: not here), given the
    solution's functions directly: every check passes, and the snapshot holds each check's line of the
    verdict (its cases, sizes and counts), and what the learner reads where each question's call is
    refused (the advice the checker gives with it; judged.AskingClient)."""
    refusals = []
    text = solution_judged(exercise, refusals)
    assert text.startswith("✓ ") and "checks passed" in text.splitlines()[0], text
    assert refusals == snapshot


# -- every checker: the untouched stub is "not done yet", before any process starts ---------------
def _stub(*args, **kwargs):
    raise NotImplementedError()


class _StubFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        raise NotImplementedError()

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError()


STUBS = {
    "01 scale the loss": (ex.check_loss_scaling, (_stub,)),
    "02 GPipe": (ex.check_gpipe, (_stub,)),
    "03 1F1B": (ex.check_one_f_one_b, (_stub,)),
    "04 deadlock": (ex.check_deadlock_fixed, (_stub,)),
    "05 memory": (ex.check_memory_budget, (_stub, _stub)),
    "06 baton": (ex.check_stage_step, (_stub,)),
    "07 interleaved": (ex.check_interleaved, (_stub, _stub)),
    "08 balance": (ex.check_balance, (_stub, _stub)),
    "09 bubble": (ex.check_bubble_arithmetic, (_stub, _stub, _stub)),
    "10 zero bubble": (ex.check_zero_bubble, (_stub,)),
    "11 tensor parallel": (ex.check_tensor_parallel, (_StubFunction, _StubFunction)),
    "12 bucketed all-reduce": (ex.check_data_parallel, (_stub, _stub)),
    "13 layout": (ex.check_layout, (_stub,)),
    "14 serving": (ex.check_serving, (_stub, _stub, _stub)),
    "15 sharded": (ex.check_sharded, (_stub, _stub)),
    "16 beat the search": (ex.check_beat_the_search, (_stub,)),
}


@pytest.mark.parametrize("name", STUBS)
def test_the_stub_is_not_done_yet(name):
    check, args = STUBS[name]
    with pytest.raises(ex.NotDoneYet, match="not done yet"):
        direct(check, *args)


# -- the ranks as threads --------------------------------------------------------------------------
def test_threads_sum_like_gloo_and_report_a_rank_that_never_joins():
    world = ThreadWorld(3)

    def body(rank):
        t = torch.full((2,), float(rank))
        torch.distributed.all_reduce(t)
        return t

    assert [r.tolist() for r in world.run(body, "sum")] == [[3.0, 3.0]] * 3

    lonely = ThreadWorld(2, timeout=0.5)

    def only_rank_0(rank):
        if rank == 0:
            torch.distributed.all_reduce(torch.ones(1))

    with pytest.raises(Mistake) as refused:
        lonely.run(only_rank_0, "lonely")
    assert str(refused.value) == (
        "lonely: the ranks did not run the same collectives (all-reduces so far: rank 0 1, rank 1 0); one waited "
        "0.5 s for a partner that never came. Every rank must all-reduce the same tensors in the same order"
    )


def test_threads_say_how_to_call_a_collective_that_reached_torchs_own():
    """A name imported beforehand (from torch.distributed import all_reduce) reaches torch's own, which
    finds no process group: the message names the run and says to call it through the module."""

    def imported_beforehand(rank):
        raise RuntimeError("Default process group has not been initialized, please call init_process_group.")

    with pytest.raises(Mistake) as refused:
        ThreadWorld(2).run(imported_beforehand, "your all-reduce")
    assert str(refused.value).startswith(
        "your all-reduce: RuntimeError: Default process group has not been initialized"
    ) and "Call the collective through the module, dist.all_reduce(tensor, group=group)" in str(refused.value)


# -- the learner's JupyterLab shows the course, not the grading tools --------------------------------
def _jupyter(*args) -> list[str]:
    import re
    import subprocess
    from pathlib import Path

    done = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter"), *args], capture_output=True, text=True, timeout=120
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr).splitlines()


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_the_course_jupyterlab_lists_no_nbgrader_extension():
    """As `make setup` leaves the environment (python -m minipipe.course.jupyter_setup)."""
    on = [
        line.strip()
        for line in _jupyter("labextension", "list") + _jupyter("server", "extension", "list")
        if "nbgrader" in line and " enabled" in line
    ]
    assert not on, f"the course's JupyterLab shows the teacher's nbgrader: {on}; run `make setup`"


def test_hiding_the_grading_tools_is_what_jupyter_reads(tmp_path):
    import shutil
    from pathlib import Path

    from minipipe.course import jupyter_setup

    config = tmp_path / "jupyter"
    nbgrader_on = {"ServerApp": {"jpserver_extensions": {name: True for name in jupyter_setup.SERVER_EXTENSIONS}}}
    (config / "jupyter_server_config.d").mkdir(parents=True)
    (config / "jupyter_server_config.d" / "nbgrader.json").write_text(__import__("json").dumps(nbgrader_on))
    etc = Path(sys.prefix) / "etc" / "jupyter" / "labconfig"
    if etc.exists():
        shutil.copytree(etc, config / "labconfig")
    assert set(jupyter_setup.SERVER_EXTENSIONS) <= set(jupyter_setup.teacher_tools_visible([str(config)]))
    jupyter_setup.hide_teacher_tools(config)
    assert jupyter_setup.teacher_tools_visible([str(config)]) == []


# -- a real run whose losses differ from the whole model's: the verdict names whose run it was -----------
REAL_RUN_LABELS = {
    "02_write_gpipe": "your GPipe",
    "03_one_f_one_b": "your 1F1B",
    "04_fix_a_deadlock": "your fixed schedule",
    "05_memory_budget": "gpipe run",
    "07_interleaved_1f1b": "your interleaved 1F1B",
    "08_balance_the_stages": "your cut",
    "10_zero_bubble": "your ZB-H1",
    "16_beat_the_search": "your schedule",
}


@pytest.mark.parametrize("exercise", REAL_RUN_LABELS)
def test_a_real_run_that_trains_differently_is_named_in_the_verdict(exercise, monkeypatch, tmp_path):
    """The launch played (no process starts): every run's losses 0.5 above the whole model's, as a schedule
    that drops or repeats a micro-batch trains. The verdict names the run, the step and both losses."""
    import types

    from minipipe.course.exercises import runs
    from minipipe.engine import launch
    from tests.support import judged

    def trained_differently(configs):
        return [types.SimpleNamespace(losses=[x + 0.5 for x in runs.whole_model_losses(c)]) for c in configs]

    monkeypatch.setattr(launch, "run_many", trained_differently)
    monkeypatch.chdir(tmp_path)  # 16 writes its leaderboard beside the notebook: the folder it runs in
    if exercise == "08_balance_the_stages":
        judged.SAID = None  # its verdict holds what this machine's clock measured: no snapshot of it
    with pytest.raises(ex.WrongAnswer) as refused:
        solution_judged(exercise)
    said = " ".join(str(refused.value).split())
    assert re.search(
        rf"{re.escape(REAL_RUN_LABELS[exercise])}: the loss of step 0 is (\d+\.\d+) on the pipeline, "
        r"(\d+\.\d+) for the whole model on one process; they must be equal",
        said,
    ), said
