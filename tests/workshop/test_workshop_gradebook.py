"""The gradebook over a hub's room: every participant's exercise notebooks are judged by the
course's grader (and their lessons are not read), and a notebook that is broken JSON, hangs, is a
FIFO or fills memory costs its own cell of the table and a bounded time, never the gradebook. How
the verdict resists what a participant does to the check cells is in tests/course/test_grading_tamper.py."""

import os
import shutil
import time
from pathlib import Path

import pytest

from minipipe.workshop.gradebook import grade, participant_folders
from minipipe.workshop.room import Room
from tests.support.handed_in import handed_in

REPO = Path(__file__).resolve().parents[2]
EXERCISE = "09_bubble_arithmetic"  # judged on the simulator alone: no worker processes
HANGS = "import time\nwhile True:\n    time.sleep(0.1)\n"
IGNORES_INTERRUPTS = (
    "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except BaseException:\n        pass\n"
)


def test_a_rooms_folders_give_every_participants_exercises_and_not_their_lessons(tmp_path):
    room = Room.open(tmp_path, ["ada", "alan", "grace"])
    for name in room.names:
        room.furnish(name)
    folders = participant_folders(tmp_path)
    assert list(folders) == ["ada", "alan", "grace"]
    assert all(f == tmp_path / "participants" / n / "exercises" for n, f in folders.items())
    assert not (tmp_path / "participants" / "teacher").exists()


def test_hidden_folders_in_a_room_are_not_participants(tmp_path):
    """JupyterLab's .ipynb_checkpoints, a desktop's .Trash-1000, git's .git: none of them is somebody."""
    room = Room.open(tmp_path, ["ada"])
    room.furnish("ada")
    for hidden in (".ipynb_checkpoints", ".Trash-1000", ".git"):
        (tmp_path / "participants" / hidden).mkdir()
        (tmp_path / hidden).mkdir()
    assert list(participant_folders(tmp_path)) == ["ada"]
    assert list(participant_folders(tmp_path / "participants")) == ["ada"]
    plain = tmp_path / "plain"
    (plain / ".ipynb_checkpoints").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no participant folders"):  # hidden ones alone: nobody
        participant_folders(plain)


def test_a_copy_made_in_jupyterlab_is_named_but_is_not_a_column_of_its_own(tmp_path):
    handed_in(tmp_path / "ada" / "03_one_f_one_b-Copy1.ipynb", "03_one_f_one_b")
    (tmp_path / "alan").mkdir()
    book = grade(tmp_path)  # nothing named as an exercise: no notebook runs
    assert book.exercises == [] and book.not_graded == [tmp_path / "ada" / "03_one_f_one_b-Copy1.ipynb"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_as_an_exercise_is_refused_at_once_and_never_opened(tmp_path):
    (tmp_path / "ada").mkdir()
    os.mkfifo(tmp_path / "ada" / f"{EXERCISE}.ipynb")  # a reader that opens it waits for a writer: forever
    (tmp_path / "alan").mkdir()
    (tmp_path / "alan" / f"{EXERCISE}.ipynb").symlink_to("/dev/zero")
    started = time.monotonic()
    book = grade(tmp_path, timeout=600)
    assert time.monotonic() - started < 10
    fifo, device = book.mark("ada", EXERCISE), book.mark("alan", EXERCISE)
    assert fifo.verdict == "wrong" and "is a FIFO (named pipe), not a notebook file; it was not read" in fifo.message
    assert device.verdict == "wrong" and "is a device" in device.message


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_broken_and_hanging_notebooks_get_their_own_verdict_in_bounded_time(tmp_path):
    room = Room.open(tmp_path, ["ada", "alan", "grace"])
    for name in room.names:
        room.furnish(name)
    ex = {name: room.folder(name) / "exercises" for name in room.names}
    shutil.copy(REPO / "exercises" / "solutions" / f"{EXERCISE}.ipynb", ex["ada"])
    (ex["alan"] / f"{EXERCISE}.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')  # saved half-way
    handed_in(ex["grace"] / f"{EXERCISE}.ipynb", EXERCISE, added_before=[HANGS])
    handed_in(ex["grace"] / "02_write_gpipe.ipynb", "02_write_gpipe", added_before=[IGNORES_INTERRUPTS])
    timeout = 15.0
    started = time.monotonic()
    book = grade(tmp_path, timeout=timeout, jobs=2, only=[EXERCISE, "02_write_gpipe"])
    took = time.monotonic() - started
    assert book.participants == ["ada", "alan", "grace"]
    assert book.mark("ada", EXERCISE).verdict == "passed"
    broken = book.mark("alan", EXERCISE)
    assert broken.verdict == "wrong" and "is not a Jupyter notebook" in broken.message, broken
    for exercise in (EXERCISE, "02_write_gpipe"):
        hung = book.mark("grace", exercise)
        assert hung.verdict == "wrong" and "timed out" in hung.message and "(yours)" in hung.message, hung
    # ada's and alan's notebooks in the untouched-stub columns: not yet, nothing ran
    assert book.mark("ada", "02_write_gpipe").verdict == "not yet"
    # two at a time: the two that hang end after a cell's timeout each, beside ada's, whatever a judge's start costs
    assert took < 2 * timeout + 90, took
    csv_path, _ = book.write(tmp_path / "out")
    assert "is not a Jupyter notebook" in csv_path.read_text()


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_in_a_limited_room_a_notebook_that_fills_memory_dies_inside_its_owners_share(tmp_path):
    import json

    from minipipe.workshop.limits import Cgroups, describe_enforcement, room_id

    groups = Cgroups.find(room_id(tmp_path))
    if groups is None:
        pytest.skip(describe_enforcement(None))
    room = Room.open(tmp_path, ["ada", "alan"])
    cores = sorted(os.sched_getaffinity(0))
    (room.hub_dir / "slices.json").write_text(json.dumps({n: {"cores": cores, "gpus": None} for n in room.names}))
    (room.hub_dir / "limits.json").write_text(
        json.dumps(
            {"limits": {n: {"memory": 400 * 2**20, "tasks": 256} for n in room.names}, "cgroups": groups.settings()}
        )
    )
    for name in room.names:
        (room.folder(name) / "exercises").mkdir(parents=True)
    fills = "b = bytearray(2 * 2**30)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"  # 2 GiB, over 400 MiB
    handed_in(room.folder("ada") / "exercises" / f"{EXERCISE}.ipynb", EXERCISE, added_before=[fills])
    shutil.copy(REPO / "exercises" / "solutions" / f"{EXERCISE}.ipynb", room.folder("alan") / "exercises")
    try:
        book = grade(tmp_path, timeout=60, jobs=2, only=[EXERCISE])
    finally:
        for name in room.names:
            groups.kill(name)
        time.sleep(0.2)
        for name in room.names:
            groups.remove(name)
    died = book.mark("ada", EXERCISE)
    assert died.verdict == "wrong" and "died" in died.message, died
    assert book.mark("alan", EXERCISE).verdict == "passed"
