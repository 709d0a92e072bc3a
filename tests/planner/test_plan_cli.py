"""`minipipe plan` answers a practitioner's questions: the ranking, a given layout's place and why,
their own model and GPU (flags or a TOML/JSON file), filters, JSON for scripts; and it answers
honestly: non-zero when nothing fits, with what would, and bad node sizes refused."""

import argparse
import json
import re

import pytest

from minipipe import cli
from minipipe.planner.cli import add_arguments, parse_layout
from minipipe.planner.setup_and_layout import make_setup


def run(capsys, *argv):
    code = cli.main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_ranking_is_printed_with_its_assumptions(capsys):
    code, out, _ = run(
        capsys, "--model", "gpt3-175b", "--gpus", "1024", "--gpu", "a100-80gb", "--top", "5", "--refine", "2"
    )
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("GPT-3 175B on 1024 × A100 SXM 80GB")
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#"))
    assert all(w in lines[header] for w in ("MFU", "bubble", "zero", "params grads optim activ"))
    assert [line.split()[0] for line in lines[header + 1 : header + 6]] == ["1", "2", "3", "4", "5"]
    assert "assumptions:" in out and "closest misses" in out and "kept free" in out
    # the columns' legend: what ≈ and each part of the step mean
    legend = lines[lines.index("assumptions:") - 1]
    assert legend.startswith("step s: ≈ timed by a closed form that is close (within a few per cent), s replayed")
    assert "dp s: the step-end gradient reduction" in legend
    code, _, err = run(capsys, "--model", "gpt-9")
    assert code == 2 and "unknown model 'gpt-9'" in err


def test_a_given_layout_is_scored_and_placed(capsys):
    code, out, _ = run(
        capsys,
        "--model",
        "gpt3-175b",
        "--gpus",
        "1024",
        "--layout",
        "tp=8,pp=8,dp=16,v=3,mb=1,recompute=selective",
        "--refine",
        "2",
        "--top",
        "3",
    )
    assert code == 0
    first = out.split("\n\n")[0]
    assert first.startswith("tp=8,pp=8,dp=16,cp=1,mb=1,m=96,schedule=interleaved,v=3,recompute=selective,zero=0:")
    assert "place " in first and "cut " in first and "the best:" in first and "yours takes +" in first
    assert "bubble" in first  # where it differs from the best, part by part
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--gpus", "512", "--layout", "tp=1,pp=1,mb=1", "--refine", "0")
    assert code == 1 and "it does not fit: needs" in out  # a layout that does not fit: said, exit 1
    with pytest.raises(ValueError, match="--layout"):
        parse_layout("tp=8,pipeline=8", make_setup("gpt3-175b", 1024, "a100-80gb"))
    with pytest.raises(ValueError, match="must divide"):
        parse_layout("tp=3", make_setup("gpt3-175b", 1024, "a100-80gb"))
    with pytest.raises(ValueError, match="--layout tp takes whole numbers, comma-separated; got 'eight'"):
        parse_layout("tp=eight", make_setup("gpt3-175b", 1024, "a100-80gb"))
    # dp by default: the GPUs over tp·pp·cp where it divides them (8 over 2·2), refused where not (6 over 4)
    assert parse_layout("tp=2,pp=2", make_setup("gpt3-175b", 8, "a100-80gb")).dp == 2
    with pytest.raises(ValueError, match="tp·pp·cp = 4 must divide the 6 GPUs"):
        parse_layout("tp=2,pp=2", make_setup("gpt3-175b", 6, "a100-80gb"))


