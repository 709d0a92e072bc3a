"""Edges a mutation sample found untested, each at the edge and one step either side:
an efficiency of exactly 1 (and each of its fractions checked when memory is not priced), ep=2 in a
layout's label, a stage share summing to 1.2, a timeline of a trace that starts later or lasts no
time, a flushed step's one weight version, the throughput's default costs, exercise 08's milliseconds;
and what a summary says (the bubble, how requests arrive), weight versions counted from a trace's start,
the kind of a backward's message, a gated MLP's third matrix, the error trend's slope, the costs' refusal,
the search's own replay against the simulator's, a recompute list naming layers twice or none, the
reason f and g cannot reach the worker processes, and the folder the course's own notebooks run in."""

import dataclasses
import os

import pytest

from minipipe import Costs, make_schedule, simulate, theory
from minipipe.planner.efficiency import Efficiency
from minipipe.planner.setup_and_layout import Layout, make_setup
from minipipe.sim.request_stream import ServeCosts
from minipipe.trace import Event, Trace


@pytest.mark.parametrize(("efficiency", "refused"), [(1.0, False), (1.01, True), (0.999, False), (0.0, True)])
def test_an_efficiency_is_a_share_up_to_and_with_1(efficiency, refused):
    if refused:
        with pytest.raises(ValueError, match="efficiency"):
            make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64, efficiency=efficiency)
    else:
        make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64, efficiency=efficiency)


@pytest.mark.parametrize("key", ["gemm", "nvlink", "network"])
def test_each_efficiency_is_checked_when_memory_is_not_priced(key):
    fractions = dict(gemm=0.5, memory=None, nvlink=0.9, network=0.8)
    Efficiency(**fractions)
    with pytest.raises(ValueError, match=f"efficiency {key} is an achieved fraction"):
        Efficiency(**{**fractions, key: 1.5})


@pytest.mark.parametrize(("ep", "label"), [(1, "tp2 pp2 dp4"), (2, "tp2 pp2 dp4 ep2"), (4, "tp2 pp2 dp4 ep4")])
def test_a_layouts_label_names_ep_from_2(ep, label):
    assert Layout(2, 2, 4, 1, 8, ep=ep).label() == label


@pytest.mark.parametrize(("schedule", "v", "label"), [("1f1b", 1, "1f1b"), ("interleaved", 2, "interleaved v=2")])
def test_a_layouts_schedule_label_names_v_from_2(schedule, v, label):
    assert Layout(2, 2, 4, 1, 8, schedule, v).schedule_label() == label


@pytest.mark.parametrize(
    ("share", "refused"), [((0.5, 0.5), False), ((0.6, 0.6), True), ((0.5, 0.4), True), ((1.5, -0.5), True)]
)
def test_a_stage_share_is_fractions_that_sum_to_1(share, refused):
    if refused:
        with pytest.raises(ValueError, match="numbers >= 0 that sum to 1"):
            ServeCosts(per_request=1.0, stage_share=share)
    else:
        ServeCosts(per_request=1.0, stage_share=share)


def test_the_timeline_of_a_trace_that_starts_later_is_drawn_from_its_start():
    trace = simulate(make_schedule("gpipe", 2, 2), Costs(forward=1.0, backward=2.0))
    shifted = dataclasses.replace(
        trace, events=[Event(e.rank, e.action, e.start + 100.0, e.end + 100.0) for e in trace.events]
    )
    assert shifted.start == 100.0 and shifted.makespan == trace.makespan
    assert shifted.ascii(width=9) == trace.ascii(width=9)


def test_a_trace_that_lasts_no_time_has_no_bubble_and_an_empty_timeline():
    empty = Trace(make_schedule("gpipe", 2, 1), [])
    assert empty.bubble() == 0.0 and empty.bubble_per_rank() == [0.0, 0.0]
    assert empty.ascii(width=4).splitlines()[:2] == ["rank 0 |    |", "rank 1 |    |"]


def test_a_flushed_step_holds_one_weight_version_on_every_stage():
    from minipipe.schedule.updates import held

    s = make_schedule("interleaved", 2, 4, 2)
    assert held(s, lambda r, i: 0.0, 1.0, 9.0) == [[(1.0, 9.0)]] * 4


