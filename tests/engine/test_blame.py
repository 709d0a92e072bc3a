"""The watchdog's choice of whom to blame, decided from the facts alone (diagnosis.blame), in
every order the facts can arrive in: no processes, no timing."""

from itertools import permutations, product

import pytest

from minipipe.engine.diagnosis import REPORTED, STATES, Seen, blame
from minipipe.engine.workers import Job
from minipipe.parallel.mesh import Mesh
from minipipe.schedule.kinds import make_schedule

WORLD = 3
JOBS = [Job(None, schedule=make_schedule("1f1b", WORLD, 4), mesh=Mesh(WORLD))]


def status(states, world=WORLD):
    """The shared status array: every rank in step 2 at its action 1, in the given state."""
    return tuple(x for r in range(world) for x in (0, 2, 1, STATES.index(states.get(r, "wait"))))


def report(rank, error, reason=None, peer=None, plain=False):
    """As workers._report writes it: a RuntimeError without a reason may come from a peer's death."""
    return {
        "rank": rank,
        "step": 2,
        "action": str(JOBS[0].schedule.actions[rank][1]),
        "error": error,
        "message": error.split(": ", 1)[-1],
        "traceback": f"Traceback of {rank} ...",
        "peer": peer,
        "reason": reason,
        "group": None,
        "plain": plain,
        "peer_may_have_died": reason in ("lost", "failed") or (reason is None and error.startswith("RuntimeError")),
    }


def lost(rank, peer):
    return report(
        rank, f"CommError: rank {rank} lost rank {peer} while waiting: Connection closed by peer", "lost", peer
    )


def raised(rank, kind="ValueError"):
    return report(rank, f"{kind}: injected fault on rank {rank}")


def timed_out(rank, peer):
    return report(
        rank, f"CommError: rank {rank} timed out after 3 s waiting for data from rank {peer}", "timeout", peer
    )


def seen(exits, reports, states=None, finished=None, world=WORLD):
    return Seen(tuple(exits), tuple(finished or [False] * world), tuple(reports), status(states or {}, world))


def others(culprit):
    return [r for r in range(WORLD) if r != culprit]


@pytest.mark.parametrize("culprit", range(WORLD))
def test_a_rank_that_died_without_a_word_is_blamed_whatever_the_others_said(culprit):
    for order, visible, settled in product(
        permutations(others(culprit)), product([None, REPORTED], repeat=2), (False, True)
    ):
        exits = [None] * WORLD
        exits[culprit] = -9
        for r, code in zip(order, visible):
            exits[r] = code
        for heard in range(len(order) + 1):  # none, some or all of the others' reports arrived
            verdict = blame(seen(exits, [lost(r, culprit) for r in order[:heard]]), JOBS, settled)
            assert verdict is not None and verdict.rank == culprit, (order, visible, heard, settled)
            assert f"rank {culprit} died (killed by signal 9) in step 2" in str(verdict)


@pytest.mark.parametrize("culprit", range(WORLD))
def test_a_rank_that_raised_is_blamed_not_those_that_lost_it(culprit):
    reports = [raised(culprit)] + [lost(r, culprit) for r in others(culprit)]
    for order in permutations(reports):
        for exits in product([None, REPORTED], repeat=WORLD):
            verdict = blame(seen(exits, order), JOBS, settled=False)
            assert verdict is not None and verdict.rank == culprit, ([rep["rank"] for rep in order], exits)
            assert f"rank {culprit} failed in step 2 at action" in str(verdict)
            assert f"injected fault on rank {culprit}" in str(verdict) and "Traceback of" in str(verdict)


