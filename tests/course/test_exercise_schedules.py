"""The schedule exercises (02 GPipe, 03 1F1B, 04 the deadlock, 07 interleaved 1F1B, 09 bubble
arithmetic, 10 ZB-H1): typical wrong answers are refused with the message that names the mistake
(judged directly: the checkers' logic, no process), and the engine's own answer, in several
disguises, with the message that names the engine (in a watched sandbox, as when graded: these
start processes). All are refused before any worker process starts."""

import importlib
import re

import pytest

from minipipe import Schedule, make_schedule
from minipipe.course.exercises import (
    WrongAnswer,
    check_bubble_arithmetic,
    check_deadlock_fixed,
    check_gpipe,
    check_interleaved,
    check_one_f_one_b,
    check_zero_bubble,
)
from minipipe.course.exercises import one_f_one_b as exercise_03
from minipipe.course.exercises.deadlock import BROKEN, moves
from minipipe.schedule import generators
from minipipe.schedule.ops import B, F, I, W
from tests.support.judged import direct, sandboxed


def wrong(check, *answer) -> str:
    """The verdict on a wrong answer, its lines unwrapped (the checker's logic alone)."""
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


def refused(check, *answer) -> str:
    """The verdict on an answer that asks the engine, in a watched sandbox."""
    with pytest.raises(WrongAnswer) as info:
        sandboxed(check, *answer)
    return " ".join(str(info.value).split())


def lists(schedule) -> list:
    return [list(row) for row in schedule.actions]


# -- 02 GPipe -------------------------------------------------------------------------------------
def test_02_naive_order_is_named():
    def gpipe(p, m):
        return [[a for mb in range(m) for a in (F(r, mb), B(r, mb))] for r in range(p)]

    assert "That is naive model parallelism" in wrong(check_gpipe, gpipe)


def test_02_missing_micro_batch_shows_the_validator():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m - 1)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)]

    text = wrong(check_gpipe, gpipe)
    assert "validator rejects it" in text and "is missing" in text and "rank 0" in text


def test_02_backwards_on_the_wrong_rank():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m)] + [B(p - 1 - r, mb) for mb in reversed(range(m))] for r in range(p)]

    assert "lives on rank" in wrong(check_gpipe, gpipe)


def test_02_a_schedule_object_is_not_the_lists():
    def gpipe(p, m):
        return Schedule.custom(
            [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)], m=m
        )

    assert "returned a Schedule object; return the action lists themselves" in wrong(check_gpipe, gpipe)


@pytest.mark.parametrize(
    ("answer", "said", "hinted"),
    [
        (lambda p, m: tuple([F(r, 0)] for r in range(p)), "<lambda>(3, 4) returned tuple ([", True),
        (lambda p, m: {r: [F(r, 0)] for r in range(p)}, "<lambda>(3, 4) returned dict {0: [", False),
        (lambda p, m: None, "<lambda>(3, 4) returned NoneType None; return a list with one list of actions", False),
    ],
    ids=["a tuple", "a dict", "None"],
)
def test_02_an_answer_not_a_list_is_named_and_only_a_tuple_is_told_how_a_schedule_keeps_them(answer, said, hinted):
    text = wrong(check_gpipe, answer)
    assert said in text
    assert ("tuples of actions are how a Schedule keeps them" in text) == hinted


GPIPE_DISGUISES = {
    "make_schedule in a lambda": (lambda p, m: lists(make_schedule("gpipe", p, m)), "make_schedule"),
    "the generator, by another path": (
        lambda p, m: lists(importlib.import_module("minipipe.schedule.generators").gpipe(p, m)),
        "the engine's own GPipe",
    ),
    "the registry's generator": (
        lambda p, m: lists(importlib.import_module("minipipe.schedule.kinds").KINDS["gpipe"].generate(p, m)),
        "the engine's own GPipe",
    ),
    # the engine's order copied by hand: refused by a property the engine's answer lacks
    "the engine's order, re-typed": (
        lambda p, m: [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)],
        "the order of the engine's own GPipe",
    ),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", GPIPE_DISGUISES)
def test_02_the_engines_gpipe_is_refused(disguise):
    fn, message = GPIPE_DISGUISES[disguise]
    assert message in refused(check_gpipe, fn)