def test_the_throughputs_default_costs_are_f_1_and_b_2():
    assert theory.throughput("pipedream", 4, 8, 3) == theory.throughput("pipedream", 4, 8, 3, f=1.0, b=2.0)
    assert theory.throughput("pipedream", 4, 8, 3) != theory.throughput("pipedream", 4, 8, 3, f=2.0, b=2.0)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.0005, "0.5 ms"), (0.000999, "1 ms"), (0.001, "1.0 ms"), (0.0123, "12.3 ms")]
)
def test_exercise_08_shows_milliseconds_to_two_figures_below_one_and_a_tenth_above(seconds, shown):
    from minipipe.course.exercises.layer_clock import _ms

    assert _ms(seconds) == shown


def test_a_summary_gives_the_bubble_in_percent():
    trace = simulate(make_schedule("gpipe", 4, 4), Costs(forward=1.0, backward=2.0))
    assert f"bubble {100 * trace.bubble():.1f}%" in trace.summary() and trace.bubble() > 0.1


def test_the_weight_versions_of_a_trace_that_starts_later_count_from_its_start():
    trace = simulate(make_schedule("pipedream-2bw", 2, 2, steps=2))
    shifted = dataclasses.replace(
        trace, events=[Event(e.rank, e.action, e.start + 100.0, e.end + 100.0) for e in trace.events]
    )
    for r in range(2):
        assert shifted.weight_versions_curve(r) == [(t + 100.0, n) for t, n in trace.weight_versions_curve(r)]


@pytest.mark.parametrize(("op", "kind"), [("F", "PP_ACTIVATION"), ("B", "PP_GRADIENT"), ("I", "PP_GRADIENT")])
def test_a_forward_sends_an_activation_and_a_backward_a_gradient(op, kind):
    from minipipe.schedule.ops import Action
    from minipipe.traffic import TrafficKind, message_kind

    assert message_kind(Action(op, 1, 0)) is TrafficKind[kind]


def test_a_gated_mlp_has_a_third_matrix_of_hidden_by_inner():
    from minipipe.planner.shapes import ModelShape, layer_flops

    plain = ModelShape("m", layers=2, hidden=64, heads=4, vocab=100, seq=32, ffn=256)
    gated = dataclasses.replace(plain, gated=True)
    assert layer_flops(gated, 8) - layer_flops(plain, 8) == 8 * 2 * 64 * 256


def test_the_error_trend_is_its_least_squares_slope_per_decade_of_parameters():
    from minipipe.planner.efficiency_fit import Accuracy, summary

    rows = [Accuracy(f"m{k}", "g", 1.0, 1.0 + e, False, "", p) for k, (e, p) in enumerate([(0.0, 1e9), (0.2, 1e11)])]
    assert summary(rows)["slope_per_decade"] == pytest.approx(0.1)
    assert summary(rows)["mean_abs"] == pytest.approx(0.1)


@pytest.mark.parametrize(("rate", "said"), [(None, "all at once"), (250.0, "250/s (even)")])
def test_a_serving_summary_says_how_the_requests_arrive(rate, said):
    from minipipe.sim.request_stream import Stream, simulate_serving

    text = simulate_serving(Stream(8, 4, rate=rate)).summary()
    assert f"8 requests, {said}, micro-batches of 4" in text


@pytest.mark.parametrize(("f", "b", "said"), [(0.0, 0.0, "(f and b are both 0)"), (-1.0, 2.0, "got f=-1.0, b=2.0")])
def test_costs_without_work_between_them_are_refused_with_what_was_given(f, b, said):
    with pytest.raises(ValueError, match="finite and >= 0 with some work between them") as info:
        theory.bubble_fraction("gpipe", 2, 4, f=f, b=b)
    assert said in str(info.value)


@pytest.mark.parametrize(
    ("kind", "p", "v", "placement"),
    [
        ("1f1b", 3, None, "line"),
        ("interleaved", 2, 2, "interleaved"),
        ("zb-v", 2, None, "v"),
        ("dualpipe-v", 2, None, "v"),
    ],
)
def test_the_searchs_makespan_is_the_simulators_on_unequal_messages_and_overlapped_pairs(kind, p, v, placement):
    """The search replays its candidates itself; on messages of a size of their own per boundary, and
    with DualPipe-V's overlapped forward-and-backward pairs, its makespan is the simulator's."""
    from minipipe.schedule import search

    schedule = make_schedule(kind, p, 4, v)
    costs = Costs(
        forward=1.0,
        backward=2.0,
        latency=0.1,
        bandwidth=10.0,
        activation_bytes=[3.0 * k + 1.0 for k in range(schedule.n_stages)],
        overlap=0.5,
    )
    span, _ = search.measure(schedule, search.problem(p, 4, costs, placement), costs)
    assert span == pytest.approx(simulate(schedule, costs).makespan)


