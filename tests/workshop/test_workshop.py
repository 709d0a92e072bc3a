"""The workshop's pieces on their own, without a hub: each participant's slice of cores and GPUs,
their folder and password, what the hub's spawner gives their server, and the gradebook."""

import asyncio
import collections
import csv
import os
import shutil
import stat
import types
from pathlib import Path

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minipipe.cli import main
from minipipe.workshop.gradebook import grade
from minipipe.workshop.room import TEACHER, Room, hash_password, password_matches
from minipipe.workshop.slices import make_slices, table, warnings_for

REPO = Path(__file__).resolve().parents[2]
NAMES = [f"p{i:02d}" for i in range(1, 21)]


# -- slices -------------------------------------------------------------------------------------
def test_twenty_participants_on_a_64_core_8_gpu_server():
    room = make_slices(NAMES, list(range(64)), gpus=8)
    assert [len(s.cores) for s in room] == [3] * 20 and room[0].cores == (0, 1, 2) and room[19].cores == (57, 58, 59)
    assert [s.gpus for s in room[:9]] == [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (0,)]
    assert room[0].shares_gpu_with == ("p09", "p17") and room[0].cuda_visible_devices == "0"
    text = table(room, list(range(64)))
    assert text.splitlines()[2].split() == ["p01", "0-2", "(3)", "0", "p09,", "p17"]
    assert text.splitlines()[-1] == "left to the hub: cores 60-63"
    assert any("shared by the participants the table names" in w for w in warnings_for(room))


def test_enough_gpus_are_split_without_sharing():
    room = make_slices(["ada", "alan"], list(range(16)), gpus=8)
    assert [s.gpus for s in room] == [(0, 1, 2, 3), (4, 5, 6, 7)] and all(not s.shares_gpu_with for s in room)
    assert [s.cores for s in room] == [tuple(range(8)), tuple(range(8, 16))]
    assert make_slices(["ada"], [0, 1], gpus=0)[0].cuda_visible_devices is None


