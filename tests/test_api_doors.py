"""The public doors given the wrong kind of thing: a ValueError that says what was expected, never
an AttributeError or TypeError from inside (a config's unknown field is both a TypeError, as
Python's own, and a ValueError naming the nearest field); the command line's own argument words."""

import pytest

from minipipe import Costs, cli, make_schedule, simulate
from minipipe.engine.config import RunConfig
from minipipe.fields import UnknownField
from minipipe.schedule.ir import Schedule
from minipipe.schedule.rounds import repeat
from minipipe.schedule.validate import validate
from minipipe.serve.config import GenerateConfig, ServeConfig


@pytest.mark.parametrize(
    "make, said",
    [
        (
            lambda: RunConfig(stepz=3),
            r"RunConfig has no field 'stepz' \(did you mean 'steps'\?\); its fields: schedule",
        ),
        (lambda: RunConfig().replace(batchsize=8), r"no field 'batchsize' \(did you mean 'batch_size'\?\)"),
        (lambda: ServeConfig(request=3), r"ServeConfig has no field 'request' \(did you mean 'requests'\?\)"),
        (
            lambda: GenerateConfig(new_token=3),
            r"GenerateConfig has no field 'new_token' \(did you mean 'new_tokens'\?\)",
        ),
        (lambda: Costs(latncy=1), r"Costs has no field 'latncy' \(did you mean 'latency'\?\)"),
        (lambda: Costs(nonsense=1), r"Costs has no field 'nonsense'; its fields: forward, backward"),
    ],
)
def test_a_config_with_an_unknown_field_names_the_nearest(make, said):
    with pytest.raises(UnknownField, match=said) as caught:
        make()
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_a_config_with_known_fields_is_built_as_before():
    assert RunConfig(steps=3, m=2).steps == 3 and RunConfig().replace(p=4).p == 4


@pytest.mark.parametrize(
    "make, said",
    [
        (
            lambda: Schedule.from_text(None),
            r"from_text reads a schedule's text \(a string, as to_text writes it\), got NoneType",
        ),
        (lambda: Schedule.custom([[1, 2]]), "1 is not an action: write it as text"),
        (lambda: Schedule.custom([]), "the schedule has no actions"),
        (lambda: Schedule.custom([[]]), "the schedule has no actions"),
        (lambda: Schedule.custom("0F0 0B0"), "custom takes one list of actions per rank"),
        (lambda: simulate(None), r"expected a Schedule \(make_schedule"),
        (lambda: simulate("1f1b"), "expected a Schedule .*got str"),
        (lambda: simulate(make_schedule("1f1b", 2, 4), "fast"), "simulate's costs are a Costs"),
        (
            lambda: simulate(make_schedule("1f1b", 2, 4), Costs(forward="1")),
            "forward costs are one number, or one per stage; got '1'",
        ),
        (lambda: simulate(make_schedule("1f1b", 2, 4), Costs(backward=True)), "backward costs are one number"),
        (lambda: simulate(make_schedule("1f1b", 2, 4), Costs(forward=[1.0, None])), "forward costs are one number"),
    ],
)
def test_the_wrong_kind_of_thing_is_named(make, said):
    with pytest.raises(ValueError, match=said):
        make()


def test_per_stage_costs_as_numbers_still_work():
    assert simulate(make_schedule("1f1b", 2, 4), Costs(forward=[1.0, 2], backward=2)).makespan > 0


def test_generation_rounds_are_bounded_before_they_are_built():
    """p·m = 2·2·rounds stage micro-batches: 16,384 rounds are the limit (65,536)."""
    one = make_schedule("inference", 2, 2)
    with pytest.raises(ValueError, match="2·1·32770 = 65,540 stage micro-batches, above the 65,536"):
        repeat(one, 16_385)
    assert repeat(one, 16_384).m == 32_768 and repeat(one, 16_383).m == 32_766


@pytest.mark.parametrize("arg", ["=4", " =4", "width=", "width=-1", "width=1.5"])
def test_a_model_arg_without_a_name_or_a_whole_number_is_refused(arg, capsys):
    with pytest.raises(SystemExit) as code:
        cli.main(["train", "--model-arg", arg])
    assert code.value.code == 2 and "expected NAME=INTEGER such as width=64" in capsys.readouterr().err