@pytest.mark.parametrize(
    ("generated", "kind", "p", "m"),
    [("naive", "naive", 3, 1), ("interleaved_1f1b", "interleaved", 4, 8), ("breadth_first", "breadth-first", 4, 8)]
    + [("inference", "inference", 2, 4)],
)
def test_a_generators_defaults_are_its_kinds(generated, kind, p, m):
    from minipipe.schedule import generators

    made = getattr(generators, generated)(p) if generated == "naive" else getattr(generators, generated)(p, m)
    assert made.actions == make_schedule(kind, p, m).actions and made.v == make_schedule(kind, p, m).v


def test_a_gap_covered_by_spans_apart_counts_each_of_them_once():
    from minipipe.trace import covered

    assert covered(0.0, 10.0, [(1.0, 2.0), (4.0, 7.0), (6.0, 8.0), (9.5, 12.0)]) == 1.0 + 4.0 + 0.5


def test_the_timelines_legend_names_the_glyphs_of_a_step_with_more_than_compute():
    from minipipe import Schedule
    from minipipe.schedule.lowering import with_fsdp, with_sends_and_receives
    from minipipe.schedule.ops import B, F, I, W

    compute = "F: 0-9 (micro-batch mod 10)   B: a-j   I: k-t   W: A-J   blank: idle"
    more = "   send: >  receive: <  unshard: u  reshard: r  reduce gradients: g"
    every_compute_op = Schedule.custom([[F(0, 0), B(0, 0), F(0, 1), I(0, 1), W(0, 1)]])
    assert every_compute_op.op_types == {"F", "B", "I", "W"}
    assert simulate(every_compute_op).ascii(width=20).splitlines()[-1] == compute
    for lowered in (with_sends_and_receives(make_schedule("1f1b", 2, 2)), with_fsdp(make_schedule("1f1b", 2, 2))):
        assert simulate(lowered).ascii(width=20).splitlines()[-1] == compute + more


def test_the_micro_batches_in_flight_of_a_trace_that_starts_later_count_from_its_start():
    trace = simulate(make_schedule("1f1b", 3, 4))
    shifted = dataclasses.replace(
        trace, events=[Event(e.rank, e.action, e.start + 100.0, e.end + 100.0) for e in trace.events]
    )
    for r in range(3):
        assert shifted.inflight_curve(r) == [(t + 100.0, n) for t, n in trace.inflight_curve(r)]


@pytest.mark.parametrize(("pipeline", "refused"), [(-1, True), (0, False), (1, False), (2, True)])
def test_a_mesh_simulation_runs_one_of_its_pipelines_from_0_to_the_last(pipeline, refused):
    from minipipe.parallel.mesh import Mesh
    from minipipe.sim.mesh_step import simulate_mesh

    schedule, mesh = make_schedule("1f1b", 2, 2), Mesh(2, dp=2)
    if refused:
        with pytest.raises(ValueError, match=r"pipeline must be in 0\.\.1"):
            simulate_mesh(schedule, mesh=mesh, pipeline=pipeline)
    else:
        assert simulate_mesh(schedule, mesh=mesh, pipeline=pipeline).makespan > 0


def test_a_recomputing_backward_adds_its_share_of_the_forward():
    from minipipe.sim.recompute_costs import backward_cost

    assert backward_cost(forward=2.0, backward=3.0, share=0.25) == 3.5


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([1, 1], "recompute lists layer 1 more than once"),
        ([2, 1, 2, 1], "recompute lists layers 1, 2 more than once"),
        ([], "recompute names no layers; give their indices, e.g. [1, 2], or use 'none'"),
        ("", "recompute names no layers"),
    ],
)
def test_a_recompute_list_naming_a_layer_twice_or_none_says_which(given, said):
    from minipipe.sim.recompute_costs import parse

    with pytest.raises(ValueError) as info:
        parse(given)
    assert str(info.value).startswith(said)


def test_a_refused_recompute_list_is_echoed_up_to_80_characters():
    from minipipe.sim.recompute_costs import parse

    given = [1.5] + list(range(100, 140))
    with pytest.raises(ValueError, match="whole-number layer indices") as info:
        parse(given)
    assert str(info.value).endswith(" in " + str(given)[:80])


