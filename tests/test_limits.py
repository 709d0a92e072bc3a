"""Sizes a run cannot have and values that slipped through, refused before anything is built, each
limit at the limit and one step either side: the schedule's size, micro-batches above the batch,
the seed, trace_steps, recomputed layers, non-finite costs, the workshop's memory, port and address,
and `minipipe compare` when no layout fits (exit 2, not an empty table)."""

import dataclasses

import pytest

import minipipe.engine.workers as workers
from minipipe import Costs, cli, make_schedule
from minipipe.engine.config import RunConfig, prepare
from minipipe.models.catalog import MAX_SEED, make_task
from minipipe.schedule import kinds
from minipipe.schedule.ir import MAX_CELLS, check_size
from minipipe.sim.recompute_costs import parse as parse_recompute
from minipipe.workshop.start import MIN_MEMORY_GIB, check_listening, check_memory

SMALL = RunConfig(p=2, m=2, model="mlp", model_args={"width": 8, "depth": 2}, batch_size=4, steps=2)


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    monkeypatch.setattr(workers, "launch", lambda *a, **k: pytest.fail("processes were started for bad input"))


@pytest.fixture
def nothing_built(monkeypatch):
    """Fail if a schedule is generated: a refusal of its size must come first."""
    refuse_building(monkeypatch)


def refuse_building(monkeypatch):
    for name, kind in list(kinds.KINDS.items()):
        monkeypatch.setitem(
            kinds.KINDS, name, dataclasses.replace(kind, generate=lambda *a, **k: pytest.fail("a schedule was built"))
        )