@pytest.mark.parametrize("culprit", range(WORLD))
def test_a_runtime_error_waits_for_the_others_then_is_blamed_before_those_that_lost_it(culprit):
    # torch.distributed raises a plain RuntimeError for a peer's death too: wait until every rank's
    # exit code and report is in (or the facts settle), then blame it, not the ranks that lost it
    reports = [raised(culprit, "RuntimeError")] + [lost(r, culprit) for r in others(culprit)]
    for order in permutations(reports):
        for exits in product([None, REPORTED], repeat=WORLD):
            heard = [rep for rep in order if exits[rep["rank"]] == REPORTED]
            if all(code == REPORTED for code in exits):
                verdict = blame(seen(exits, heard), JOBS, settled=False)
                assert verdict.rank == culprit and "injected fault" in str(verdict), [r["rank"] for r in order]
            else:
                assert blame(seen(exits, heard), JOBS, settled=False) is None, (exits, [r["rank"] for r in heard])
                if exits[culprit] == REPORTED:  # its report is in, or will never come: settled, it is named
                    assert blame(seen(exits, heard), JOBS, settled=True).rank == culprit


@pytest.mark.parametrize("culprit", range(WORLD))
def test_a_runtime_error_is_not_blamed_when_a_silent_death_explains_it(culprit):
    for witness in others(culprit):
        exits = [REPORTED] * WORLD
        exits[culprit] = -9
        verdict = blame(seen(exits, [raised(witness, "RuntimeError")]), JOBS, settled=False)
        assert verdict.rank == culprit and "killed by signal 9" in str(verdict)


@pytest.mark.parametrize("culprit", range(WORLD))
def test_the_verdict_waits_for_a_report_on_its_way(culprit):
    # the culprit raised and exited, the others lost it and exited; only their reports are in so far
    exits = [REPORTED] * WORLD
    for order in permutations(others(culprit)):
        for heard in range(len(order) + 1):
            assert blame(seen(exits, [lost(r, culprit) for r in order[:heard]]), JOBS, settled=False) is None
        verdict = blame(seen(exits, [lost(r, culprit) for r in order] + [raised(culprit)]), JOBS, settled=False)
        assert verdict.rank == culprit and "injected fault" in str(verdict)


@pytest.mark.parametrize("culprit", range(WORLD))
def test_ranks_that_lost_a_peer_are_not_blamed_before_its_death_is_seen(culprit):
    # the others reported losing the culprit and exited; its own exit code is not in yet
    for order in permutations(others(culprit)):
        exits = [REPORTED] * WORLD
        exits[culprit] = None
        reports = [lost(r, culprit) for r in order]
        assert blame(seen(exits, reports), JOBS, settled=False) is None
        exits[culprit] = -9
        verdict = blame(seen(exits, reports), JOBS, settled=False)
        assert verdict.rank == culprit and "killed by signal 9" in str(verdict)


def test_several_silent_deaths_name_the_lowest_and_list_the_rest():
    for first, second in permutations(range(WORLD), 2):
        exits = [None] * WORLD
        exits[first], exits[second] = -9, 3
        verdict = blame(seen(exits, []), JOBS, settled=False)
        low, high = sorted((first, second))
        assert verdict.rank == low
        assert f"rank {high} also died ({'killed by signal 9' if high == first else 'exited with code 3'})" in str(
            verdict
        )


def test_a_timeout_blames_the_peer_busy_in_its_own_work_else_the_rank_that_waited():
    for waiter, peer in permutations(range(WORLD), 2):
        reports = [timed_out(waiter, peer)]
        stuck = blame(
            seen([REPORTED if r == waiter else None for r in range(WORLD)], reports, {peer: "compute"}),
            JOBS,
            settled=False,
        )
        assert stuck.rank == peer and f"rank {peer} stopped responding in step 2" in str(stuck)
        waiting = blame(seen([None] * WORLD, reports, {peer: "wait"}), JOBS, settled=False)
        assert waiting.rank == waiter and "timed out after 3 s" in str(waiting)


def collective_failed(rank, group=tuple(range(WORLD))):
    """A collective whose bound is the process group's own gave up (errors.collective_failed: reason "failed")."""
    rep = report(
        rank, f"CommError: rank {rank}: all-reduce with ranks {list(group)} failed: Connection reset", "failed"
    )
    return rep | {"group": group}


