"""The near misses of the schedule exercises (02 GPipe, 03 1F1B, 04 the deadlock, 07 interleaved
1F1B, 09 bubble arithmetic, 10 ZB-H1, 14 generation's rounds and a stream's times): for each bound
or condition of a checker, an answer that is wrong by the least that bound exists for, refused by
that very check with the message that names the mistake. Each docstring names the loosening of the
checker it was seen to go red on (planted, then restored). No process starts: all are refused
before a real run."""

import pytest

from minipipe.course.exercises import (
    WrongAnswer,
    check_bubble_arithmetic,
    check_deadlock_fixed,
    check_gpipe,
    check_interleaved,
    check_one_f_one_b,
    check_serving,
    check_zero_bubble,
)
from minipipe.course.exercises.deadlock import BROKEN
from minipipe.course.exercises.zero_bubble import kept_waiting
from minipipe.schedule.ops import B, F, I, W
from tests.support.judged import direct


def wrong(check, *answer) -> str:
    with pytest.raises(WrongAnswer) as info:
        direct(check, *answer)
    return " ".join(str(info.value).split())


# -- 02 GPipe ---------------------------------------------------------------------------------------
def _gpipe(p, m):
    return [[F(r, mb) for mb in range(m)] + [B(r, mb) for mb in reversed(range(m))] for r in range(p)]


def test_02_backwards_newest_first_but_the_last_two_swapped():
    """Planted: _newest_first compares only each rank's first backward with B(m − 1)."""

    def gpipe(p, m):
        rows = _gpipe(p, m)
        for row in rows:
            if m >= 2:
                row[-2], row[-1] = row[-1], row[-2]
        return rows

    text = wrong(check_gpipe, gpipe)
    assert "✗ 3/5 checks passed" in text and "in the order B3, B2, B0, B1" in text


def test_02_one_micro_batch_at_a_time_on_one_rank_holds_too_little():
    """p = 1 with each micro-batch's forward and backward in turn, newest first: the makespan of
    GPipe (one rank has no bubble) and backwards newest first, but one micro-batch held, not m.
    Planted: _peak's `held != m` made `held > m`."""

    def gpipe(p, m):
        if p == 1:
            return [[a for mb in reversed(range(m)) for a in (F(0, mb), B(0, mb))]]
        return _gpipe(p, m)

    text = wrong(check_gpipe, gpipe)
    assert "✗ 2/5 checks passed" in text and "at p=1, m=4 rank 0 holds at most 1 micro-batch" in text


