"""Participants kept apart, piece by piece (the hub test sees it all at once): the start report says
whether they are; the answers in the checkout are closed; a participant's folder is given to them
without root following what they planted in it; their users are made once per room and never taken
over; a room they could not reach is refused before any user is made; and the gradebook runs each
notebook as its participant."""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

from minipipe.cli import main
from minipipe.workshop.accounts import (
    as_participant,
    login_of,
    make_accounts,
    remove_accounts,
    room_accounts,
    why_not_separated,
)
from minipipe.workshop.apart import close_room, lock_teacher_only
from minipipe.workshop.owner import give_folder
from minipipe.workshop.room import Room
from tests.support.users import open_to_others, root_or_skip, users_or_skip

REPO = Path(__file__).resolve().parents[2]
OUTSIDER = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def hub_or_skip():
    try:
        from minipipe.workshop.hub import proxy_command

        proxy_command()
    except (ImportError, ValueError) as e:
        pytest.skip(f"JupyterHub or its proxy is not installed (make workshop-setup): {e}")


def test_the_start_report_says_whether_participants_will_be_kept_apart(tmp_path, capsys):
    hub_or_skip()
    room = ["--names", "ada", "--room", str(tmp_path / "room"), "--dry-run"]
    assert main(["workshop", "start", *room]) == 0
    said = capsys.readouterr().out
    if why_not_separated() is None:
        assert "participants will run as their own Unix users (mp-ada), made when the hub starts" in said
        assert "to start it: the same command without --dry-run (which makes the participants' users)" in said
    else:
        assert f"participants NOT separated: {why_not_separated()}, so every server runs as this one user" in said
    assert main(["workshop", "start", *room, "--same-user"]) == 0
    assert "participants NOT separated: --same-user was given" in capsys.readouterr().out
    assert mode(tmp_path / "room" / "hub") == 0o700  # the passwords' folder: the teacher's


def test_the_answers_in_a_checkout_are_closed_and_the_course_is_not(tmp_path):
    for rel in ("exercises/solutions", "exercises/source", "artifacts/executed", "lessons", "minipipe"):
        (tmp_path / rel).mkdir(parents=True, mode=0o755)
    (tmp_path / ".git").write_text("gitdir: /elsewhere/.git/worktrees/x\n")  # a worktree
    locked, notes = lock_teacher_only(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in locked) == [
        "artifacts",
        "exercises/solutions",
        "exercises/source",
    ]
    assert all(mode(p) == 0o700 for p in locked) and mode(tmp_path / "lessons") == mode(tmp_path / "minipipe") == 0o755
    assert len(notes) == 1 and "/elsewhere/.git/worktrees/x" in notes[0]
    (tmp_path / ".git").unlink()
    (tmp_path / ".git").mkdir(mode=0o755)
    assert tmp_path / ".git" in lock_teacher_only(tmp_path)[0] and mode(tmp_path / ".git") == 0o700


def test_a_participants_folder_is_given_to_them_without_following_what_they_planted(tmp_path):
    root_or_skip()
    outside = tmp_path / "outside"
    outside.write_text("root's")
    outside.chmod(0o644)
    folder = tmp_path / "ada"
    (folder / "lessons").mkdir(parents=True, mode=0o755)
    (folder / "lessons" / "00.ipynb").write_text("her work")
    (folder / "lessons" / "00.ipynb").chmod(0o664)
    (folder / "run.sh").write_text("echo")
    (folder / "run.sh").chmod(0o755)
    (folder / "link").symlink_to(outside)  # planted: root must not give `outside` away
    (folder / "lessons" / "dir-link").symlink_to(tmp_path)
    os.link(outside, folder / "hard")  # planted: a second name of root's file
    left = give_folder(folder, OUTSIDER, OUTSIDER)
    assert left == [f"{folder / 'hard'} (a file with 2 names)"]
    owned = {
        p.relative_to(folder).as_posix(): (p.lstat().st_uid, mode(p))
        for p in folder.rglob("*")
        if not p.is_symlink() and p.name != "hard"
    }
    assert owned == {"lessons": (OUTSIDER, 0o700), "lessons/00.ipynb": (OUTSIDER, 0o600), "run.sh": (OUTSIDER, 0o700)}
    assert (folder.stat().st_uid, mode(folder)) == (OUTSIDER, 0o700)
    assert (folder / "link").lstat().st_uid == OUTSIDER and (folder / "lessons" / "dir-link").lstat().st_uid == OUTSIDER
    assert (outside.stat().st_uid, mode(outside)) == (0, 0o644) and tmp_path.stat().st_uid == 0
    assert (folder / "lessons" / "00.ipynb").read_text() == "her work"