def test_your_own_model_and_gpu_from_flags_and_files(capsys, tmp_path, monkeypatch):
    code, out, _ = run(
        capsys,
        "--layers",
        "40",
        "--hidden",
        "5120",
        "--heads",
        "40",
        "--vocab",
        "32000",
        "--seq",
        "4096",
        "--batch",
        "512",
        "--gpus",
        "128",
        "--gpu",
        "h100-sxm",
        "--refine",
        "0",
    )
    assert code == 0 and out.startswith("your model on 128 × H100")
    model = tmp_path / "my_model.toml"
    model.write_text(
        'name = "Mine 13B"\nlayers = 40\nhidden = 5120\nheads = 40\nkv_heads = 8\nffn = 13824\n'
        'vocab = 32000\nseq = 4096\ngated = true\nbias = false\nnorm = "rmsnorm"\npositions = "rotary"\n'
        'tied_head = false\ndropout = false\nattention = "fused"\nbatch = 512\n'
    )
    gpu = tmp_path / "my_gpu.json"
    gpu.write_text(
        json.dumps(
            {
                "name": "Card X",
                "memory_gb": 96,
                "peak_tflops": 800,
                "nvlink_gbs": 400,
                "network_gbs": 50,
                "hbm_gbs": 4000,
                "gpus_per_node": 4,
            }
        )
    )
    code, out, _ = run(capsys, "--model", str(model), "--gpu", str(gpu), "--gpus", "64", "--refine", "0", "--json")
    answer = json.loads(out)
    assert code == 0 and answer["setup"]["model"] == "Mine 13B" and answer["setup"]["gpu"] == "Card X"
    assert answer["setup"]["gpus_per_node"] == 4 and answer["rows"] and answer["assumptions"]
    monkeypatch.chdir(tmp_path)  # a file in the working folder, named without a folder, is read as a file
    code, out, _ = run(capsys, "--model", model.name, "--gpu", gpu.name, "--gpus", "64", "--refine", "0", "--json")
    assert code == 0 and json.loads(out)["setup"] == answer["setup"]
    code, _, err = run(capsys, "--model", str(model), "--gpu", str(gpu), "--gpus", "64", "--peak-tflops", "-1")
    assert code == 2 and "peak" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "half", "memory_gb": 80}))
    code, _, err = run(capsys, "--gpu", str(bad))
    assert code == 2 and "peak_tflops" in err


def test_filters_narrow_the_search(capsys):
    code, out, _ = run(
        capsys,
        "--model",
        "llama2-70b",
        "--gpus",
        "256",
        "--gpu",
        "h100-sxm",
        "--max-tp",
        "4",
        "--schedules",
        "1f1b",
        "--zero",
        "1",
        "--micro-batch",
        "1,2",
        "--refine",
        "0",
        "--json",
        "--top",
        "50",
    )
    rows = json.loads(out)["rows"]
    assert code == 0 and rows
    assert all(r["tp"] <= 4 and r["schedule"] == "1f1b" and r["zero"] == 1 and r["micro_batch"] in (1, 2) for r in rows)


def test_nothing_fits_exits_non_zero_and_says_what_would(capsys):
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--gpus", "8", "--refine", "0")
    assert code == 1 and "nothing fits" in out and "what would fit:" in out
    assert "GPUs (--gpus " in out and "closest misses (do not fit):" in out.splitlines() and "optimizer" in out
    # every layout left out before predicting (no dp divides the batch): the misses are still listed
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--gpus", "1000", "--batch", "1001", "--refine", "0")
    assert code == 1 and "closest misses" in out and "rounded up" in out and "GiB" in out
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--gpus", "8", "--refine", "0", "--json")
    answer = json.loads(out)
    assert code == 1 and answer["fits"] is False and answer["suggestions"] and answer["misses"]


@pytest.mark.parametrize("value", ["0", "-8"])
def test_a_bad_node_size_is_refused(capsys, value):
    code, _, err = run(capsys, "--gpus-per-node", value)
    assert code == 2 and "gpus_per_node must be a whole number >= 1" in err


def test_the_accuracy_table_is_one_command(capsys):
    code, out, _ = run(capsys, "--accuracy", "--json")
    rows = json.loads(out)
    assert code == 0 and {r["group"] for r in rows} >= {"Narayanan et al. 2021, Table 1 (A100)"}
    assert any(r["calibrates"] for r in rows) and any(not r["calibrates"] for r in rows)
    assert all(r["error"] == pytest.approx(r["predicted"] / r["published"] - 1) for r in rows)  # a property: kept
    code, table, _ = run(capsys, "--accuracy")  # without --json: the table, by publication
    assert code == 0 and table.startswith("Narayanan et al. 2021, Table 1 (A100):\n  run")
    lines = table.splitlines()
    assert lines[-1].startswith(
        "TFLOP/s per GPU as each publication counts it; the fractions of peak and bandwidth fitted on the "
        "calibration runs: "
    )
    for r in rows:  # each run's line: its figures, then its role and its layout
        role = "calibration" if r["calibrates"] else "held out"
        line = f"{r['published']:>10.1f}{r['predicted']:>10.1f}{r['error']:>+8.1%}  {role:<12} {r['layout']}"
        assert f"  {r['name']:<44}{line}" in lines


@pytest.mark.parametrize("option", ["--zero", "--micro-batch", "--cp", "--ep"])
def test_a_list_option_that_is_not_whole_numbers_is_refused_by_its_name(capsys, option):
    code, _, err = run(capsys, "--model", "gpt3-175b", "--gpus", "64", option, "1,two")
    assert code == 2 and f"{option} takes whole numbers, comma-separated; got '1,two'" in err