# -- 03 1F1B --------------------------------------------------------------------------------------
def _one_f_one_b(extra_warmup=0, clamp=True):
    def one_f_one_b(p, m):
        out = []
        for r in range(p):
            warmup = max(0, p - r - 1 + extra_warmup)
            warmup = min(warmup, m) if clamp else warmup
            acts = [F(r, mb) for mb in range(warmup)]
            for i in range(m - warmup):
                acts += [F(r, warmup + i), B(r, i)]
            acts += [B(r, mb) for mb in range(max(0, m - warmup), m)]
            out.append(acts)
        return out

    return one_f_one_b


def test_03_warm_up_one_too_long():
    text = wrong(check_one_f_one_b, _one_f_one_b(+1))
    assert "off-by-one warm-up" in text and "min(p − r, m)" in text


def test_03_warm_up_one_too_short():
    assert "its warm-up is too short" in wrong(check_one_f_one_b, _one_f_one_b(-1))


def test_03_forgetting_m_smaller_than_p():
    text = wrong(check_one_f_one_b, _one_f_one_b(clamp=False))
    assert "outside the schedule" in text and "m=1" in text


def test_03_a_table_of_the_shown_cases_is_named_on_a_case_drawn_afresh():
    right = _one_f_one_b()
    table = {case: right(*case) for case in exercise_03.FIXED}
    text = wrong(check_one_f_one_b, lambda p, m: table[p, m])
    assert "raised KeyError" in text and "draws its cases afresh" in text and "table" in text


def test_03_a_steady_state_that_does_not_take_turns_is_shown():
    """The step behind the makespan and the peaks (which refuse every other order of rank 0 at p=2, m=3):
    rank 0's F F B B F B is named from its last warm-up forward on: F B B F."""
    from minipipe import Schedule
    from minipipe.course.exercises.one_f_one_b import _steady
    from minipipe.course.exercises.verdict import Mistake

    order = Schedule.custom(
        [[F(0, 0), F(0, 1), B(0, 0), B(0, 1), F(0, 2), B(0, 2)], lists(make_schedule("1f1b", 2, 3))[1]]
    )
    with pytest.raises(Mistake) as said:
        _steady(lambda p, m: order, [(2, 3)])
    assert str(said.value) == (
        "at p=2, m=3 rank 0's actions after its warm-up go FBBF: in 1F1B's steady state one forward and one "
        "backward take turns (FBFB...) until the forwards run out"
    )


def test_03_gpipe_is_not_1f1b():
    def gpipe(p, m):
        return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in range(m)] for r in range(p)]

    assert "that is GPipe's order" in wrong(check_one_f_one_b, gpipe)


