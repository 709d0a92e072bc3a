"""The watch over the learner's code (minipipe/course/grading/watch.py), each door tried from an
answer to exercise 02 that is right but for the door: the engine reached from a thread, under a
swallowing except, through the profiler switched off and on, with the frames taken, through ctypes
or gc, the course's sources opened, the workers' environment changed; and what the watch must not
refuse (an allowed tool, a library that sets its own environment variable, the engine tried in a
cell of the learner's). A refusal in a worker process of a real run is the sandbox's verdict. The
JupyterLab check (the answers sent by value) and minipipe check (the cells graded) agree."""

import pytest

from minipipe.course.exercises import WrongAnswer
from minipipe.course.grading.run import grade_notebook, judge_objects
from tests.support.handed_in import handed_in
from tests.support.judged import notebook_cells, sandboxed

RIGHT = "[[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)]"
DOORS = {
    "a thread of its own": ("import threading\nthreading.Thread(target=lambda: None).start()", "starts a thread"),
    "the engine under a bare except": (
        "try:\n    __import__('minipipe').make_schedule('gpipe', p, m)\nexcept BaseException:\n    pass",
        "calls make_schedule",
    ),
    "the profiler looked at": ("import sys\nsys.getprofile()", "looks at the checker's watch (sys.getprofile)"),
    "a tracer over the watch": ("import sys\nsys.settrace(lambda *a: None)", "installs a tracer over the checker's"),
    "threading's hook replaced": ("import threading\nthreading.setprofile(None)", "off for new threads"),
    "the frames taken": ("import sys\nsys._getframe(1).f_globals", "takes the interpreter's frames"),
    "a traceback's frame": (
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame",
        "takes the interpreter's frames (tb_frame)",
    ),
    "the garbage collector's objects": ("import gc\ngc.get_objects()", "looks into the interpreter's objects (gc."),
    "C code": ("import ctypes\nctypes.CDLL(None)", "loads C code (ctypes)"),
    "the engine's source opened": (
        "import minipipe.schedule.ops as ops\nopen(ops.__file__.replace('ops.py', 'generators.py')).read()",
        "which the check keeps to itself",
    ),
    "the workers' watch switched off": (
        "import os\nos.environ['MINIPIPE_WORKER_INIT'] = ''",
        "changes MINIPIPE_WORKER_INIT in the environment",
    ),
    "a process of its own": ("import os\nos.system('true')", "runs a shell command (os.system)"),
}


def gpipe_with(door: str) -> str:
    body = "\n".join("    " + line for line in door.splitlines())
    return f"def gpipe(p, m):\n{body}\n    return {RIGHT}\n"


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("door", DOORS)
def test_each_door_is_refused_with_its_words(door):
    source, words = DOORS[door]
    cells, names = notebook_cells("02_write_gpipe", gpipe_with(source))
    with pytest.raises(WrongAnswer) as info:
        sandboxed("check_gpipe", *names, cells=cells)
    text = " ".join(str(info.value).split())
    assert words in text and "(at cell 5 (yours), line" in text, text


ALLOWED = {
    "the validator and the simulator on its own lists": (
        "from minipipe import Schedule, simulate\nfrom minipipe.schedule.validate import validate\n"
        f"validate(Schedule.custom({RIGHT}))\nsimulate(Schedule.custom({RIGHT}))"
    ),
    "a library setting a variable of its own": "import os\nos.environ['MY_SETTING'] = '1'",
}


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_what_the_exercise_allows_and_the_learners_own_trying_are_not_refused():
    tried = "from minipipe import make_schedule\nprint(make_schedule('gpipe', 2, 3))     # in a cell: to compare"
    answers = [gpipe_with(body) for body in ALLOWED.values()]
    cells, names = notebook_cells("02_write_gpipe", tried, *answers)
    assert "5/5 checks passed" in sandboxed("check_gpipe", *names, cells=cells, timeout=300)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_refusal_in_a_worker_process_of_the_real_run_is_the_verdict():
    """Right in the sandbox, the engine's own forward only where torch.distributed runs: in the workers."""
    cells, names = notebook_cells(
        "06_pass_the_baton",
        """
_yours = stage_step


def stage_step(stage, baton):
    import torch.distributed as dist
    if dist.is_initialized():
        from minipipe.engine.stage import Stage
        Stage.forward(stage, baton.mb, None)
    return _yours(stage, baton)
""",
    )
    with pytest.raises(WrongAnswer) as info:
        sandboxed("check_stage_step", *names, cells=cells, timeout=240)
    text = " ".join(str(info.value).split())
    assert "2/3 checks passed" in text and "the engine's own stage forward" in text, text
    assert "in a worker process of the real run" in text, text


WRONG = "def makespan(kind, p, m, v, f, b):\n    return (m + p - 1) * (f + b)     # interleaving's 1/v forgotten\n"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_jupyterlab_check_and_minipipe_check_agree(tmp_path):
    from tests.support.handed_in import solution_of

    answer = solution_of("09_bubble_arithmetic")["c03"]
    answer = WRONG + answer[answer.index("\ndef bubble") :]
    on_disk = grade_notebook(handed_in(tmp_path / "09_bubble_arithmetic.ipynb", "09_bubble_arithmetic", answer=answer))
    namespace: dict = {}
    exec(compile(answer, "cell", "exec"), namespace)
    sent = judge_objects("check_bubble_arithmetic", (namespace["makespan"], namespace["bubble"], namespace["messages"]))
    assert on_disk.status == sent.status == "wrong"
    first = [result.text.splitlines()[:4] for result in (on_disk, sent)]
    assert first[0][:3] == first[1][:3] and "✗ makespan of interleaved" in first[0][3] + first[1][3], first


WORDING_BROKEN = {
    "the catalogs' module": "import minipipe.course.i18n.messages as said\nsaid.translations = None",
    "the refusals' words": "import sys\nsys.modules['minipipe.course.grading.words'].phrases = None",
}


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("broken", WORDING_BROKEN)
def test_a_refusal_whose_wording_the_learner_broke_still_refuses(broken):
    """A cell of the learner's breaks what a refusal is worded with (the catalogs' module is theirs to
    import, the watch's words reachable through sys.modules); the engine called under a bare except
    is refused all the same, in plain words. (An exception out of the profile function would switch
    the watch off, and the bare except would swallow it: 5/5 on main before the wording was guarded.)"""
    door = "try:\n    __import__('minipipe').make_schedule('gpipe', p, m)\nexcept BaseException:\n    pass"
    cells, names = notebook_cells("02_write_gpipe", WORDING_BROKEN[broken], gpipe_with(door))
    with pytest.raises(WrongAnswer) as info:
        sandboxed("check_gpipe", *names, cells=cells)
    text = " ".join(str(info.value).split())
    assert text.startswith("✗ 0/5 checks passed") and ") does something the exercise does not allow;" in text, text