@pytest.mark.parametrize(
    "p, m, v, fine",
    [
        (1, MAX_CELLS - 1, 1, True),
        (1, MAX_CELLS, 1, True),
        (1, MAX_CELLS + 1, 1, False),
        (4, MAX_CELLS // 8, 2, True),
        (4, MAX_CELLS // 8 + 1, 2, False),
    ],
)
def test_the_schedule_size_is_bounded_at_its_limit(p, m, v, fine):
    if fine:
        check_size(p, m, v)
    else:
        with pytest.raises(
            ValueError,
            match=rf"p·v·m = {p}·{v}·{m} = {p * v * m:,} stage micro-batches, above the "
            rf"65,536 minipipe builds .*use fewer ranks \(p\), micro-batches \(m\)",
        ):
            check_size(p, m, v)


@pytest.mark.parametrize(
    "kind, p, m, v", [("1f1b", 100000, 4, None), ("gpipe", 2, 10**9, None), ("interleaved", 256, 256, 2)]
)
def test_a_schedule_too_large_is_refused_before_it_is_built(nothing_built, kind, p, m, v):
    with pytest.raises(ValueError, match="stage micro-batches, above the 65,536"):
        make_schedule(kind, p, m, v)


def test_the_bound_counts_the_steps_a_schedule_holds():
    """A run without a flush (or a flushed step repeated) is one schedule of every step."""
    check_size(2, 4, 1, 8192)  # 2·1·4·8,192 = 65,536: the limit
    with pytest.raises(
        ValueError,
        match=r"p·v·m·steps = 2·1·4·8193 = 65,544 stage micro-batches, above the 65,536 "
        r".*micro-batches \(m\), steps in one schedule or stages per rank",
    ):
        check_size(2, 4, 1, 8193)


@pytest.mark.parametrize("kind", ["pipedream", "pipedream-2bw", "1f1b"])
def test_a_schedule_of_many_steps_is_refused_before_it_is_built(nothing_built, kind):
    with pytest.raises(ValueError, match=r"2·1·4·8193 = 65,544 stage micro-batches"):
        make_schedule(kind, 2, 4, steps=8193)


def test_simulate_with_a_huge_p_exits_2_at_once(nothing_built, capsys):
    assert cli.main(["simulate", "-p", "100000"]) == 2
    assert "above the 65,536" in capsys.readouterr().err


@pytest.mark.parametrize("m, fine", [(1, True), (2, True), (3, False)])
def test_micro_batches_above_the_batch_are_refused_before_a_schedule_is_built(monkeypatch, m, fine):
    config = SMALL.replace(m=m, batch_size=2, p=1)
    if fine:
        assert prepare(config).schedule.m == m
        return
    refuse_building(monkeypatch)
    with pytest.raises(
        ValueError,
        match=r"m=3 micro-batches of batch_size=2 rows: a micro-batch would hold less "
        r"than one row; use m <= 2",
    ):
        prepare(config)


def test_a_billion_micro_batches_is_refused_at_once(nothing_built):
    with pytest.raises(ValueError, match=r"m=1000000000 micro-batches of batch_size=32 rows.*use m <= 32"):
        prepare(RunConfig(m=10**9))
    with pytest.raises(ValueError, match=r"shared by dp=2 replicas.*use m <= 8 \(or a smaller dp\)"):
        prepare(RunConfig(m=9, dp=2, batch_size=16))


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("batch_size", "32", r"batch_size \(rows of a step's batch\) must be a whole number >= 1, got '32'"),
        ("batch_size", True, r"batch_size .* got True"),
        ("m", 4.0, r"m \(micro-batches\) must be a whole number >= 1, got 4.0"),
        ("dp", "2", r"dp \(data-parallel replicas\) must be a whole number >= 1, got '2'"),
        ("steps", True, "steps must be a whole number >= 1, got True"),
        ("trace_steps", -1, r"trace_steps is how many of the last steps keep their traces: a whole number >= 0"),
        ("trace_steps", 1.5, "trace_steps .* got 1.5"),
        ("trace_steps", True, "trace_steps .* got True"),
        ("return_grads", "yes", "return_grads must be True or False, got 'yes'"),
        ("pin_cores", "no", "pin_cores must be True or False, got 'no'"),
        ("oversubscribe", 1, "oversubscribe must be True or False, got 1"),
        ("checkpoint_dir", "", "checkpoint_dir is '': give a folder to save in, or None"),
        ("recompute", [1.7], r"recompute layers must be whole-number layer indices such as \[1, 2\]; got 1.7"),
        ("recompute", [True], r"recompute layers must be whole-number .* got True"),
        ("recompute", [1, 1], "recompute lists layer 1 more than once; name each layer once"),
        (
            "model_args",
            {"width": 10**9},
            r"building the model's layers failed \(.*allocate.*\); where it ran out of "
            r"memory, use smaller model_args",
        ),
    ],
)
def test_values_that_slipped_through_are_refused(key, value, said):
    with pytest.raises(ValueError, match=said):
        prepare(SMALL.replace(**{key: value}))