def test_a_failed_collective_blames_a_member_stuck_in_its_own_work_else_the_rank_that_saw_it():
    for waiter, stuck in permutations(range(WORLD), 2):
        reports = [collective_failed(waiter)]
        verdict = blame(
            seen([REPORTED if r == waiter else None for r in range(WORLD)], reports, {stuck: "compute"}),
            JOBS,
            settled=True,
        )
        assert verdict.rank == stuck and f"rank {stuck} stopped responding in step 2" in str(verdict)
        outside = blame(
            seen([None] * WORLD, [collective_failed(waiter, (waiter, 3 - waiter - stuck))], {stuck: "compute"}),
            JOBS,
            settled=True,
        )  # the stuck rank is not in its group
        assert outside.rank == waiter and "all-reduce with ranks" in str(outside)
        nobody = blame(seen([None] * WORLD, reports, {stuck: "wait"}), JOBS, settled=True)
        assert nobody.rank == waiter and f"rank {waiter} failed in step 2" in str(nobody)


def test_a_failed_collective_waits_for_and_yields_to_the_error_that_caused_it():
    """ "failed" is what a rank says of a collective another rank broke: like "lost", never blamed
    before that rank's own error, and not at all while it may still come."""
    for culprit, waiter in permutations(range(WORLD), 2):
        exits = [REPORTED if r == waiter else None for r in range(WORLD)]
        assert blame(seen(exits, [collective_failed(waiter)]), JOBS, settled=False) is None
        for order in permutations([collective_failed(waiter), raised(culprit)]):
            assert blame(seen(exits, order), JOBS, settled=False).rank == culprit


def test_an_error_is_blamed_before_a_timeout_whatever_came_first():
    for culprit, waiter in permutations(range(WORLD), 2):
        third = 3 - culprit - waiter
        reports = [raised(culprit), timed_out(waiter, third)]
        for order in permutations(reports):
            verdict = blame(seen([REPORTED if r != third else None for r in range(WORLD)], order), JOBS, False)
            assert verdict.rank == culprit, [rep["rank"] for rep in order]


def test_once_settled_lost_reports_alone_name_the_rank_whose_report_never_came():
    for culprit in range(WORLD):
        for order in permutations(others(culprit)):
            reports = [lost(r, culprit) for r in order]
            exits = [REPORTED] * WORLD
            assert blame(seen(exits, reports), JOBS, settled=False) is None
            verdict = blame(seen(exits, reports), JOBS, settled=True)
            assert verdict.rank == culprit and f"rank {culprit} died (exited with code {REPORTED})" in str(verdict)
            # every rank reported losing another: the first report is all there is to go on
            everyone = reports + [lost(culprit, order[0])]
            assert blame(seen(exits, everyone), JOBS, settled=True).rank == order[0]


def test_a_rank_that_finished_is_never_blamed_and_quiet_is_no_failure():
    finished = [True, False, False]
    assert not seen([REPORTED, None, None], [], finished=finished).failing
    assert blame(seen([REPORTED, None, None], [], finished=finished), JOBS, settled=True) is None
    assert blame(seen([0, -9, None], [], finished=finished), JOBS, settled=False).rank == 1


def test_a_plain_report_leaves_out_the_traceback():
    verdict = blame(
        seen([REPORTED, None, None], [report(0, "NonFiniteLoss: the loss is nan", plain=True)]), JOBS, settled=False
    )
    assert "the loss is nan" in str(verdict) and "Traceback" not in str(verdict)


def test_on_a_mesh_the_blamed_rank_comes_with_its_coordinates():
    jobs = [Job(None, schedule=make_schedule("1f1b", 2, 4), mesh=Mesh(2, dp=2))]
    for culprit in range(4):
        exits = [REPORTED] * 4
        exits[culprit] = -9
        c = jobs[0].mesh.coords(culprit)
        verdict = blame(seen(exits, [], world=4, finished=[False] * 4), jobs, settled=False)
        assert verdict.rank == culprit
        assert f"rank {culprit} (pp={c.pp} dp={c.dp} tp={c.tp}) died" in str(verdict)
