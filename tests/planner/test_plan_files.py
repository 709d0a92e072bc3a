"""`minipipe plan`'s model and GPU files, read against a schema: a typo is refused with the nearest
known key (never the default in silence), wrong types, ranges and non-finite numbers are refused,
a key given twice is refused, and no message repeats more than a short cut of what it was given.
Also --layout's words and the planner's bounds, each at the limit and one step either side."""

import json

import pytest

from minipipe import cli
from minipipe.planner import schema
from minipipe.planner.presets import GPU
from minipipe.planner.setup_and_layout import MAX_GPUS, make_setup
from minipipe.planner.shapes import ModelShape

MODEL = {"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq": 32}
CARD = {"name": "g", "memory_gb": 80, "peak_tflops": 312, "nvlink_gbs": 300, "network_gbs": 25}


def plan(capsys, tmp_path, model=None, gpu=None, *argv, text=None):
    args = ["plan", "--gpus", "8", "--batch", "64", "--top", "1", "--refine", "0"]
    if model is not None:
        (tmp_path / "model.json").write_text(text if text is not None else json.dumps(model))
        args += ["--model", str(tmp_path / "model.json")]
    if gpu is not None:
        (tmp_path / "gpu.json").write_text(json.dumps(gpu) if text is None or model is not None else text)
        args += ["--gpu", str(tmp_path / "gpu.json")]
    code = cli.main([*args, *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "change, said",
    [
        ({"layer": 3}, r"unknown key 'layer' \(did you mean 'layers'\?\); the keys are name, layers"),
        ({"kv_heads": 0}, "kv_heads must be a whole number >= 1, got 0"),
        ({"kv_heads": -4}, "kv_heads must be a whole number >= 1, got -4"),
        ({"ffn": 0}, "ffn must be a whole number >= 1, got 0"),
        ({"gated": "yes"}, "gated must be true or false, got 'yes'"),
        ({"layers": "2"}, "layers must be a whole number >= 1, got '2'"),
        ({"layers": 2.0}, "layers must be a whole number >= 1, got 2.0"),
        ({"layers": True}, "layers must be a whole number >= 1, got True"),
        ({"norm": "batchnorm"}, "norm must be one of layernorm, rmsnorm, got 'batchnorm'"),
        ({"batch": 0}, "batch must be a whole number >= 1, got 0"),
        ({"heads": 3}, "hidden=64 must be a multiple of heads=3"),
        ({"name": 7}, "name must be a string, got 7"),
    ],
)
def test_a_model_file_is_read_against_its_schema(capsys, tmp_path, change, said):
    code, err = plan(capsys, tmp_path, {**MODEL, **change})
    assert code == 2 and "model.json" in err
    assert __import__("re").search(said, err), err


@pytest.mark.parametrize("kv_heads, fine", [(0, False), (1, True), (2, True)])
def test_a_whole_number_key_at_its_lowest(capsys, tmp_path, kv_heads, fine):
    code, err = plan(capsys, tmp_path, {**MODEL, "kv_heads": kv_heads})
    assert (code != 2) == fine, err


@pytest.mark.parametrize("value, fine", [("inf", False), ("nan", False), ("-inf", False), ("312.0", True)])
def test_a_toml_file_may_say_inf_but_a_figure_may_not_be(capsys, tmp_path, value, fine):
    """TOML, unlike JSON, has inf and nan: the schema's finiteness refuses them."""
    (tmp_path / "gpu.toml").write_text(
        f'name = "g"\nmemory_gb = 80\npeak_tflops = {value}\nnvlink_gbs = 300\nnetwork_gbs = 25\n'
    )
    code = cli.main(
        ["plan", "--gpus", "8", "--batch", "64", "--top", "1", "--refine", "0", "--gpu", str(tmp_path / "gpu.toml")]
    )
    err = capsys.readouterr().err
    assert (code != 2) == fine, err
    if not fine:
        assert f"gpu.toml: peak_tflops must be a finite number > 0, got {value}" in err, err


def test_a_model_file_missing_a_needed_key_says_which(capsys, tmp_path):
    code, err = plan(capsys, tmp_path, {k: v for k, v in MODEL.items() if k != "seq"})
    assert code == 2 and "needs seq too" in err


@pytest.mark.parametrize(
    "change, said",
    [
        ({"hbm_gbps": 2000}, "unknown key 'hbm_gbps' (did you mean 'hbm_gbs'?)"),
        ({"gpus_per_nodes": 4}, "unknown key 'gpus_per_nodes' (did you mean 'gpus_per_node'?)"),
        ({"memory_gb": True}, "memory_gb must be a finite number > 0, got True"),
        ({"memory_gb": "80"}, "memory_gb must be a finite number > 0, got '80'"),
        ({"memory_gb": 0}, "memory_gb must be a finite number > 0, got 0"),
        ({"gpus_per_node": 0}, "gpus_per_node must be a whole number >= 1, got 0"),
        ({"hbm_gbs": -1}, "hbm_gbs must be a finite number > 0, got -1"),
    ],
)
def test_a_gpu_file_is_read_against_its_schema(capsys, tmp_path, change, said):
    code, err = plan(capsys, tmp_path, None, {**CARD, **change})
    assert code == 2 and said in err, err


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"name": "g", "memory_gb": 80, "peak_tflops": Infinity}', "Infinity is not a number the planner can use"),
        ('{"name": "g", "memory_gb": NaN}', "NaN is not a number the planner can use"),
        ('{"memory_gb": 80, "memory_gb": 40}', "key 'memory_gb' is given twice; keep one"),
        ("[1, 2]", "must hold one table of keys"),
        ('{"memory_gb": 80,', "is not JSON: "),
    ],
)
def test_what_json_allows_but_a_figure_cannot_be_is_refused(capsys, tmp_path, text, said):
    code, err = plan(capsys, tmp_path, None, CARD, text=text)
    assert code == 2 and said in err and "gpu.json" in err, err