def test_poisson_arrivals_without_a_rate_are_refused_with_the_flag_to_give():
    from minipipe.sim.request_stream import Stream

    with pytest.raises(ValueError, match=r"poisson arrivals need a rate: give --rate"):
        Stream(8, 4, arrivals="poisson")
    Stream(8, 4, rate=10.0, arrivals="poisson")


def test_a_layer_kind_of_its_own_is_named_in_lower_case():
    from minipipe.course.exercises.layer_clock import named

    layers = [type("Embedding", (), {})(), type("LayerNorm", (), {})(), type("Readout", (), {})()]
    assert named(layers, "LayerNorm") == "the layernorm (layer 1)"
    assert named(layers + [type("LayerNorm", (), {})()], "LayerNorm") == "the layernorms (layers 1, 3)"


def test_per_stage_traffic_of_the_wrong_length_is_named():
    from minipipe.parallel.mesh import Mesh
    from minipipe.sim.mesh_step import simulate_mesh
    from minipipe.traffic import Traffic

    with pytest.raises(ValueError, match=r"traffic\.cp has 1 entries for 2 stages; give one per stage"):
        simulate_mesh(make_schedule("1f1b", 2, 2), mesh=Mesh(2), traffic=Traffic(cp=[{}]))


def test_at_tp_1_sequence_parallelism_splits_nothing_the_last_stage_keeps():
    from minipipe.planner.presets import model
    from minipipe.planner.shapes import head_activation_bytes

    shape = model("gpt3-2.7b")
    alone = head_activation_bytes(shape, 2, tp=1)
    assert head_activation_bytes(shape, 2, tp=1, sequence_parallel=True) == alone
    assert head_activation_bytes(shape, 2, tp=2, sequence_parallel=True) < head_activation_bytes(shape, 2, tp=2)


@pytest.mark.parametrize(
    ("exercise", "what", "functions"), [("tensor_parallel", "f and g", 2), ("data_parallel", "all_reduce_gradients", 1)]
)
def test_functions_that_cannot_be_sent_to_the_workers_are_named_with_the_reason(exercise, what, functions):
    import importlib
    import threading

    from minipipe.course.exercises.verdict import Mistake

    lock = threading.Lock()

    def copy(x):
        with lock:
            return x

    real_in_sandbox = importlib.import_module(f"minipipe.course.exercises.{exercise}")._real_in_sandbox
    with pytest.raises(
        Mistake, match=rf"{what} cannot be sent to worker processes \(TypeError: cannot pickle '_thread"
    ):
        real_in_sandbox(*[copy] * functions)


@pytest.mark.distributed  # starts a notebook kernel
def test_the_courses_own_notebooks_run_in_the_folder_they_are_given(tmp_path):
    import nbformat

    from minipipe.course.exercises.notebook import execute_here

    mark = "import os; open('here.txt', 'w').write(os.environ.get('MINIPIPE_EDGE_MARK', 'unset'))"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(mark)])
    execute_here(nb, tmp_path, timeout=60)
    assert (tmp_path / "here.txt").read_text() == "unset"
    execute_here(nb, tmp_path, timeout=60, env=dict(os.environ, MINIPIPE_EDGE_MARK="given"))  # the GPU check's way
    assert (tmp_path / "here.txt").read_text() == "given"