def test_checkpoint_every_may_not_be_a_boolean(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every must be a whole number >= 0"):
        prepare(SMALL.replace(checkpoint_every=True, checkpoint_dir=str(tmp_path / "ckpt")))


@pytest.mark.parametrize("steps, fine", [(-1, False), (0, True), (1, True)])
def test_trace_steps_at_its_limit(steps, fine):
    if fine:
        assert prepare(SMALL.replace(trace_steps=steps)).config.trace_steps == steps
    else:
        with pytest.raises(ValueError, match="trace_steps"):
            prepare(SMALL.replace(trace_steps=steps))


@pytest.mark.parametrize("layers, fine", [([0], True), ([2], True), ([3], False), ([-1], False)])
def test_recomputed_layers_at_their_limits(layers, fine):
    if fine:
        assert parse_recompute(layers, 3).layers == tuple(layers)
    else:
        with pytest.raises(ValueError, match=r"must be layer indices 0\.\.2"):
            parse_recompute(layers, 3)


@pytest.mark.parametrize("seed, fine", [(MAX_SEED - 1, True), (MAX_SEED, True), (MAX_SEED + 1, False)])
def test_the_seed_at_its_limit(seed, fine):
    if fine:
        make_task("mlp", batch_size=4, seed=seed, width=4, depth=1).batch(10**6)  # torch's generator takes it
    else:
        with pytest.raises(ValueError, match=r"seed must be a whole number from 0 to 2\^40 - 1"):
            make_task("mlp", batch_size=4, seed=seed)


@pytest.mark.parametrize(
    "costs, said",
    [
        (dict(forward=float("inf")), r"forward costs must be finite numbers >= 0, got \[inf"),
        (dict(backward=float("nan")), "backward costs must be finite numbers >= 0"),
        (dict(latency=float("inf")), "latency must be >= 0"),
        (dict(stage_scale={0: 0.0}), "stage_scale for stage 0 must be a finite number > 0, got 0.0"),
        (dict(stage_scale={0: float("inf")}), "stage_scale for stage 0 must be a finite number > 0, got inf"),
    ],
)
def test_costs_that_are_not_finite_are_refused(costs, said):
    from minipipe import simulate

    with pytest.raises(ValueError, match=said):
        simulate(make_schedule("1f1b", 2, 4), Costs(**costs))


def test_compare_with_nothing_to_run_exits_2(capsys):
    assert cli.main(["compare", "--world", "7", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "no layout of 7 processes fits (" in err and "DP7: batch_size=32 does not split" in err
    assert cli.main(["compare", "--model", "resnet", "--steps", "1"]) == 2
    assert "every layout: unknown model 'resnet'" in capsys.readouterr().err


def test_compare_beyond_the_machine_is_refused_before_trying_each_split(capsys, monkeypatch):
    monkeypatch.setattr("minipipe.compare.layouts", lambda world: pytest.fail("every split was tried"))
    assert cli.main(["compare", "--world", "1000000"]) == 2
    assert "1000000 processes (p·dp·cp·tp) on a machine with" in capsys.readouterr().err


@pytest.mark.parametrize("port, fine", [(0, False), (1, True), (65535, True), (65536, False), (99999, False)])
def test_the_workshop_port_at_its_limits(port, fine):
    if fine:
        check_listening("0.0.0.0", port)
    else:
        with pytest.raises(ValueError, match=rf"--port must be a whole number from 1 to 65535, got {port}"):
            check_listening("0.0.0.0", port)


@pytest.mark.parametrize(
    "ip, fine",
    [
        ("0.0.0.0", True),
        ("", True),
        ("127.0.0.1", True),
        ("255.255.255.255", True),
        ("::1", True),
        ("256.1.1.1", False),
        ("999.1.1.1", False),
        ("1.2.3", False),
        ("localhost", False),
    ],
    ids=lambda v: v.replace(":", "colon") if isinstance(v, str) else None,  # "::" would split a test's id
)
def test_the_workshop_address_is_an_ip_address(ip, fine):
    if fine:
        check_listening(ip, 8000)
    else:
        with pytest.raises(ValueError, match=rf"--ip '{ip}' is not an IP address"):
            check_listening(ip, 8000)


@pytest.mark.parametrize(
    "memory, fine",
    [
        (None, True),
        (MIN_MEMORY_GIB - 0.01, False),
        (MIN_MEMORY_GIB, True),
        (MIN_MEMORY_GIB + 0.01, True),
        (-1.0, False),
        (0.0, False),
        (float("nan"), False),
        (float("inf"), False),
    ],
)
def test_the_workshop_memory_at_its_limit(memory, fine):
    if fine:
        check_memory(memory)
    else:
        with pytest.raises(ValueError, match="--memory is GiB for each participant, at least 0.5"):
            check_memory(memory)


def test_workshop_dry_run_refuses_a_bad_port_address_or_memory_before_anything(tmp_path, capsys):
    room = str(tmp_path / "room")
    for bad in (["--port", "99999"], ["--ip", "999.1.1.1"], ["--memory", "-1"]):
        assert cli.main(["workshop", "start", "--participants", "2", "--room", room, "--dry-run", *bad]) == 2
    assert not (tmp_path / "room").exists()  # nothing was made
