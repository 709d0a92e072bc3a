"""The public doors given the wrong kind of thing: a ValueError that says what was expected, never
an AttributeError or TypeError from inside (a config's unknown field is both a TypeError, as
Python's own, and a ValueError naming the nearest field); the command line's own argument words."""
import pytest

from minipipe import Costs, cli, make_schedule, simulate
from minipipe.engine.config import RunConfig, UnknownField
from minipipe.schedule.ir import Schedule
from minipipe.schedule.rounds import repeat
from minipipe.serve.config import GenerateConfig, ServeConfig


@pytest.mark.parametrize("make, said", [
    (lambda: RunConfig(stepz=3), r"RunConfig has no field 'stepz' \(did you mean 'steps'\?\); its fields: schedule"),
    (lambda: RunConfig().replace(batchsize=8), r"no field 'batchsize' \(did you mean 'batch_size'\?\)"),
    (lambda: ServeConfig(request=3), r"ServeConfig has no field 'request' \(did you mean 'requests'\?\)"),
    (lambda: GenerateConfig(new_token=3), r"GenerateConfig has no field 'new_token' \(did you mean 'new_tokens'\?\)"),
])
def test_a_config_with_an_unknown_field_names_the_nearest(make, said):
    with pytest.raises(UnknownField, match=said) as caught:
        make()
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_a_config_with_known_fields_is_built_as_before():
    assert RunConfig(steps=3, m=2).steps == 3 and RunConfig().replace(p=4).p == 4


@pytest.mark.parametrize("make, said", [
    (lambda: Schedule.from_text(None), r"from_text reads a schedule's text \(a string, as to_text writes it\), got NoneType"),
    (lambda: Schedule.custom([[1, 2]]), "1 is not an action: write it as text"),
    (lambda: Schedule.custom([]), "the schedule has no actions"),
    (lambda: Schedule.custom([[]]), "the schedule has no actions"),
    (lambda: Schedule.custom("0F0 0B0"), "custom takes one list of actions per rank"),
    (lambda: simulate(None), r"expected a Schedule \(make_schedule"),
    (lambda: simulate("1f1b"), "expected a Schedule .*got str"),
    (lambda: simulate(make_schedule("1f1b", 2, 4), "fast"), "simulate's costs are a Costs"),
    (lambda: simulate(make_schedule("1f1b", 2, 4), Costs(forward="1")), "forward costs are one number, or one per "
                                                                        "stage; got '1'"),
    (lambda: simulate(make_schedule("1f1b", 2, 4), Costs(backward=True)), "backward costs are one number"),
    (lambda: simulate(make_schedule("1f1b", 2, 4), Costs(forward=[1.0, None])), "forward costs are one number"),
])
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