def test_a_file_that_is_not_there_is_bad_input(capsys, tmp_path):
    code = cli.main(["plan", "--model", str(tmp_path / "nowhere.json")])
    assert code == 2 and "nowhere.json: no such file" in capsys.readouterr().err


def test_a_huge_value_gives_a_short_message(capsys, tmp_path):
    """A string where a number belongs once gave a message of two billion characters ("80" * 10**9)."""
    code, err = plan(capsys, tmp_path, None, {**CARD, "memory_gb": "8" * 10**6})
    assert code == 2 and len(err) < 300, len(err)
    code, err = plan(capsys, tmp_path, {**MODEL, "x" * 10**6: 1})
    assert code == 2 and len(err) < 600, len(err)


@pytest.mark.parametrize("length", [schema.SHOWN - 1, schema.SHOWN, schema.SHOWN + 1])
def test_a_shown_value_is_cut_at_its_limit(length):
    text = "a" * (length - 2)  # repr adds two quotes
    out = schema.shown(text)
    assert len(out) == min(length, schema.SHOWN)
    assert out.endswith("...") == (length > schema.SHOWN)


def test_the_same_checks_guard_the_python_api():
    with pytest.raises(ValueError, match="kv_heads must be a whole number >= 1"):
        ModelShape("x", 2, 64, 4, 100, 32, kv_heads=0)
    with pytest.raises(ValueError, match="gated must be True or False"):
        ModelShape("x", 2, 64, 4, 100, 32, gated="yes")
    assert ModelShape("x", 2, 64, 4, 100, 32, kv_heads=1).kv == 1  # the limit itself
    with pytest.raises(ValueError, match="GPU peak must be a finite number > 0, got inf"):
        GPU("g", 80e9, float("inf"), 1, 1, 8, "")
    with pytest.raises(ValueError, match="hbm must be"):
        GPU("g", 80e9, 1e12, 1, 1, 8, "", hbm=float("inf"))


@pytest.mark.parametrize("gpus, fine", [(MAX_GPUS - 1, True), (MAX_GPUS, True), (MAX_GPUS + 1, False)])
def test_the_gpus_are_bounded_at_the_limit(gpus, fine):
    if fine:
        assert make_setup("gpt3-175b", gpus, "a100-80gb").gpus == gpus
    else:
        with pytest.raises(ValueError, match=r"gpus must be a whole number from 1 to 1,048,576 .*got 1048577"):
            make_setup("gpt3-175b", gpus, "a100-80gb")


@pytest.mark.parametrize(
    "layout, said",
    [
        ("tp=0,pp=8", "--layout tp must be one whole number >= 1, got '0'"),
        ("tp=8,pp=0", "--layout pp must be one whole number >= 1, got '0'"),
        ("tp=8,tp=4", "--layout gives tp twice (tp=8, tp=4); keep one"),
        ("mb=1,micro_batch=2", "--layout gives micro_batch twice (mb=1, micro_batch=2); keep one"),
        ("zero=-1", "--layout zero must be one whole number >= 0, got '-1'"),
    ],
)
def test_a_layout_with_a_zero_or_a_repeated_key_says_which(capsys, layout, said):
    code = cli.main(["plan", "--model", "gpt3-175b", "--gpus", "512", "--layout", layout, "--refine", "0"])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err


@pytest.mark.parametrize("refine, code", [(-1, 2), (0, 0)])
def test_refine_is_refused_below_zero(capsys, refine, code):
    assert cli.main(["plan", "--model", "gpt3-175b", "--gpus", "64", "--refine", str(refine), "--top", "1"]) == code


def test_a_toml_file_without_tomllib_asks_for_json(tmp_path, monkeypatch):
    """Python 3.10 has no tomllib: the file is refused with what to give instead."""
    import sys

    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib now raises ImportError
    (tmp_path / "m.toml").write_text('name = "x"\n')
    with pytest.raises(
        ValueError, match=r"^reading .*m\.toml needs Python 3\.11's tomllib; give a \.json file instead$"
    ):
        schema.read(str(tmp_path / "m.toml"))
