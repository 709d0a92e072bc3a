"""The gradebook over a hub's room: every participant's exercise notebooks are read (and their lessons
are not), and a notebook that is broken JSON, hangs, or ignores being interrupted costs its own cell
of the table and a bounded time, never the gradebook."""
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from minipipe.workshop.gradebook import grade, participant_folders
from minipipe.workshop.room import Room

REPO = Path(__file__).resolve().parents[1]
HANGS = "import time\nwhile True:\n    time.sleep(0.1)\n"
IGNORES_INTERRUPTS = "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass\n"


def notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source),
                nbformat.v4.new_code_cell("print('checked')", metadata={"tags": ["check"]})]
    nbformat.write(nb, path)


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
    with pytest.raises(ValueError, match="holds no participant folders"):   # hidden ones alone: nobody
        participant_folders(plain)


def test_a_copy_made_in_jupyterlab_is_named_but_is_not_a_column_of_its_own(tmp_path):
    (tmp_path / "ada").mkdir()
    notebook(tmp_path / "ada" / "03_one_f_one_b-Copy1.ipynb", "pass")
    (tmp_path / "alan").mkdir()
    book = grade(tmp_path)                        # nothing named as an exercise: no notebook runs
    assert book.exercises == [] and book.not_graded == [tmp_path / "ada" / "03_one_f_one_b-Copy1.ipynb"]


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_broken_and_hanging_notebooks_get_their_own_verdict_in_bounded_time(tmp_path):
    room = Room.open(tmp_path, ["ada", "alan", "grace"])
    for name in room.names:
        room.furnish(name)
    ex = {name: room.folder(name) / "exercises" for name in room.names}
    shutil.copy(REPO / "exercises" / "solutions" / "01_scale_the_loss.ipynb", ex["ada"])
    (ex["alan"] / "01_scale_the_loss.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')   # saved half-way
    notebook(ex["grace"] / "01_scale_the_loss.ipynb", HANGS)
    notebook(ex["grace"] / "99_ignores_interrupts.ipynb", IGNORES_INTERRUPTS)
    timeout = 15.0
    started = time.monotonic()
    book = grade(tmp_path, timeout=timeout, jobs=2, only=["01_scale_the_loss", "99_ignores_interrupts"])
    took = time.monotonic() - started
    assert book.participants == ["ada", "alan", "grace"]
    assert book.mark("ada", "01_scale_the_loss").verdict == "passed"
    broken = book.mark("alan", "01_scale_the_loss")
    assert broken.verdict == "wrong" and "is not a Jupyter notebook" in broken.message, broken
    hung = book.mark("grace", "01_scale_the_loss")
    assert hung.verdict == "wrong" and "timed out" in hung.message, hung
    stubborn = book.mark("grace", "99_ignores_interrupts")
    assert stubborn.verdict == "wrong" and "timed out" in stubborn.message, stubborn
    assert book.mark("ada", "99_ignores_interrupts").verdict == "not yet"        # nobody else has that notebook
    # two notebooks at once: the two that hang end after a cell's timeout (and 5 s more for the one that
    # ignores the interrupt), beside ada's and alan's, whatever the kernels' start-up costs here
    assert took < 2 * timeout + 5 + 90, took
    csv_path, _ = book.write(tmp_path / "out")
    assert "is not a Jupyter notebook" in csv_path.read_text()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_minipipe_check_on_a_notebook_that_hangs_ends_and_says_so(tmp_path):
    notebook(tmp_path / "01_scale_the_loss.ipynb", HANGS)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "minipipe", "check", "--timeout", "3",
                           str(tmp_path / "01_scale_the_loss.ipynb")], capture_output=True, text=True, timeout=100)
    assert done.returncode != 0 and "timed out: the cell did not finish within 3 s" in done.stdout, done
    assert time.monotonic() - started < 90


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_in_a_limited_room_a_notebook_that_fills_memory_dies_inside_its_owners_share(tmp_path):
    import json

    from minipipe.workshop.limits import Cgroups, describe_enforcement, room_id

    groups = Cgroups.find(room_id(tmp_path))
    if groups is None:
        pytest.skip(describe_enforcement(None))
    room = Room.open(tmp_path, ["ada", "alan"])
    cores = sorted(__import__("os").sched_getaffinity(0))
    (room.hub_dir / "slices.json").write_text(json.dumps({n: {"cores": cores, "gpus": None} for n in room.names}))
    (room.hub_dir / "limits.json").write_text(json.dumps({
        "limits": {n: {"memory": 400 * 2**20, "tasks": 256} for n in room.names}, "cgroups": groups.settings()}))
    for name in room.names:
        (room.folder(name) / "exercises").mkdir(parents=True)
    notebook(room.folder("ada") / "exercises" / "01_scale_the_loss.ipynb",
             "b = bytearray(2 * 2**30)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n")     # 2 GiB, over 400 MiB
    notebook(room.folder("alan") / "exercises" / "01_scale_the_loss.ipynb", "x = 1")
    try:
        book = grade(tmp_path, timeout=60, jobs=2, only=["01_scale_the_loss"])
    finally:
        for name in room.names:
            groups.kill(name)
        time.sleep(0.2)
        for name in room.names:
            groups.remove(name)
    died = book.mark("ada", "01_scale_the_loss")
    assert died.verdict == "wrong" and "kernel died" in died.message, died
    assert book.mark("alan", "01_scale_the_loss").verdict == "passed"
