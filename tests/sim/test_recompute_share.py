"""The part of a stage's forward its backward runs again (Recompute.share, what lesson 11's measured
recomputation is held to): all of it, none, or the chosen layers' part by count or by their times."""

import pytest

from minipipe.sim.recompute_costs import parse

STAGE = [4, 5, 6, 7]  # the model's layers 4 to 7


@pytest.mark.parametrize(
    ("option", "share"), [("stage", 1.0), ("none", 0.0), ([5, 7], 0.5), ([5], 0.25), ([1, 2], 0.0)]
)
def test_by_count(option, share):
    assert parse(option).share(STAGE) == share


def test_by_the_layers_forward_times():
    assert parse([5, 7]).share(STAGE, [1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.0 + 4.0) / 10.0)
    assert parse("stage").share(STAGE, [1.0, 2.0, 3.0, 4.0]) == 1.0


def test_a_stage_with_nothing_to_run_again():
    assert parse("stage").share([]) == 0.0  # no layers
    assert parse([5]).share(STAGE, [0.0, 0.0, 0.0, 0.0]) == 0.0  # layers that take no time


@pytest.mark.parametrize(
    ("option", "said"), [("none", "none"), (True, "stage"), ("7, 5", "layers 5,7"), ([3], "layers 3")]
)
def test_an_option_reads_as_it_is_written(option, said):
    assert str(parse(option)) == said


def test_layers_as_text_are_separated_by_commas_alone():
    """'1, 2' (spaces around the commas) is layers 1 and 2; '1 2' is no list, not layer 12."""
    assert parse(" 1 , 2 ,").layers == parse("1,2").layers == parse([1, 2]).layers
    with pytest.raises(ValueError, match=r"^unknown recompute '1 2'; choose 'none', 'stage'"):
        parse("1 2")
