"""ZB-V, DualPipe-V and breadth-first, checked against the field: torch's own generators give the same
orders, torch's validator, lowering and comm simulation accept their text form, and the simulator
gives the registry's formulas exactly where they hold (and the formulas say where they do not)."""

import copy
import itertools
from types import SimpleNamespace

import pytest

from minipipe import Schedule, make_schedule, theory
from minipipe.schedule.validate import ScheduleError, validate
from minipipe.sim.costs import Costs
from minipipe.sim.pipeline import simulate

NEW = ("zb-v", "dualpipe-v", "bfs")

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")


def torch_order(cls, p: int, m: int, v: int = 2) -> list[list[str]]:
    """The order torch's schedule class computes for every rank, built without processes: its
    constructor only reads these fields of its stages."""
    stages = [
        SimpleNamespace(
            num_stages=p * v,
            group_size=p,
            group_rank=0,
            stage_index=s,
            is_first=s == 0,
            is_last=s == p * v - 1,
            submod=torch.nn.Linear(1, 1),
        )
        for s in range(v)
    ]
    order = cls(stages, m, loss_fn=lambda out, target: out).pipeline_order
    return [[str(a) for a in order[r] if a is not None] for r in range(p)]


def ours(schedule: Schedule) -> list[list[str]]:
    return [schedule.tokens(r) for r in range(schedule.p)]


# -- the same orders as torch's ------------------------------------------------------------------
@pytest.mark.parametrize("p", range(1, 9))
def test_zb_v_is_torchs_zbv_zero_bubble_action_for_action(p):
    for m in range(1, 4 * p + 2):
        assert ours(make_schedule("zb-v", p, m)) == torch_order(S.ScheduleZBVZeroBubble, p, m), (p, m)


@pytest.mark.parametrize("p", range(1, 7))
def test_dualpipe_v_is_torchs_dualpipev_pairs_included(p):
    for m in range(2 * p, 2 * p + 12):
        schedule = make_schedule("dualpipe-v", p, m)
        assert ours(schedule) == torch_order(S.ScheduleDualPipeV, p, m), (p, m)
        assert schedule.paired and any("OVERLAP_F_B" in t for t in schedule.tokens(0))


@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_bfs_is_torchs_looped_bfs(v):
    for p, m in itertools.product(range(1, 7), range(1, 13)):
        assert ours(make_schedule("bfs", p, m, v)) == torch_order(S.ScheduleLoopedBFS, p, m, v), (p, m, v)


# -- torch's validator, lowering and comm simulation on the text form ----------------------------
def torch_accepts(schedule: Schedule) -> int:
    """Parse every token of the text form with torch's _Action.from_str, validate with its
    _validate_schedule (which also reads the placement off the lists), lower to sends and
    receives with _add_send_recv and dry-run that with _simulate_comms_compute (which knows no
    pairs: they go in as their two ops, in order). Returns the simulated steps."""
    text = Schedule.from_text(schedule.to_text())
    assert text == schedule
    actions = {r: [S._Action.from_str(t) for t in text.tokens(r)] for r in range(text.p)}
    assert [[str(a) for a in actions[r]] for r in range(text.p)] == ours(schedule)  # prints back unchanged
    placement = S._validate_schedule(actions, text.p, text.n_stages, text.m)
    assert placement == dict(enumerate(schedule.placement))
    lowered = S._add_send_recv(copy.deepcopy(actions), lambda s: schedule.placement[s], text.n_stages)
    flat = {r: [x for a in acts for x in (a.sub_actions or (a,))] for r, acts in lowered.items()}
    return max(map(len, S._simulate_comms_compute(flat, lambda s: schedule.placement[s], text.n_stages).values()))


@pytest.mark.parametrize("kind", NEW)
def test_torch_validates_lowers_and_simulates_every_new_kind(kind):
    for p, m in ((1, 4), (2, 4), (2, 8), (3, 6), (4, 8), (4, 16), (6, 12)):
        assert torch_accepts(make_schedule(kind, p, m)) > 0


def test_torchs_checks_can_fail():
    """The check above has teeth: a V schedule with two forwards swapped across a dependency is
    refused by torch as by minipipe."""
    good = make_schedule("zb-v", 2, 4)
    rank1 = list(good.actions[1])
    i, j = rank1.index(make_action("1F0")), rank1.index(make_action("2F0"))
    rank1[i], rank1[j] = rank1[j], rank1[i]
    bad = Schedule.build("custom", 2, 4, 2, [good.actions[0], rank1], good.placement)
    with pytest.raises(ScheduleError):
        validate(bad)
    with pytest.raises((AssertionError, ValueError)):
        torch_accepts(bad)