@pytest.mark.parametrize(
    ("r", "v", "m", "exposed"),
    [
        (0, 1, 8, 10.0),  # window 2: 10 − 2 of the reduction, 6 − 4·1 of the gather
        (1, 1, 8, 7.5),  # window 1·(2 + 0.5) + 2 = 4.5
        (3, 1, 8, 3.0),  # window 9.5 hides all but the last bucket, 1
        (1, 2, 8, 11.5),  # window 1·(1 + 0.5) + 1 = 2.5; the gather behind 4 forwards of 0.5
        (0, 1, 1, 13.0),  # one micro-batch: one forward hides the gather
        (0, 2, 2, 13.0),  # two micro-batches of two chunks: 4 forwards of 0.5 before the first backward
    ],
)
def test_a_ranks_reduction_hides_behind_its_cool_down_and_its_gather_behind_its_first_forwards(r, v, m, exposed):
    """p 4, f 1, b 2 per micro-batch (the rank's share), messages 0.5; reduce 10, gather 6, last bucket 1,
    a tied head 0.25: rank r's cool-down, r·(b/v + c), and its last backward, b/v, hide its reduction but
    the last bucket; min(m·v, p) forwards of f/v hide its parameters' gather."""
    from minipipe.planner.step_end import RankReduction, Reductions, step_end

    reduced = Reductions({r: RankReduction(reduce=10.0, gather=6.0, tail=1.0, optimizer=3.0)}, 0.25, 16.25, 3.0)
    layout = Layout(1, 4, 1, 1, m, "interleaved" if v > 1 else "1f1b", v)
    got = step_end(reduced, layout, overlap=True, forward={r: 1.0}, backward={r: 2.0}, message=0.5)
    assert (got.exposed, got.reduction, got.optimizer) == (exposed + 0.25, 16.25, 3.0)
    alone = step_end(reduced, layout, overlap=False, forward={r: 1.0}, backward={r: 2.0}, message=0.5)
    assert alone.exposed == 16.25


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_an_mlps_parameters_are_torchs_count_of_its_linears(gated, bias):
    import torch

    from minipipe.planner.experts import mlp_parameters
    from minipipe.planner.presets import MODELS

    shape = dataclasses.replace(MODELS["llama2-7b"], hidden=8, heads=2, kv_heads=2, gated=gated, bias=bias)
    inner = [torch.nn.Linear(8, 12, bias=bias, device="meta") for _ in range(2 if gated else 1)]
    layers = [*inner, torch.nn.Linear(12, 8, bias=bias, device="meta")]
    assert mlp_parameters(shape, 12) == sum(t.numel() for layer in layers for t in layer.parameters())


def test_a_models_training_bytes_are_for_one_sequence_unless_told():
    from minipipe.planner.presets import MODELS
    from minipipe.planner.shapes import training_bytes

    shape = MODELS["gpt3-125m"]
    assert training_bytes(shape) == training_bytes(shape, micro_batch=1) != training_bytes(shape, micro_batch=2)


@pytest.mark.parametrize(
    ("kind", "v"), [("zb-v", range(2, 3)), ("dualpipe-v", range(2, 3)), ("interleaved", range(2, 5))]
)
def test_the_planner_offers_a_kind_no_more_chunks_than_it_takes_nor_than_the_layers(kind, v):
    from minipipe.planner.space import chunks

    assert chunks(kind, 4, 16, 8) == v and chunks(kind, 4, 16, 1) == range(2, 2)  # 16 layers on 4 ranks: 4 at most


def test_a_run_of_an_unflushed_kind_refuses_chunks_per_rank():
    with pytest.raises(ValueError, match="pipedream: v=2 stages per rank does not apply"):
        theory.run_makespan("pipedream", 4, 8, 2, v=2)


def test_a_replay_that_cannot_finish_says_so_and_where_each_rank_waits():
    from minipipe import Schedule
    from minipipe.schedule.ops import B, F
    from minipipe.schedule.replay import Stuck, replay

    with pytest.raises(Stuck, match="^the schedule cannot finish$") as stuck:
        replay(Schedule.custom([[B(0, 0), F(0, 0)]]), lambda rank, a: 1.0)
    assert stuck.value.pos == [0] and stuck.value.blocked_on == {0: F(0, 0)}


def test_compute_costs_take_one_trace_or_several_and_halve_a_backward_no_w_split():
    from minipipe.sim.measured_costs import compute_costs

    one = dataclasses.replace(simulate(make_schedule("1f1b", 1, 2), Costs(forward=1, backward=3)), source="measured")
    got = compute_costs(one)
    assert got == compute_costs([one, one]) and (got.forward, got.backward, got.weight) == ([1.0], [3.0], [1.5])


def test_adam_in_fp32_is_16_bytes_a_parameter_unless_told_otherwise():
    from minipipe.planner.shapes import bytes_per_parameter

    assert bytes_per_parameter() == bytes_per_parameter("fp32", "adam")
    assert bytes_per_parameter().total == 4 + 4 + 8 and bytes_per_parameter("fp32", "sgd").total == 8


def test_a_setup_with_an_unknown_optimizer_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown optimizer 'adamw'; choose one of adam, sgd, sgd-momentum"):
        make_setup("gpt3-125m", 8, "a100-80gb", batch=8, optimizer="adamw")


def test_a_file_that_is_not_a_notebook_is_refused_before_any_runs(tmp_path):
    from minipipe.course.exercises.notebook import exercise_notebooks

    (tmp_path / "notes.md").write_text("# my notes\n")
    said = r"/notes.md is not a notebook \(a .ipynb file\); give an exercise notebook \(exercises/03_one_f_one_b"
    with pytest.raises(ValueError, match=said):
        exercise_notebooks([str(tmp_path / "notes.md")])
