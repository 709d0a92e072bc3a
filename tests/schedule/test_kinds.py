"""The registry of schedule kinds: a kind declared once appears everywhere a kind can be chosen."""

import pytest

from minipipe import Kind, kinds, make_schedule, simulate, theory
from minipipe.schedule.generators import one_f_one_b


def reversed_warmup(p: int, m: int):
    """A toy kind for the tests: 1F1B's lists under another name (any valid generator will do)."""
    s = one_f_one_b(p, m)
    return type(s)("toy", s.p, s.m, s.v, s.actions, s.placement)


@pytest.fixture
def toy():
    kind = kinds.register(
        Kind(
            "toy",
            reversed_warmup,
            "a kind registered by a test",
            aliases=("toy-kind",),
            rules=(lambda p, m, v: "toy needs m >= 2" if m < 2 else None,),
        )
    )
    yield kind
    kinds.unregister("toy")
    assert "toy" not in kinds.names()


def test_a_registered_kind_is_generated_checked_and_simulated(toy):
    s = make_schedule("Toy-Kind", 3, 4)
    assert s.kind == "toy" and simulate(s).makespan == simulate(make_schedule("1f1b", 3, 4)).makespan
    with pytest.raises(ValueError, match="toy: toy needs m >= 2"):
        make_schedule("toy", 3, 1)
    with pytest.raises(ValueError, match="toy: v=2 stages per rank does not apply"):
        make_schedule("toy", 3, 4, 2)


def test_a_kind_without_formulas_has_no_theory_rather_than_another_kinds(toy):
    for formula, args in (
        (theory.bubble_fraction, (3, 4)),
        (theory.makespan, (3, 4)),
        (theory.peak_inflight, (3, 4, 0)),
    ):
        with pytest.raises(ValueError, match="'toy' has no textbook"):
            formula("toy", *args)


def test_a_registered_kind_appears_in_the_cli(toy, capsys):
    from minipipe.cli import main

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "toy: a kind registered by a test" in " ".join(capsys.readouterr().out.split())
    assert main(["simulate", "-s", "toy", "-p", "2", "-m", "4"]) == 0
    out = capsys.readouterr().out
    assert "simulated toy" in out and "theory" not in out  # no formula: no theory line at all
    assert main(["simulate", "-s", "1f1b", "-p", "2", "-m", "4"]) == 0
    assert "(theory 20.0%)" in capsys.readouterr().out


def test_a_registered_kind_appears_in_the_explorers_menu(toy):
    pytest.importorskip("ipywidgets")
    from minipipe.viz import ScheduleExplorer

    explorer = ScheduleExplorer(kind="toy", p=2, m=4)
    assert "toy" in explorer.controls["kind"].options
    assert explorer.error is None and explorer.trace.schedule.kind == "toy"
    assert explorer.controls["v"].disabled


def test_names_and_aliases_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="already names the kind '1f1b'"):
        kinds.register(Kind("one_f_one_b", reversed_warmup, "clash"))
    with pytest.raises(ValueError, match="unknown schedule 'zigzag'; choose one of naive, gpipe, 1f1b"):
        kinds.get("zigzag")


def test_a_registered_kind_appears_in_the_benchmark(toy):
    from minipipe.bench.sizes import QUICK_SIZES
    from minipipe.bench.suite import comparison, training_kinds

    assert "toy" in training_kinds() and "inference" not in training_kinds()  # serving kinds do not train
    labels = [
        c.label for c in comparison("small", QUICK_SIZES["small"], 4, rounds=1, warmup=0, with_torch=False).configs
    ]
    assert "minipipe toy" in labels and "contention (v=2)" in labels