def make_action(text):
    from minipipe.schedule.ops import Action

    return Action.parse(text)


# -- the formulas, exactly, against the simulator ------------------------------------------------
def zb_v_costs():
    """(f, b, w) where the zb-v formula holds: around the paper's F = I = W, and where the input
    gradient dominates (b − 2w ≥ max(f, w))."""
    yield from ((1.0, 2.0, 1.0), (1.0, 2.5, 1.0), (1.0, 3.0, 1.0), (2.0, 5.0, 2.0))
    yield from ((1.0, 2.0, 0.5), (1.0, 3.0, 0.5), (0.5, 2.0, 0.25), (1.0, 4.0, 1.0), (1.0, 5.0, 1.5), (2.0, 3.0, 0.5))


@pytest.mark.parametrize("p", range(1, 9))
def test_zb_v_makespan_memory_and_bubble_equal_the_formulas(p):
    for m in range(1, 4 * p + 3):
        schedule = make_schedule("zb-v", p, m)
        assert simulate(schedule).peak_inflight() == [theory.peak_inflight("zb-v", p, m, r) for r in range(p)]
        if m < 2 * p - 1:
            with pytest.raises(ValueError, match="m >= 2p - 1"):
                theory.makespan("zb-v", p, m)
            continue
        for f, b, w in zb_v_costs():
            trace = simulate(schedule, Costs(forward=f, backward=b, weight=w))
            assert trace.makespan == pytest.approx(theory.makespan("zb-v", p, m, 2, f, b, w), abs=1e-9), (m, f, b, w)
            assert trace.bubble() == pytest.approx(theory.bubble_fraction("zb-v", p, m, 2, f, b, w), abs=1e-12)


def test_zb_v_halves_zb_h1s_bubble_and_keeps_1f1bs_memory():
    """F = I = W (f = 1, b = 2, w = 1): 1F1B idles 3(p−1) per rank, ZB-H1 (p−1), ZB-V (p−1)/2 —
    the first micro-batch's trip down the ranks, which no schedule of one step avoids. Rank 0
    holds 2p half-size chunks: the p micro-batches 1F1B's rank 0 holds."""
    for p in (2, 4, 8):
        m = 4 * p
        idle = {
            k: simulate(make_schedule(k, p, m), Costs(forward=1, backward=2, weight=1)).makespan - 3 * m
            for k in ("1f1b", "zb-h1", "zb-v")
        }
        assert idle == pytest.approx({"1f1b": 3 * (p - 1), "zb-h1": p - 1, "zb-v": (p - 1) / 2})
        v_peak = simulate(make_schedule("zb-v", p, m)).peak_inflight()[0]
        assert v_peak / 2 == simulate(make_schedule("1f1b", p, m)).peak_inflight()[0] == p


def test_zb_v_formula_says_where_it_does_not_hold():
    with pytest.raises(ValueError, match="simulate it instead"):
        theory.makespan("zb-v", 4, 16, f=1.0, b=2.0, w=0.75)  # w < f and b − 2w < f: its order is not tuned there
    assert simulate(make_schedule("zb-v", 4, 16), Costs(forward=1.0, backward=2.0, weight=0.75)).makespan > 0


@pytest.mark.parametrize("p", range(1, 7))
def test_dualpipe_v_bubble_is_deepseeks_formula(p):
    """Idle per rank (p−1)(F&B + B − 3W) with chunk costs (f/2, b/2, w/2), where a chunk's input
    gradient costs its forward; with overlap the pairs shorten and the last rank, which has the
    most of them, idles exactly that."""
    for m in range(2 * p, 2 * p + 9):
        schedule = make_schedule("dualpipe-v", p, m)
        assert (
            simulate(schedule).peak_inflight()
            == [2 * p + 1] * p
            == [theory.peak_inflight("dualpipe-v", p, m, r) for r in range(p)]
        )
        for (f, b, w), overlap in itertools.product(
            ((1.0, 2.0, 1.0), (2.0, 3.0, 1.0), (1.0, 1.5, 0.5), (2.0, 2.5, 0.5)), (0.0, 0.3, 1.0)
        ):
            trace = simulate(schedule, Costs(forward=f, backward=b, weight=w, overlap=overlap))
            assert trace.makespan == pytest.approx(theory.makespan("dualpipe-v", p, m, 2, f, b, w, overlap), abs=1e-9)
            F, B, W = f / 2, b / 2, w / 2
            fb = F + B - overlap * min(F, B)
            assert trace.idle(p - 1) == pytest.approx((p - 1) * (fb + B - 3 * W), abs=1e-9)
            assert max(trace.idle(r) for r in range(p)) == pytest.approx(trace.idle(p - 1), abs=1e-9)