_TABLE = {case: lists(make_schedule("1f1b", *case)) for case in exercise_03.FIXED}  # pasted before the check
ONE_F_ONE_B_DISGUISES = {
    "make_schedule in a lambda": (lambda p, m: lists(make_schedule("1f1b", p, m)), "make_schedule"),
    "the generator, imported under another name": (
        lambda p, m: lists(generators.one_f_one_b(p, m)),
        "the engine's own 1F1B",
    ),
    "an alias of the registry": (lambda p, m: lists(make_schedule("pipedream-flush", p, m)), "make_schedule"),
    "a table of the engine's answers": (lambda p, m: _TABLE[(p, m)], "looks answers up in a table"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", ONE_F_ONE_B_DISGUISES)
def test_03_the_engines_1f1b_is_refused(disguise):
    fn, message = ONE_F_ONE_B_DISGUISES[disguise]
    assert message in refused(check_one_f_one_b, fn)


# -- 04 the deadlock ------------------------------------------------------------------------------
def test_04_unchanged_schedule_shows_the_marked_grid():
    text = wrong(check_deadlock_fixed, lambda: BROKEN)
    assert "no process was started" in text and "deadlock: rank 0 waits for 1B0" in text and ">0B0<" in text


def test_04_removing_actions_is_not_a_fix():
    assert "rank 0: you removed 0B0" in wrong(check_deadlock_fixed, lambda: BROKEN.replace(" 0B0", ""))


def test_04_the_other_single_move_runs_but_idles():
    text = wrong(check_deadlock_fixed, lambda: BROKEN.replace("1F2 1F3 1B0", "1F2 1B0 1F3"))
    assert "it runs, but takes 19 time units" in text and "Another single move" in text


@pytest.mark.parametrize(
    ("fixed", "said"),
    [
        (
            "\n".join(BROKEN.splitlines()[:-1]),
            "your schedule has 2 ranks; the broken one has 3: keep one line per rank",
        ),
        (BROKEN.splitlines()[:-1], "fixed() returned 2 lists for p=3 ranks; return one list"),
        ("rank 0: 0F0 0Q0", "fixed() returned text that is not a schedule:"),
    ],
    ids=["two lines of three", "two lists of three", "not a schedule"],
)
def test_04_a_schedule_of_another_shape_is_named(fixed, said):
    assert said in wrong(check_deadlock_fixed, lambda: fixed)


def test_04_moves_count_the_actions_taken_out_and_put_back():
    assert moves("abcd", "abcd") == 0 and moves("abcd", "bacd") == 1 and moves("abcd", "dabc") == 1
    assert moves("abcd", "badc") == 2


DEADLOCK_DISGUISES = {
    "the engine's 1F1B, pasted": (lambda text=make_schedule("1f1b", 3, 4).to_text(): text, "you moved 2 actions"),
    "the engine's GPipe, pasted": (lambda text=make_schedule("gpipe", 3, 4).to_text(): text, "pasted from the engine"),
    "make_schedule's text": (lambda: make_schedule("1f1b", 3, 4).to_text(), "calls make_schedule"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", DEADLOCK_DISGUISES)
def test_04_the_engines_schedules_are_refused(disguise):
    fn, message = DEADLOCK_DISGUISES[disguise]
    assert message in refused(check_deadlock_fixed, fn)


# -- 07 interleaved 1F1B --------------------------------------------------------------------------
def _round_robin(p, v):
    return [s % p for s in range(p * v)]


def test_07_chunks_on_consecutive_stages_are_not_interleaving():
    text = wrong(check_interleaved, lambda p, v: [s // v for s in range(p * v)], lambda p, m, v: [[] for _ in range(p)])
    assert "goes round the ring of ranks v times" in text and "v consecutive stages" in text


def test_07_one_f_one_b_over_chunks_without_the_groups_is_slow_or_stuck():
    def interleaved(p, m, v):  # every micro-batch through all chunks in turn, 1F1B's warm-up
        out = []
        for r in range(p):
            fwd = [F(c * p + r, mb) for mb in range(m) for c in range(v)]
            bwd = [B(c * p + r, mb) for mb in range(m) for c in reversed(range(v))]
            out.append(fwd + bwd)
        return out

    text = wrong(check_interleaved, _round_robin, interleaved)
    assert "at p=4, m=8, v=2" in text


INTERLEAVED_DISGUISES = {
    "make_schedule in a lambda": (lambda p, m, v: lists(make_schedule("interleaved", p, m, v)), "make_schedule"),
    "the generator by its module": (
        lambda p, m, v: lists(importlib.import_module("minipipe.schedule.generators").interleaved_1f1b(p, m, v)),
        "the engine's own interleaved",
    ),
    "the placement from a schedule": (None, "make_schedule"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", INTERLEAVED_DISGUISES)
def test_07_the_engines_interleaving_is_refused(disguise):
    fn, message = INTERLEAVED_DISGUISES[disguise]
    if fn is None:
        placement = lambda p, v: list(make_schedule("interleaved", p, p, v).placement)  # noqa: E731
        text = refused(check_interleaved, placement, lambda p, m, v: [[] for _ in range(p)])
        assert message in text and "; place the chunks yourself ·" in text  # the advice of placement's check
    else:
        assert message in refused(check_interleaved, _round_robin, fn)


# -- 09 bubble arithmetic -------------------------------------------------------------------------
def _makespan(kind, p, m, v, f, b):
    return (m + (p - 1) / v) * (f + b)


def _bubble(kind, p, m, v, f, b):
    return 1 - m * (f + b) / _makespan(kind, p, m, v, f, b)


def _messages(kind, p, m, v):
    return 0 if p == 1 else 2 * m * (p * v - 1)


def test_09_interleaving_without_the_1_over_v():
    text = wrong(check_bubble_arithmetic, lambda kind, p, m, v, f, b: (m + p - 1) * (f + b), _bubble, _messages)
    assert "makespan of interleaved" in text and "each chunk costs f/v" in text


def test_09_bubble_over_ideal_instead_of_over_total():
    text = wrong(check_bubble_arithmetic, _makespan, lambda kind, p, m, v, f, b: (p - 1) / (m * v), _messages)
    assert "idle time over the ideal" in text


def test_09_messages_forgetting_the_chunks():
    text = wrong(check_bubble_arithmetic, _makespan, _bubble, lambda kind, p, m, v: 2 * m * (p - 1))
    assert "p·v − 1" in text


def test_09_a_makespan_that_is_no_number_is_refused_with_the_call_that_returned_it():
    text = wrong(check_bubble_arithmetic, lambda kind, p, m, v, f, b: "soon", _bubble, _messages)
    assert re.search(r"makespan\('gpipe', \d+, \d+, 1, [\d.]+, [\d.]+\) returned str 'soon'; return a number", text)


def test_09_messages_counting_only_the_forward_ones_are_told_the_gradients_come_back():
    text = wrong(check_bubble_arithmetic, _makespan, _bubble, lambda kind, p, m, v: 0 if p == 1 else m * (p * v - 1))
    assert re.search(
        r"you say \d+ messages per training step, the schedule sends \d+\. That counts the activations", text
    )


def _theory(name):
    return lambda *args: getattr(importlib.import_module("minipipe.schedule.theory"), name)(*args)


BUBBLE_DISGUISES = {
    "theory's makespan": ((_theory("makespan"), _bubble, _messages), "the engine's own formulas"),
    "the registry's formula": (
        (
            lambda kind, p, m, v, f, b: (
                importlib.import_module("minipipe.schedule.kinds").KINDS[kind].makespan(p, m, v, f, b, None)
            ),
            _bubble,
            _messages,
        ),
        "the engine's own formulas",
    ),
    "the simulator": (
        (
            lambda kind, p, m, v, f, b: (
                importlib.import_module("minipipe").simulate(make_schedule(kind, p, m, v)).makespan * (f + b) / 3
            ),
            _bubble,
            _messages,
        ),
        "make_schedule",
    ),
    "the engine's count of messages": (
        (_makespan, _bubble, lambda kind, p, m, v, s=Schedule.custom([[F(0, 0), B(0, 0)]]): len(s.messages)),
        "the engine's own count",
    ),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", BUBBLE_DISGUISES)
def test_09_asking_the_engine_is_refused(disguise):
    fns, message = BUBBLE_DISGUISES[disguise]
    assert message in refused(check_bubble_arithmetic, *fns)


# -- 10 ZB-H1 -------------------------------------------------------------------------------------
def _split_1f1b(p, m):
    out = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        for i in range(m - warmup):
            acts += [F(r, warmup + i), I(r, i), W(r, i)]
        acts += [a for mb in range(m - warmup, m) for a in (I(r, mb), W(r, mb))]
        out.append(acts)
    return out


def test_02_what_is_neither_an_action_nor_its_text_is_named_by_its_type():
    text = wrong(check_gpipe, lambda p, m: [[F(r, 0), 5] for r in range(p)])
    assert "rank 0 holds int 5; write actions as F(stage, mb), B(stage, mb), ..." in text, text


def test_10_whole_backwards_are_not_split():
    text = wrong(check_zero_bubble, _one_f_one_b())
    assert (
        "✗ every backward split into I and W: at p=" in text and "a whole backward; ZB-H1 splits every backward" in text
    )


def test_10_each_w_right_after_its_i_leaves_the_cool_down_idle():
    assert "Each W runs right after its I" in wrong(check_zero_bubble, _split_1f1b)


def test_10_every_w_at_the_end_holds_too_much():
    def zb(p, m):
        rows = _split_1f1b(p, m)
        return [[a for a in row if a.op != "W"] + [a for a in row if a.op == "W"] for row in rows]

    assert "keeps every W for the end" in wrong(check_zero_bubble, zb)


def _zb_from_its_file(p, m):
    """The engine's generators loaded afresh from their file, under another name."""
    import importlib.util

    from minipipe.schedule import generators as engine

    spec = importlib.util.spec_from_file_location("minipipe.schedule.generators_copy", engine.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return [list(row) for row in copy.zb_h1(p, m).actions]


ZB_DISGUISES = {
    "make_schedule in a lambda": (lambda p, m: lists(make_schedule("zb-h1", p, m)), "make_schedule"),
    "the generators loaded from their file": (_zb_from_its_file, "the engine's own ZB-H1"),
}


@pytest.mark.distributed
@pytest.mark.parametrize("disguise", ZB_DISGUISES)
def test_10_the_engines_zb_h1_is_refused(disguise):
    fn, message = ZB_DISGUISES[disguise]
    assert message in refused(check_zero_bubble, fn)