@pytest.fixture
def room():
    """A room in a folder every user may pass (pytest's tmp_path is inside one closed to others);
    whatever users the test made for it are removed afterwards."""
    users_or_skip()
    where = Path(tempfile.mkdtemp(prefix="minipipe-apart-"))
    where.chmod(0o755)
    yield where / "room"
    remove_accounts(where / "room")
    shutil.rmtree(where)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_users_are_made_once_for_a_room_and_a_user_it_did_not_make_is_never_taken_over(room):
    Room.open(room, ["zed"])
    first = make_accounts(room, ["zed"])["zed"]
    assert (first.login, pwd.getpwnam("mp-zed").pw_gecos) == ("mp-zed", f"minipipe workshop {first_room_id(room)}")
    assert make_accounts(room, ["zed"])["zed"] == first  # again: the same user
    other = room.parent / "other"
    Room.open(other, ["zed"])
    with pytest.raises(
        ValueError,
        match=r"mp-zed, for participant zed, was made for another workshop room \("
        rf"minipipe-room-\w+, {room}\): run `minipipe workshop cleanup --room` there",
    ):
        make_accounts(other, ["zed"])
    shutil.rmtree(room)  # that room deleted without `workshop cleanup`: its user is free
    assert (
        make_accounts(other, ["zed"])["zed"].uid == first.uid
        and room_accounts(other)["zed"].home == other / "participants" / "zed"
    )
    room = other
    subprocess.run(["useradd", "--no-create-home", "--comment", "someone's", "mp-yan"], check=True)
    try:
        with pytest.raises(
            ValueError,
            match=r"mp-yan, for participant yan, is not one this room made \(its comment: "
            r"\"someone's\"\): it is never taken over",
        ):
            make_accounts(room, ["yan"])
    finally:
        subprocess.run(["userdel", "mp-yan"], check=True)
    longest = "a" * 29  # mp- and 29: useradd's 32
    with pytest.raises(
        ValueError,
        match="is too long to be a Unix user as 'mp-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' "
        r"\(at most 29 characters\)",
    ):
        make_accounts(room, [longest + "a"])
    assert login_of(longest) == "mp-" + longest  # at the limit: a user name useradd takes
    assert remove_accounts(room) == ["mp-zed"] and "mp-zed" not in {p.pw_name for p in pwd.getpwall()}


def first_room_id(room: Path) -> str:
    from minipipe.workshop.limits import room_id

    return room_id(room)


def test_a_room_participants_could_not_reach_is_refused_before_any_user_is_made(tmp_path):
    users_or_skip()
    hub_or_skip()
    from minipipe.workshop.start import prepare_room

    closed = tmp_path / "closed"  # pytest's tmp_path: under a folder closed to others, too
    closed.mkdir(mode=0o700)
    with pytest.raises(
        ValueError,
        match=r"participants could not reach their folders \(.*/closed/room/participants\)"
        r": .* is closed to other users \(mode 0700\)",
    ):
        prepare_room(["ada"], str(closed / "room"), make_users=True)
    assert "mp-ada" not in {p.pw_name for p in pwd.getpwall()}