def test_dualpipe_v_against_1f1b_and_zb_h1_under_the_same_costs():
    """DeepSeek's comparison, simulated: per-rank idle 1F1B (p−1)(f+b), ZB-H1 (p−1)(f+b−2w),
    DualPipe-V (p−1)(F&B + B − 3W) on half-size chunks. Without overlap (a CPU) it idles as
    ZB-H1; with the pairs fully overlapped (F&B = max(F, B)) it idles half as much, and its
    step is shorter by what every pair hides."""
    p, m, f, b, w = 4, 16, 1.0, 2.0, 1.0
    run = {k: simulate(make_schedule(k, p, m), Costs(forward=f, backward=b, weight=w)) for k in ("1f1b", "zb-h1")}
    dual = {
        o: simulate(make_schedule("dualpipe-v", p, m), Costs(forward=f, backward=b, weight=w, overlap=o))
        for o in (0.0, 1.0)
    }
    assert run["1f1b"].idle(p - 1) == pytest.approx((p - 1) * (f + b))
    assert run["zb-h1"].idle(p - 1) == pytest.approx((p - 1) * (f + b - 2 * w))
    assert dual[0.0].idle(p - 1) == pytest.approx(run["zb-h1"].idle(p - 1))
    assert dual[1.0].idle(p - 1) == pytest.approx(dual[0.0].idle(p - 1) / 2)
    assert dual[1.0].makespan < run["zb-h1"].makespan < run["1f1b"].makespan


def test_dualpipe_v_needs_enough_micro_batches_and_formula_costs():
    with pytest.raises(ValueError, match="at least 2p = 8"):
        make_schedule("dualpipe-v", 4, 6)
    with pytest.raises(ValueError, match="exactly v=2 chunks"):
        make_schedule("dualpipe-v", 4, 8, 3)
    with pytest.raises(ValueError, match="input gradient costs its forward"):
        theory.makespan("dualpipe-v", 4, 8, f=1.0, b=3.0, w=1.0)


@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_bfs_makespan_and_memory_equal_the_formulas(v):
    for p in range(1, 8):
        for m in range(1, 17):
            schedule = make_schedule("bfs", p, m, v)
            assert (
                simulate(schedule).peak_inflight()
                == [m * v] * p
                == [theory.peak_inflight("bfs", p, m, r, v) for r in range(p)]
            )
            if m < p:
                with pytest.raises(ValueError, match="m >= p"):
                    theory.makespan("bfs", p, m, v)
                continue
            for f, b in ((1.0, 2.0), (1.0, 1.0), (2.0, 1.0)):
                trace = simulate(schedule, Costs(forward=f, backward=b))
                assert trace.makespan == pytest.approx(theory.makespan("bfs", p, m, v, f, b), abs=1e-9)
                assert trace.bubble() == pytest.approx(theory.bubble_fraction("bfs", p, m, v), abs=1e-12)


def test_bfs_needs_no_multiple_of_p_and_costs_gpipes_memory():
    """Where it wins and what it costs: interleaving's step for any m >= p (interleaved 1F1B
    refuses m = 6 on p = 4), with all m micro-batches held, as GPipe holds them."""
    with pytest.raises(ValueError, match="multiple of p"):
        make_schedule("interleaved", 4, 6)
    bfs = simulate(make_schedule("bfs", 4, 8))
    interleaved = simulate(make_schedule("interleaved", 4, 8))
    assert bfs.makespan == pytest.approx(interleaved.makespan)
    assert bfs.peak_inflight() == [16] * 4 and max(interleaved.peak_inflight()) < 16
    assert simulate(make_schedule("bfs", 4, 6)).makespan < simulate(make_schedule("gpipe", 4, 6)).makespan


# -- overlapped pairs in the schedule ------------------------------------------------------------
def test_a_pair_reads_and_prints_as_torch_writes_it():
    schedule = Schedule.custom(["0F0 0F1 (0F2;0B0)OVERLAP_F_B 0B1 0B2".split()])
    assert schedule.paired == ((0, 2),)
    assert schedule.to_text().splitlines()[1] == "rank 0: 0F0 0F1 (0F2;0B0)OVERLAP_F_B 0B1 0B2"
    assert Schedule.from_text(schedule.to_text()) == schedule
    assert validate(schedule) is schedule


