"""The folder of core locks that every run on the machine shares (engine/cores.py), as a workshop's
participants share it, each a user of their own: made sticky and writable by all (mode 1777) whatever
the umask, a folder one bit short of that set right and said, another user's such folder refused, a
link never followed; and across users, one user's run can neither take nor delete a core lock another
holds, and takes that core once it is free (its lock file opened read-only, whoever made it)."""

import json
import os
import shutil
import stat
import tempfile
import traceback
from pathlib import Path

import pytest

from minipipe.engine.cores import FOLDER_ENV, claim_cores
from tests.support.users import root_or_skip

CORE = 5  # the lock files' names only: nothing is pinned by a claim
ADA, ALAN = 65534, 65533  # two uids no file of the machine's belongs to (65534: nobody)


@pytest.fixture
def shared(monkeypatch):
    """The shared folder, where MINIPIPE_CORE_LOCKS names it: in a folder every user may pass (pytest's
    own tmp_path is under a folder closed to others)."""
    where = Path(tempfile.mkdtemp(prefix="minipipe-locks-"))
    where.chmod(0o755)
    monkeypatch.setenv(FOLDER_ENV, str(where / "locks"))
    yield where / "locks"
    shutil.rmtree(where)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_lock_folder_is_sticky_and_writable_by_all_and_its_locks_readable_whatever_the_umask(shared):
    old = os.umask(0o077)
    try:
        claim = claim_cores(1, allowed=[CORE])
    finally:
        os.umask(old)
    assert claim.cores == (CORE,) and claim.note is None
    assert mode(shared) == 0o1777 and mode(shared / f"core-{CORE}.lock") == 0o644
    claim.release()


@pytest.mark.parametrize("wrong", [0o0777, 0o1775, 0o1776, 0o1755])  # no sticky bit; no write for others
def test_a_lock_folder_one_bit_short_of_1777_is_set_right_and_said(shared, wrong):
    shared.mkdir()
    (shared / "core-0.lock").touch()  # another run's lock: what the bits are there to protect
    shared.chmod(wrong)
    claim = claim_cores(1, allowed=[CORE])
    assert claim.cores == (CORE,) and mode(shared) == 0o1777
    assert claim.note == (
        f"the folder of core locks {shared} had mode {wrong:04o}; set to mode 1777 (sticky, writable "
        f"by all), so that no user's run can delete another's locks"
    )
    claim.release()
    assert claim_cores(1, allowed=[CORE]).note is None  # 1777 itself: nothing to say


def test_an_empty_lock_folder_is_set_right_without_a_word(shared):
    shared.mkdir(mode=0o700)  # what a run makes before it sets the mode
    claim = claim_cores(1, allowed=[CORE])
    assert claim.cores == (CORE,) and claim.note is None and mode(shared) == 0o1777


def test_a_link_in_place_of_the_lock_folder_is_never_followed(shared):
    elsewhere = shared.parent / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    shared.symlink_to(elsewhere)
    claim = claim_cores(1, allowed=[CORE])
    assert claim.cores == () and claim.note.startswith(
        f"not pinned to cores: the folder of core locks {shared} is not a folder (a link, or a file"
    )
    assert mode(elsewhere) == 0o755 and not list(elsewhere.iterdir())


# -- across users (root: a forked child becomes another uid) ------------------------------------------
def as_user(uid: int, work, hold: bool = False):
    """Run `work()` in a child forked as `uid`; its result (JSON) is read back. With `hold`, the child
    then waits, holding what it claimed, until the returned `release()` is called."""
    answer_r, answer_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(answer_r)
            os.close(go_w)
            os.setgid(uid)
            os.setgroups([])
            os.setuid(uid)
            os.umask(0o077)
            os.write(answer_w, json.dumps(work()).encode() + b"\n")
            if hold:
                os.read(go_r, 1)  # returns at EOF: the parent let go
            code = 0
        except BaseException:  # noqa: BLE001 (the parent sees the exit code; this says why)
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(answer_w)
    os.close(go_r)
    with os.fdopen(answer_r) as f:
        answer = json.loads(f.readline() or "null")

    def release():
        os.close(go_w)
        assert os.waitpid(pid, 0)[1] == 0

    if not hold:
        release()
        return answer
    return answer, release


def claim_one():
    claim = claim_cores(1, allowed=[CORE])
    return [list(claim.cores), claim.note]


def try_to(action, path: str):
    try:
        action(path)
        return "done"
    except PermissionError:
        return "refused"


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_one_users_run_can_neither_take_nor_delete_another_users_core_lock_and_takes_it_once_free(shared):
    root_or_skip()
    claim_cores(1, allowed=[CORE]).release()  # the folder as the hub makes it: root's, 1777
    lock = shared / f"core-{CORE}.lock"
    lock.unlink()  # ada makes the lock file below: hers, 0644
    (cores, note), release = as_user(ADA, claim_one, hold=True)
    assert cores == [CORE] and note is None and lock.stat().st_uid == ADA
    busy, note = as_user(ALAN, claim_one)
    assert busy == [] and "are pinned by other runs" in note
    assert as_user(ALAN, lambda: try_to(os.unlink, str(lock))) == "refused"  # the sticky bit
    assert as_user(ALAN, lambda: try_to(lambda p: os.rename(p, p + ".gone"), str(lock))) == "refused"
    release()
    assert as_user(ALAN, claim_one) == [[CORE], None]  # ada's file, opened read-only by alan
    assert lock.stat().st_uid == ADA


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_another_users_lock_folder_without_its_sticky_bit_is_refused_not_used(shared):
    root_or_skip()
    shared.mkdir()
    (shared / "core-0.lock").touch()
    os.chown(shared, ADA, ADA)
    shared.chmod(0o777)
    cores, note = as_user(ALAN, claim_one)
    assert cores == [] and note == (
        f"not pinned to cores: the folder of core locks {shared} has mode 0777 (owner uid {ADA}), not 1777: "
        f"without the sticky bit and write for all, one user's run could delete another's core locks "
        f"(or could make none of its own). Ask its owner (or root) to `chmod 1777 {shared}`, "
        f"or set {FOLDER_ENV} to a folder of your own"
    )
    assert mode(shared) == 0o777 and not (shared / f"core-{CORE}.lock").exists()
    claim = claim_cores(1, allowed=[CORE])  # root sets it right, and makes it its own
    assert claim.cores == (CORE,) and f"had mode 0777, owner uid {ADA}; set to mode 1777 and owner root" in claim.note
    assert mode(shared) == 0o1777 and shared.stat().st_uid == 0