@given(n=st.integers(1, 40), cores=st.integers(1, 128), gpus=st.integers(0, 16))
def test_slices_never_share_a_core_and_share_gpus_only_when_they_must(n, cores, gpus):
    names = [f"p{i}" for i in range(n)]
    if cores < n:
        with pytest.raises(ValueError, match=f"{n} participants but {cores} CPU cores"):
            make_slices(names, list(range(cores)), gpus)
        return
    room = make_slices(names, list(range(cores)), gpus)
    taken = [c for s in room for c in s.cores]
    assert len(taken) == len(set(taken)) and {len(s.cores) for s in room} == {cores // n}
    load = collections.Counter(g for s in room for g in s.gpus)
    if gpus >= n:
        assert max(load.values()) == 1 and {len(s.gpus) for s in room} == {gpus // n}
    elif gpus:
        assert max(load.values()) - min(load.values()) <= 1 and all(len(s.gpus) == 1 for s in room)
        assert all(len(s.shares_gpu_with) == load[s.gpus[0]] - 1 for s in room)
    else:
        assert not load


def test_one_core_each_warns_that_lesson_10_will_not_run():
    assert any("lesson 13" in w for w in warnings_for(make_slices(["ada", "alan"], [0, 1], 0)))
    assert not warnings_for(make_slices(["ada", "alan"], [0, 1, 2, 3], 0))


@pytest.mark.parametrize(
    "names,message",
    [
        (["Ada"], "lower-case letters"),
        (["ada", "ada"], "ada appears more than once"),
        ([], "at least one participant"),
        (["../x"], "lower-case letters"),
    ],
)
def test_bad_names_are_refused(names, message):
    with pytest.raises(ValueError, match=message):
        make_slices(names, list(range(8)), 0)


# -- the room -----------------------------------------------------------------------------------
def test_a_room_keeps_its_passwords_and_never_overwrites_a_participants_work(tmp_path):
    room = Room.open(tmp_path, ["ada", "alan"])
    assert set(room.passwords) == {TEACHER, "ada", "alan"} and len(set(room.passwords.values())) == 3
    assert stat.S_IMODE((room.hub_dir / "passwords.csv").stat().st_mode) == 0o600
    copied = room.furnish("ada")
    assert "lessons/00_start_here.ipynb" in copied and "exercises/03_one_f_one_b.ipynb" in copied
    ada = room.folder("ada")
    assert not list(ada.rglob("*solution*")) and not (ada / "exercises" / "solutions").exists()
    assert (ada / "exercises" / "03_one_f_one_b.ipynb").read_bytes() == (
        REPO / "exercises" / "03_one_f_one_b.ipynb"
    ).read_bytes()  # the learner's stub, not the solution
    (ada / "lessons" / "00_start_here.ipynb").write_text("my own work")
    (ada / "lessons" / "01_why_split.ipynb").unlink()  # deleted by mistake
    again = Room.open(tmp_path, ["ada", "alan", "grace"])
    assert again.passwords["ada"] == room.passwords["ada"] and "grace" in again.passwords
    assert again.furnish("ada") == ["lessons/01_why_split.ipynb"]
    assert (ada / "lessons" / "00_start_here.ipynb").read_text() == "my own work"
    loaded = Room.load(tmp_path)
    assert loaded.names == ["ada", "alan", "grace"] and password_matches(room.passwords["alan"], loaded.hashes["alan"])
    assert "password" not in (room.hub_dir / "room.json").read_text().replace("passwords", "")


def test_every_lesson_is_handed_out_and_picked_by_its_own_number():
    """A lesson put between two others (09b after 09) is a lesson like the rest: in each participant's
    folder, and in the materials by its number, which picks it alone."""
    from minipipe.workshop.materials import lesson_paths
    from minipipe.workshop.room import course_files

    lessons = sorted(p.name for p in (REPO / "lessons").glob("*.ipynb") if p.name != "glossary.ipynb")
    assert "09b_asynchronous_pipelines.ipynb" in lessons
    assert (
        sorted(k.removeprefix("lessons/") for k in course_files() if k.startswith("lessons/") and k.endswith(".ipynb"))
        == lessons
    )
    assert [p.stem for p in lesson_paths(["09"])] == ["09_zero_bubble"]
    assert [p.stem for p in lesson_paths(["09b"])] == ["09b_asynchronous_pipelines"]
    assert [p.name for p in lesson_paths()] == lessons


def test_passwords_are_checked_against_salted_hashes():
    stored = hash_password("k7mq-2xpa-9rtd")
    assert password_matches("k7mq-2xpa-9rtd", stored) and not password_matches("k7mq-2xpa-9rte", stored)
    assert hash_password("same") != hash_password("same") and not password_matches("x", "not a hash")


def test_a_shared_password_needs_eight_characters_and_the_teacher_keeps_their_own(tmp_path):
    with pytest.raises(ValueError, match="at least 8 characters"):
        Room.open(tmp_path, ["ada"], shared_password="short")
    room = Room.open(tmp_path, ["ada", "alan"], shared_password="pipeline-day")
    assert room.passwords["ada"] == room.passwords["alan"] == "pipeline-day" != room.passwords[TEACHER]
    with pytest.raises(ValueError, match="the teacher's log-in"):
        Room.open(tmp_path, ["teacher"])


# -- what the hub does with them (JupyterHub's classes, no hub running) ---------------------------
hub = pytest.importorskip(
    "minipipe.workshop.hub", reason="JupyterHub is the workshop extra: pip install -e '.[workshop]'"
)


def test_the_authenticator_lets_in_the_rooms_names_with_their_passwords_only(tmp_path):
    room = Room.open(tmp_path, ["ada", "alan"])
    auth = hub.RoomAuthenticator(room_dir=str(tmp_path))

    def log_in(name, password):
        return asyncio.run(auth.authenticate(None, {"username": name, "password": password}))

    assert log_in("ada", room.passwords["ada"]) == {"name": "ada", "admin": False}
    assert log_in("ada", room.passwords["alan"]) is None  # another's password
    assert log_in("eve", room.passwords["ada"]) is None  # not in the room
    assert log_in(TEACHER, room.passwords[TEACHER]) == {"name": TEACHER, "admin": True}
    assert auth.check_allowed("alan") and not auth.check_allowed("eve")


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_the_spawner_puts_a_server_on_its_slice_in_its_folder(tmp_path):
    Room.open(tmp_path, ["ada", "alan"])
    core = sorted(os.sched_getaffinity(0))[-1]
    spawner = hub.RoomSpawner(
        room_dir=str(tmp_path),
        slices={"ada": {"cores": [core], "gpus": [1]}},
        home_dir_template=str(tmp_path / "participants" / "{username}"),
        machine_gpus="4,5",
        user=types.SimpleNamespace(name="ada", url="/user/ada/"),
    )
    preexec = spawner.make_preexec_fn("ada")
    pid = os.fork()
    if pid == 0:  # the child, as Popen runs it before the server: affinity and folder
        try:
            preexec()
            ok = os.sched_getaffinity(0) == {core} and Path.cwd() == tmp_path / "participants" / "ada"
        finally:
            os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0
    env = spawner.slice_env("/usr/bin")
    assert (env["CUDA_VISIBLE_DEVICES"], env["OMP_NUM_THREADS"]) == ("5", "1")  # the hub's GPU 1 is the machine's 5
    assert env["PATH"].endswith(":/usr/bin") and Path(env["PATH"].split(":")[0], "jupyterhub-singleuser").exists()
    spawner.user = types.SimpleNamespace(name=TEACHER, url="/user/teacher/")
    with pytest.raises(RuntimeError, match="the teacher's log-in has no server"):
        spawner.make_preexec_fn(TEACHER)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_the_spawner_puts_a_server_in_its_cgroup_or_does_not_start_it(tmp_path):
    Room.open(tmp_path, ["ada"])
    groups = tmp_path / "cg" / "room"  # a cgroup v2 tree, as files
    (groups / "ada").mkdir(parents=True)
    spawner = hub.RoomSpawner(
        room_dir=str(tmp_path),
        slices={"ada": {"cores": [sorted(os.sched_getaffinity(0))[0]], "gpus": None}},
        limits={"ada": {"memory": 2**30, "tasks": 256}},
        cgroups={"version": 2, "bases": {"": str(groups)}},
        home_dir_template=str(tmp_path / "participants" / "{username}"),
        user=types.SimpleNamespace(name="ada", url="/user/ada/"),
    )
    preexec = spawner.make_preexec_fn("ada")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            preexec()
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert (groups / "ada" / "cgroup.procs").read_text() == str(pid)  # the server's process joined ada's cgroup
    assert spawner.slice_env("/usr/bin")["MINIPIPE_ROOM"] == str(tmp_path)  # whose processes are whose (status)
    shutil.rmtree(groups / "ada")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            preexec()
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] != 0  # no cgroup to join: the server would not start unlimited


def test_the_teacher_lands_on_the_admin_page_and_participants_on_their_server():
    handler = types.SimpleNamespace(
        current_user=types.SimpleNamespace(name=TEACHER), hub=types.SimpleNamespace(base_url="/hub/")
    )
    assert hub.landing(handler) == "/hub/admin"
    handler.current_user = types.SimpleNamespace(name="ada")
    assert hub.landing(handler) == ""  # JupyterHub's default: start and open their server
    handler.current_user = None
    assert hub.landing(handler) == ""


def test_start_refuses_a_room_the_machine_cannot_hold_before_anything_starts(tmp_path, capsys):
    too_many = str(len(os.sched_getaffinity(0)) + 1)
    assert main(["workshop", "start", "-n", too_many, "--room", str(tmp_path / "room"), "--dry-run"]) == 2
    assert "participants but" in capsys.readouterr().err and not (tmp_path / "room").exists()


# -- the gradebook --------------------------------------------------------------------------------
def check_notebook(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"tags": ["check"]})]
    return nb


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_gradebook_has_a_verdict_and_a_message_for_every_participant_and_exercise(tmp_path):
    ada, alan = tmp_path / "ada" / "exercises", tmp_path / "alan"  # a room's layout, and notebooks loose
    ada.mkdir(parents=True)
    alan.mkdir()
    shutil.copy(REPO / "exercises" / "solutions" / "01_scale_the_loss.ipynb", ada)
    shutil.copy(REPO / "exercises" / "01_scale_the_loss.ipynb", alan)  # the untouched stub
    nbformat.write(
        check_notebook(
            "from minipipe.course.exercises.verdict import WrongAnswer\n"
            "raise WrongAnswer('rank 0 holds 4 micro-batches; 1F1B holds at most 3')"
        ),
        ada / "03_one_f_one_b.ipynb",
    )
    book = grade(tmp_path, timeout=120, jobs=2)
    assert book.participants == ["ada", "alan"] and book.exercises == ["01_scale_the_loss", "03_one_f_one_b"]
    assert book.mark("ada", "01_scale_the_loss").verdict == "passed"
    assert book.mark("alan", "01_scale_the_loss").verdict == "not yet"
    wrong = book.mark("ada", "03_one_f_one_b")  # a verdict typed into the notebook is not the grader's
    assert wrong.verdict == "wrong" and "calls the checker's own code" in wrong.message
    assert book.mark("alan", "03_one_f_one_b").verdict == "not yet"  # no notebook
    csv_path, html_path = book.write(tmp_path / "out")
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    assert [(r["participant"], r["exercise"], r["verdict"]) for r in rows] == [
        ("ada", "01_scale_the_loss", "passed"),
        ("ada", "03_one_f_one_b", "wrong"),
        ("alan", "01_scale_the_loss", "not yet"),
        ("alan", "03_one_f_one_b", "not yet"),
    ]
    page = html_path.read_text()
    assert "calls the checker" in page and "<th>alan</th>" in page and "1/2" in page


def test_the_gradebook_says_what_is_wrong_with_its_folder(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        grade(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="holds no participant folders"):
        grade(tmp_path)