WHO = """import json, os, pwd
def tries(path):
    try:
        os.listdir(path)
        return "read"
    except PermissionError:
        return "refused"
print(json.dumps([pwd.getpwuid(os.getuid()).pw_name, os.environ["HOME"], tries(%r), tries(%r)]))
"""


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_the_gradebook_runs_each_notebook_as_its_participant(room):
    """The sandbox where ada's cells run is ada: her user, her home, her folder read, alan's refused;
    the judge, which computes the verdict, stays root."""
    from minipipe.workshop.gradebook import grade
    from tests.support.handed_in import handed_in, solution_of

    Room.open(room, ["ada", "alan"])
    close_room(room)
    accounts = make_accounts(room, ["ada", "alan"])
    for account in accounts.values():
        (account.home / "exercises").mkdir(parents=True)
        give_folder(account.home, account.uid, account.gid)
    ada, alan = accounts["ada"].home, accounts["alan"].home
    path = ada / "exercises" / "01_scale_the_loss.ipynb"
    who = WHO % (str(ada), str(alan))
    handed_in(
        path,
        "01_scale_the_loss",
        answer=solution_of("01_scale_the_loss"),
        added=[
            who.replace(
                "print(json.dumps(", "open(os.path.join(os.environ['HOME'], 'who.json'), 'w').write(json.dumps("
            )
        ],
    )
    give_folder(ada, accounts["ada"].uid, accounts["ada"].gid)
    with open_to_others([Path(sys.executable), REPO / "minipipe"]):
        book = grade(room, timeout=120, only=["01_scale_the_loss"])
    assert book.mark("ada", "01_scale_the_loss").verdict == "passed", book.mark("ada", "01_scale_the_loss")
    assert json.loads((ada / "who.json").read_text()) == ["mp-ada", str(ada), "read", "refused"]
    assert (ada / "who.json").stat().st_uid == accounts["ada"].uid
    assert as_participant(room, "ada", first=print).first is print
    assert as_participant(room.parent / "elsewhere", "ada", first=print) is print  # not a separated room


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_the_spawner_joins_the_cgroup_and_takes_the_cores_as_root_then_becomes_the_participant(room):
    hub_or_skip()
    from minipipe.workshop.hub import RoomSpawner

    Room.open(room, ["ada"])
    close_room(room)
    account = make_accounts(room, ["ada"])["ada"]
    account.home.mkdir()
    give_folder(account.home, account.uid, account.gid)
    groups = room.parent / "cg" / "room"  # a cgroup v2 tree, as files root alone may write
    (groups / "ada").mkdir(parents=True)
    core = sorted(os.sched_getaffinity(0))[-1]
    spawner = RoomSpawner(
        room_dir=str(room),
        slices={"ada": {"cores": [core], "gpus": None}},
        limits={"ada": {"memory": 2**30, "tasks": 256}},
        cgroups={"version": 2, "bases": {"": str(groups)}},
        accounts={"ada": "mp-ada"},
        home_dir_template=str(room / "participants" / "{username}"),
        user=types.SimpleNamespace(name="ada", url="/user/ada/"),
    )
    preexec = spawner.make_preexec_fn("ada")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, as Popen runs it before the server
        try:
            preexec()
            os.write(
                write,
                json.dumps(
                    [
                        os.getuid(),
                        os.getgid(),
                        os.getgroups(),
                        os.getcwd(),
                        sorted(os.sched_getaffinity(0)),
                        os.umask(0),
                    ]
                ).encode(),
            )
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        seen = f.read()
    os.waitpid(pid, 0)
    assert json.loads(seen or "null") == [account.uid, account.gid, [], str(account.home), [core], 0o077]
    assert (groups / "ada" / "cgroup.procs").read_text() == str(pid)  # joined while it still could
    assert spawner.user_env({"PATH": "/usr/bin"}) == {
        "PATH": "/usr/bin",
        "USER": "mp-ada",
        "LOGNAME": "mp-ada",
        "HOME": str(account.home),
        "SHELL": "/bin/bash",
    }