# -- 07 interleaved 1F1B ------------------------------------------------------------------------------
def _interleaved(extra=0):
    """The reference order (exercises/source/07), its warm-up `extra` forwards longer."""

    def interleaved(p, m, v):
        total = m * v

        def stage(k, r, forward):
            chunk = (k // p) % v
            return (chunk if forward else v - 1 - chunk) * p + r

        def micro_batch(k):
            return (k // (p * v)) * p + k % p

        out = []
        for r in range(p):
            warmup = min(2 * (p - r - 1) + (v - 1) * p + extra, total)
            acts = [F(stage(k, r, True), micro_batch(k)) for k in range(warmup)]
            for i in range(total - warmup):
                acts += [F(stage(warmup + i, r, True), micro_batch(warmup + i)), B(stage(i, r, False), micro_batch(i))]
            acts += [B(stage(k, r, False), micro_batch(k)) for k in range(total - warmup, total)]
            out.append(acts)
        return out

    return interleaved


def _ring(p, v):
    return [s % p for s in range(p * v)]


def test_07_a_warm_up_one_forward_too_long_holds_one_chunk_too_many():
    """Planted: _peaks' `peaks[r] > allowed` made `> allowed + 1` (or peak_allowed's `+ 1` made `+ 2`)."""
    text = wrong(check_interleaved, _ring, _interleaved(+1))
    assert "✗ 3/5 checks passed" in text and "at p=4, m=8, v=2 rank 0 holds up to 12 chunks" in text
    assert "where 11 are enough" in text


@pytest.mark.parametrize(
    ("p", "m", "v"), [(2, 2, 2), (2, 4, 2), (3, 6, 2), (4, 8, 2), (4, 4, 3), (3, 3, 3), (4, 12, 2)]
)
def test_07_the_chunks_a_rank_may_hold_are_what_megatrons_order_holds_on_every_rank(p, m, v):
    """The bound the checker holds a learner's peaks to, against the simulator's peaks of the engine's
    own interleaved 1F1B, rank by rank (at m·v where the warm-up would need more than all the chunks)."""
    from minipipe import make_schedule, simulate
    from minipipe.course.exercises.interleaved import peak_allowed

    held = simulate(make_schedule("interleaved", p, m, v)).peak_inflight()
    assert [peak_allowed(p, m, v, r) for r in range(p)] == held


def test_07_two_forwards_out_of_order_on_rank_0_cost_half_a_slot():
    """Rank 0 runs micro-batch 1's first chunk before micro-batch 0's: rank 1 waits, the step is
    half a time unit longer. Planted: makespan_is's tolerance 1e-9 made one time unit (> 1.0)."""

    def interleaved(p, m, v):
        rows = _interleaved()(p, m, v)
        if p > 1:
            rows[0][0], rows[0][1] = rows[0][1], rows[0][0]
        return rows

    text = wrong(check_interleaved, _ring, interleaved)
    assert "✗ 2/5 checks passed" in text and "yours takes 29, where (m + (p − 1)/v)(f + b) = 28.5" in text
    assert "Rank 0 runs F(0, 1) before 0F0" in text


def test_07_the_v_shape_of_zb_v_is_not_round_the_ring():
    text = wrong(
        check_interleaved,
        lambda p, v: list(range(p)) + list(reversed(range(p))) if v == 2 else _ring(p, v),
        _interleaved(),
    )
    assert "That is the V shape of ZB-V" in text


# -- 09 bubble arithmetic ---------------------------------------------------------------------------
def _makespan(kind, p, m, v, f, b):
    return (m + (p - 1) / v) * (f + b)


def _bubble(kind, p, m, v, f, b):
    return 1 - m * (f + b) / _makespan(kind, p, m, v, f, b)


def _messages(kind, p, m, v):
    return 0 if p == 1 else 2 * m * (p * v - 1)


def test_09_the_fill_rounded_down_with_integer_division():
    text = wrong(check_bubble_arithmetic, lambda kind, p, m, v, f, b: (m + (p - 1) // v) * (f + b), _bubble, _messages)
    assert "✗ 2/5 checks passed" in text and "That rounds (p − 1)/v down" in text


def test_09_one_slot_too_many_in_the_fill_and_drain():
    """Planted: _check_makespan's close() with rel 1e-6 made rel 0.5."""
    text = wrong(check_bubble_arithmetic, lambda kind, p, m, v, f, b: (m + p) * (f + b), _bubble, _messages)
    assert "✗ 0/5 checks passed" in text and "Count the fill and drain again" in text


@pytest.mark.parametrize(
    ("makespan", "hint"),
    [
        (lambda kind, p, m, v, f, b: m * (f + b), "That is each rank's work alone, with no bubble"),
        (lambda kind, p, m, v, f, b: (m + p - 1) * (f + b), "That is 1F1B's step on the same model"),
    ],
)
def test_09_a_step_with_no_fill_and_drain_or_1f1bs_step_for_interleaving(makespan, hint):
    text = wrong(check_bubble_arithmetic, makespan, _bubble, _messages)
    assert "✗" in text and hint in text


def test_09_messages_forgetting_that_one_rank_sends_nothing():
    """Right for every p > 1; at p = 1 with v chunks it counts 2m(v − 1) messages that never leave
    the rank. Planted: _check_messages over todo[kind][-15:-1], without the last case (p = 1)."""
    text = wrong(check_bubble_arithmetic, _makespan, _bubble, lambda kind, p, m, v: 2 * m * (p * v - 1))
    assert "✗ 4/5 checks passed" in text and "With p=1 every stage lives on the one rank" in text


def test_09_a_bubble_in_percent():
    text = wrong(check_bubble_arithmetic, _makespan, lambda *args: 100 * _bubble(*args), _messages)
    assert "✗ 3/5 checks passed" in text and "That is a percentage" in text


# -- 10 ZB-H1 -------------------------------------------------------------------------------------------
def _zb_h1(keep=lambda r, p: r):
    """The reference (exercises/source/10), rank r keeping keep(r, p) W's waiting instead of r."""

    def zb_h1(p, m):
        out = []
        for r in range(p):
            warmup = min(p - r - 1, m)
            acts, waiting = [F(r, mb) for mb in range(warmup)], []

            def backward(mb):
                acts.append(I(r, mb))
                waiting.append(W(r, mb))
                if len(waiting) > keep(r, p):
                    acts.append(waiting.pop(0))

            for i in range(m - warmup):
                acts.append(F(r, warmup + i))
                backward(i)
            for mb in range(m - warmup, m):
                backward(mb)
            out.append(acts + waiting)
        return out

    return zb_h1


def test_10_kept_waiting_counts_the_is_between_a_micro_batchs_i_and_its_w():
    assert [kept_waiting(row) for row in _zb_h1()(4, 8)] == [0, 1, 2, 3]
    assert [kept_waiting(row) for row in _zb_h1(lambda r, p: r + 1)(4, 8)] == [1, 2, 3, 4]
    assert kept_waiting([F(0, 0), F(0, 1), I(0, 0), I(0, 1), W(0, 1), W(0, 0)]) == 1


def test_10_extra_weight_gradients_wait_one_step_too_long():
    """Rank r keeps r + 1 W's waiting. Planted: makespan_is's tolerance 1e-9 made one time unit
    (the answer then fails at the peak check instead, with another message)."""
    text = wrong(check_zero_bubble, _zb_h1(lambda r, p: r + 1))
    assert "✗ 2/5 checks passed" in text and "yours takes 16, where m(f + b) + (p − 1)(f + b − 2w) = 15" in text
    assert "Rank 0 keeps up to 1 W waiting" in text and "ZB-H1's rank r keeps r, here 0" in text


def test_10_the_last_rank_keeping_one_w_too_few():
    """Only rank p − 1 keeps one fewer W waiting: one idle slot left at the end. Planted: as above."""
    text = wrong(check_zero_bubble, _zb_h1(lambda r, p: r - (r == p - 1)))
    assert "✗ 2/5 checks passed" in text and "Rank 3 keeps up to 2 W's waiting" in text and "here 3" in text
    assert "idle slots of its cool-down stay empty" in text


def test_10_a_w_put_off_past_the_next_forward_holds_one_micro_batch_too_many():
    """Rank 0 runs its first W after its next forward, not before: the step as short as ZB-H1's,
    p + 1 micro-batches held. Planted: _peaks' `peaks[r] > p` made `> p + 1`."""

    def zb_h1(p, m):
        rows = _zb_h1()(p, m)
        if m > p:
            rows[0].remove(W(0, 0))
            rows[0].insert(rows[0].index(F(0, p)) + 1, W(0, 0))
        return rows

    text = wrong(check_zero_bubble, zb_h1)
    assert "✗ 3/5 checks passed" in text and "at p=4, m=8 rank 0 holds up to 5 micro-batches" in text
    assert "It runs 0F4 while W(0, 0) is still owed" in text


# -- 14 generation's rounds, a stream's times, the peak throughput ------------------------------------
def _rounds(p, per_round, rounds):
    return [[F(r, t * per_round + j) for t in range(rounds) for j in range(per_round)] for r in range(p)]


def _pipelined(arrival_ms, k, stage_ms, latency, first_message=False):
    n = len(arrival_ms)
    ready = [arrival_ms[min((j + 1) * k, n) - 1] for j in range(-(-n // k))]
    free, done = [0.0] * len(stage_ms), []
    for t in ready:
        for s, cost in enumerate(stage_ms):
            t = max(t + (latency if s or first_message else 0.0), free[s]) + cost
            free[s] = t
        done.append(t)
    return [done[i // k] for i in range(n)]


def _slowest(k, stage_ms):
    return 1000 * k / max(stage_ms)


def test_14_the_first_two_micro_batches_swapped_on_rank_0():
    """Valid, but stage 0 starts with micro-batch 1: the last stage waits one time unit for
    micro-batch 0. Planted: _check_in_flight's `mine > best + 1e-9` made `> best + 1`."""

    def swapped(p, per_round, rounds):
        rows = _rounds(p, per_round, rounds)
        if per_round > 1:
            rows[0][0], rows[0][1] = rows[0][1], rows[0][0]
        return rows

    text = wrong(check_serving, swapped, _pipelined, _slowest)
    assert "✗ 1/4 checks passed" in text and "at p=2, per_round=2, rounds=3" in text and "takes 8 units" in text
    assert "Rank 0 runs F(0, 1) before 0F0" in text


def test_14_a_message_before_the_first_stage_too():
    """Planted: the variant named in _stream_hint removed (the numbers alone would be shown)."""
    text = wrong(check_serving, _rounds, lambda *a: _pipelined(*a, first_message=True), _slowest)
    assert "✗ 2/4 checks passed" in text and "stages [1.0, 2.0] ms" in text  # 2 stages: 1 boundary
    assert "That counts one message too many: a micro-batch crosses p − 1 = 1 boundaries between ranks, none" in text


@pytest.mark.parametrize("left_out", ["first", "last"])
def test_14_the_slowest_stage_found_among_all_but_one(left_out):
    """`max(stage_ms[1:])` or `max(stage_ms[:-1])`: right wherever the slowest stage is elsewhere.
    Planted: THROUGHPUT_FIXED without its cases whose slowest stage is first or last (the drawn
    ones catch it only by chance)."""
    part = slice(1, None) if left_out == "first" else slice(None, -1)
    text = wrong(check_serving, _rounds, _pipelined, lambda k, stage_ms: 1000 * k / max(stage_ms[part] or stage_ms))
    assert "✗ 3/4 checks passed" in text and "That leaves a stage out of the slowest" in text


# -- 03 1F1B ------------------------------------------------------------------------------------------
def _1f1b(p, m):
    rows = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [F(r, mb) for mb in range(warmup)]
        for i in range(m - warmup):
            acts += [F(r, warmup + i), B(r, i)]
        rows.append(acts + [B(r, mb) for mb in range(m - warmup, m)])
    return rows


def test_03_one_backward_a_turn_early_in_the_steady_state():
    """Rank 0 runs its second backward before the forward between them (F B B F where F B F B is
    meant): warm-up and peaks as 1F1B's, three time units slower, and the verdict says which rank's
    steady state breaks. Planted: makespan_is' tolerance made 3 time units (the steady-state check
    then refuses it, without the step time); _explain_slow without its steady-state diagnosis."""

    def one_f_one_b(p, m):
        rows = _1f1b(p, m)
        w = min(p, m)
        if p >= 2 and m > w:
            rows[0][w + 1], rows[0][w + 2] = rows[0][w + 2], rows[0][w + 1]
        return rows

    text = wrong(check_one_f_one_b, one_f_one_b)
    assert "✗ 1/5 checks passed" in text and "yours takes 27, where (m + p − 1)(f + b) = 24" in text
    assert "Rank 0's warm-up is right, but after it its actions go FBBFFB" in text
    assert "two backwards in a row" in text


# -- 04 the deadlock -------------------------------------------------------------------------------------
def test_04_a_fix_of_two_moves_that_runs_as_fast_is_not_one_move():
    """Both single moves that end the deadlock at once (0F3 before 0B0, and 1B0 before 1F3): it runs,
    in fill and drain's 18 time units, but two actions moved. Planted: _one_move's
    `sum(per_rank) != 1` made `> 2`."""
    fixed = BROKEN.replace("0F2 0B0 0F3", "0F2 0F3 0B0").replace("1F2 1F3 1B0", "1F2 1B0 1F3")
    text = wrong(check_deadlock_fixed, lambda: fixed)
    assert "✗ 2/5 checks passed" in text and "you moved 2 actions (rank 0 1, rank 1 1); one move is enough" in text


def test_04_the_one_move_that_idles_takes_one_unit_more():
    """The other single move that ends the deadlock (1B0 before 1F3) runs in 19 time units, one more
    than fill and drain's 18. Planted: _fast's `bound + 1e-9` made `bound + 1`."""
    text = wrong(check_deadlock_fixed, lambda: BROKEN.replace("1F2 1F3 1B0", "1F2 1B0 1F3"))
    assert "✗ 3/5 checks passed" in text and "it runs, but takes 19 time units" in text and "= 18" in text