def test_a_pair_starts_when_both_have_their_inputs_and_its_results_leave_at_its_end():
    # run one after the other, 1F1 could start at 2 and send at 3; paired with 1B0, whose gradient
    # comes from 2B0 at 4, it starts at 4, and its output leaves with the pair, at 6
    schedule = Schedule.custom(
        [["0F0", "0F1", "0B0", "0B1"], ["1F0", "(1F1;1B0)", "1B1"], ["2F0", "2B0", "2F1", "2B1"]]
    )
    start = {str(e.action): e.start for e in simulate(schedule, Costs(forward=1.0, backward=1.0)).events}
    assert (start["1F1"], start["1B0"], start["2F1"]) == (4.0, 5.0, 6.0)
    hidden = {str(e.action): e.start for e in simulate(schedule, Costs(forward=1.0, backward=1.0, overlap=1.0)).events}
    assert (hidden["1F1"], hidden["2F1"]) == (4.0, 5.0)  # fully overlapped: the pair takes one op's time


@pytest.mark.parametrize(
    "lists,message",
    [
        ([["0F0", "0F1", "(0B0;0B1)"]], "a forward followed by a backward"),
        ([["0F0", "(0F1;0B1)", "0B0"]], "its own forward"),
        ([["0F0", "0F1", "(0F2;0W0)", "0I0", "0B1", "0B2"]], "a forward followed by a backward"),
    ],
)
def test_bad_pairs_are_refused_with_the_reason(lists, message):
    with pytest.raises(ScheduleError, match=message):
        validate(Schedule.custom(lists))


def test_overlap_must_be_a_share():
    with pytest.raises(ValueError, match="from 0"):
        Costs(overlap=1.5)


# -- listed wherever a kind can be chosen, with no edit there -------------------------------------
@pytest.mark.parametrize("kind", NEW)
def test_the_cli_simulates_the_new_kinds_with_their_theory(kind, capsys):
    from minipipe.cli import main

    assert main(["simulate", "-s", kind, "-p", "4", "-m", "8"]) == 0
    out = capsys.readouterr().out
    assert f"simulated {kind}" in out and "(theory" in out and "makespan, theory" in out


def test_the_cli_compares_every_kind_and_prices_overlap(capsys):
    from minipipe.cli import build_parser, main

    assert main(["simulate", "--all-kinds", "-p", "4", "-m", "8"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{k} " in out for k in ("1f1b", *NEW))
    assert main(["simulate", "-s", "dualpipe-v", "-p", "4", "-m", "8", "--overlap", "1"]) == 0
    assert "makespan, theory: 22" in capsys.readouterr().out
    assert build_parser().parse_args(["train", "--recompute"]).recompute == "stage"
    assert build_parser().parse_args(["train", "--recompute", "1,2"]).recompute == "1,2"


@pytest.mark.parametrize("kind", NEW)
def test_the_explorer_offers_and_draws_the_new_kinds(kind):
    pytest.importorskip("ipywidgets")
    from minipipe.viz import ScheduleExplorer

    explorer = ScheduleExplorer(kind=kind, p=4, m=8)
    assert kind in explorer.controls["kind"].options
    assert explorer.error is None and explorer.trace.schedule.kind == kind


def test_bfs_overlaps_a_data_parallel_all_reduce_that_interleaving_leaves_exposed():
    """Lamy-Poirier's case for breadth-first: the same pipeline span as interleaved 1F1B, but each
    chunk's backwards end together, the last chunk's early, so its gradients' all-reduce runs
    under the other chunk's backwards. With an all-reduce as long as the cool-down, the step is
    shorter (simulate_mesh, dp = 2, the same gradient bytes per rank)."""
    from minipipe.parallel.mesh import Mesh
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.sim.network import Link, Network
    from minipipe.traffic import Traffic

    steps = {}
    for kind in ("interleaved", "bfs"):
        schedule = make_schedule(kind, 4, 8)
        grads = Traffic(grads=tuple((4, 4, 4, 4) for _ in range(schedule.n_stages)), bucket_bytes=4)
        steps[kind] = simulate_mesh(schedule, Costs(), Mesh(4, dp=2), Network.uniform(Link(2.0, 0.0)), grads)
    assert steps["bfs"].compute_span == steps["interleaved"].compute_span
    assert steps["bfs"].makespan < steps["interleaved"].makespan - 3