def test_every_option_says_what_it_does():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    undocumented = [a.option_strings for a in parser._actions if a.option_strings and not (a.help or "").strip()]
    assert undocumented == []
    # a help that states a number as its default states the one used
    stated = {
        a.dest: (m[1], a.default) for a in parser._actions if (m := re.search(r"\(default ([\d.]+)\)", a.help or ""))
    }
    assert {"top", "gpus", "max_v"} <= set(stated)
    assert {k: float(said) for k, (said, _) in stated.items()} == {k: float(used) for k, (_, used) in stated.items()}
    # a help that sends the reader to another option names one there is
    options = {o for a in parser._actions for o in a.option_strings}
    pointed = {m for a in parser._actions for m in re.findall(r"see (--[a-z-]+)", a.help or "")}
    assert "--accuracy" in pointed and pointed <= options


def test_every_degree_a_layout_names_is_taken():
    setup = make_setup("gpt3-175b", 64, "a100-80gb")
    lay = parse_layout("tp=2,pp=4,cp=2,mb=1,m=16,schedule=interleaved,v=3,recompute=full,zero=1", setup)
    assert (lay.tp, lay.pp, lay.cp, lay.dp, lay.micro_batch, lay.m) == (2, 4, 2, 4, 1, 16)
    assert (lay.schedule, lay.v, lay.recompute, lay.zero) == ("interleaved", 3, "full", 1)


def test_a_given_layouts_places_are_in_the_json_where_it_fits(capsys):
    """--json's "place" (among every layout) and "cut_place" (among its cut's): numbers where the layout
    fits, null where it does not."""
    args = ("--model", "gpt3-175b", "--refine", "0", "--json")
    code, out, _ = run(capsys, *args, "--gpus", "1024", "--layout", "tp=8,pp=8,dp=16,v=3,mb=1,recompute=selective")
    given = json.loads(out)["layout"]
    assert code == 0 and isinstance(given["place"], int) and 1 <= given["cut_place"] <= given["place"]
    code, out, _ = run(capsys, *args, "--gpus", "512", "--layout", "tp=1,pp=1,mb=1")
    given = json.loads(out)["layout"]
    assert code == 1 and (given["place"], given["cut_place"]) == (None, None)


def test_the_help_is_held_whole(snapshot, monkeypatch):
    """What `minipipe plan --help` tells a user, each flag's default and meaning: a change to it is
    read in the snapshot's diff (`pytest tests/planner/test_plan_cli.py --snapshot-update`)."""
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    parser = argparse.ArgumentParser(prog="minipipe plan")
    add_arguments(parser)
    assert parser.format_help() == snapshot


def test_a_rows_json_names_each_of_its_figures_for_scripts(snapshot):
    """The keys of `--json`'s rows are what scripts read: held whole, each value the row's own."""
    from minipipe.planner.evaluate import evaluate
    from minipipe.planner.setup_and_layout import Layout

    setup = make_setup("gpt3-2.7b", 8, "h100-sxm", batch=64)
    row = evaluate(setup, Layout(2, 2, 2, 1, 32))
    out = row.as_dict()
    assert list(out) == snapshot
    for key in ("fits", "tight", "timed", "memory_rank", "mfu", "hfu", "bubble"):
        assert out[key] == getattr(row, key), key
    assert (out["step_s"], out["usable_bytes"], out["tflops_per_gpu"]) == (row.step, row.usable, row.tflops)


@pytest.mark.parametrize(("timed", "mark"), [("simulated", "s"), ("closed form (close)", "≈"), ("closed form", " ")])
def test_a_rows_step_is_marked_by_how_it_was_timed(timed, mark):
    """The legend's marks: s replayed on the simulator, ≈ a closed form that is close, none exact."""
    from dataclasses import replace

    from minipipe.planner import Layout, evaluate
    from minipipe.planner.report import line

    row = evaluate(make_setup("gpt3-2.7b", 8, "h100-sxm", batch=8), Layout(1, 2, 4, 1, 2))
    assert f"{row.step:>8.2f}{mark}{row.tflops:>9.1f}" in line(1, replace(row, timed=timed))


def test_the_answers_json_keys_are_held_whole(capsys):
    """`--json`'s top level, as scripts read it: the rows, the misses, what was skipped and why, the rest."""
    code, out, _ = run(capsys, "--model", "gpt3-2.7b", "--gpus", "8", "--batch", "64", "--refine", "0", "--json")
    answer = json.loads(out)
    assert code == 0 and {"rows", "misses", "suggestions", "skipped", "assumptions"} <= set(answer)
    assert set(answer["setup"]) == {
        "model", "gpus", "gpu", "gpus_per_node", "batch", "seq", "precision", "optimizer", "memory_reserve",
        "usable_bytes",
    }  # fmt: skip