def test_bad_input_to_train_prints_its_message_alone(capsys):
    """No progress bar is drawn before the refusal."""
    assert cli.main(["train", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minipipe train: error: steps must be a whole number >= 1") and "step/s" not in err


def test_slow_factor_without_the_stage_it_slows_is_refused(capsys):
    assert cli.main(["simulate", "--slow-factor", "0"]) == 2
    assert "--slow-factor 0 slows the stage --slow-stage names; give --slow-stage too" in capsys.readouterr().err
    assert cli.main(["simulate", "--slow-stage", "1", "--slow-factor", "0"]) == 2  # then checked as a factor
    assert "stage_scale for stage 1 must be a finite number > 0, got 0.0" in capsys.readouterr().err
    assert cli.main(["simulate", "--slow-stage", "1"]) == 0  # its default, 1.5
    assert cli.main(["simulate", "--slow-stage", "1", "--slow-factor", "2"]) == 0


@pytest.fixture
def nothing_runs(monkeypatch):
    """What bench and serve would start, replaced: a refusal that slipped would fail here, not run."""

    def ran(*args, **kw):
        raise AssertionError("it ran")

    import minipipe.bench.dp_tp_vs_torch
    import minipipe.bench.suite
    import minipipe.engine.launch
    import minipipe.serve.api

    for module, name in [
        (minipipe.bench.suite, "run_suite"),
        (minipipe.bench.dp_tp_vs_torch, "run_mesh_bench"),
        (minipipe.serve.api, "serve"),
        (minipipe.serve.api, "generate"),
        (minipipe.engine.launch, "run"),
    ]:
        monkeypatch.setattr(module, name, ran)


@pytest.mark.parametrize("rounds, refused", [("-1", True), ("0", True), ("1", False)])
def test_bench_rounds_at_the_limit(rounds, refused, nothing_runs, capsys):
    if refused:
        assert cli.main(["bench", "--rounds", rounds]) == 2
        assert (
            f"--rounds is how many rounds to measure, each one step of every configuration: a whole number >= 1, "
            f"got {rounds}" in capsys.readouterr().err
        )
    else:
        with pytest.raises(AssertionError, match="it ran"):
            cli.main(["bench", "--rounds", rounds])


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--prompt", "1,2"], "--prompt is for --generate; add --generate, or drop --prompt"),
        (["--prompt", "1,2", "--new-tokens", "4"], "--prompt, --new-tokens are for --generate"),
        (["--new-tokens", "4"], "--new-tokens is for --generate"),
        (
            ["--generate", "--requests", "8"],
            "--requests is for a request stream, not --generate; drop --requests, or drop --generate",
        ),
        (["--generate", "--rate", "10", "--poisson"], "--rate, --poisson are for a request stream, not --generate"),
    ],
)
def test_serve_options_of_the_other_mode_are_refused_not_ignored(argv, said, nothing_runs, capsys):
    assert cli.main(["serve", *argv]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--requests", "8", "--rate", "10", "--poisson"],
        ["--generate", "--prompt", "1,2", "--new-tokens", "4", "--train-steps", "1"],
    ],
)
def test_serve_options_of_their_own_mode_are_taken(argv, nothing_runs):
    with pytest.raises(AssertionError, match="it ran"):
        cli.main(["serve", *argv])


def one_rank(m):
    return Schedule.custom([[f"0F{i}" for i in range(m)] + [f"0B{i}" for i in range(m)]])


def test_a_schedule_written_by_hand_is_bounded_as_a_generated_one():
    """65,536 stage micro-batches are the limit: at it a hand-written schedule validates (~1 s), one
    past it is refused before the simulator replays it."""
    assert validate(one_rank(65_536)).m == 65_536
    with pytest.raises(ValueError, match="1·1·65537 = 65,537 stage micro-batches, above the 65,536"):
        simulate(one_rank(65_537))


def test_simulate_makes_the_chrome_trace_folder_as_train_does(tmp_path, capsys):
    """--chrome's folder was checked to be one that can be made, then not made (exit 1 after the run)."""
    out = tmp_path / "new" / "deeper" / "trace.json"
    assert cli.main(["simulate", "--chrome", str(out)]) == 0 and out.exists()
