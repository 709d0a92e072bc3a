"""The layout comparison: every layout of a world size, run for real, the same losses, PP's bytes
below TP's, the formulas beside the counts; its table, figure and widget."""

import pytest

from minipipe.compare import Layout, configs, layouts, table

GPT = {"width": 32, "depth": 4, "heads": 2, "block": 8, "vocab": 16}
MOE = {"width": 16, "depth": 2, "heads": 2, "block": 8, "vocab": 16, "experts": 4, "moe_every": 1}


def test_layouts_are_every_factorisation():
    assert [lay.name for lay in layouts(4)] == ["PP4", "PP2×DP2", "PP2×TP2", "DP4", "DP2×TP2", "TP4"]
    assert "PP2×DP2×TP2" in [lay.name for lay in layouts(8)]
    assert all(lay.p * lay.dp * lay.tp == 12 for lay in layouts(12))


def test_layouts_of_a_mixture_of_experts_add_ep_borrowed_from_dp():
    names = [lay.name for lay in layouts(4, experts=True)]
    assert names == [
        "PP4",
        "PP2×DP2",
        "PP2×DP2×EP2",
        "PP2×TP2",
        "DP4",
        "DP4×EP2",
        "DP4×EP4",
        "DP2×TP2",
        "DP2×EP2×TP2",
        "TP4",
    ]
    assert all(lay.dp % lay.ep == 0 for lay in layouts(12, experts=True))
    fits, skipped = configs(4, model="moe", model_args={**MOE, "experts": 2}, m=2, batch_size=16)
    assert "DP4×EP4" in skipped and "does not divide the 2 experts" in skipped["DP4×EP4"]
    assert ("DP4×EP2", 2) in [(Layout(c.p, c.dp, c.tp, c.cp, c.ep).name, c.ep) for c in fits]


def test_layouts_with_context_parallelism_are_every_factorisation_too():
    names = [lay.name for lay in layouts(4, cp=True)]
    assert names == ["PP4", "PP2×DP2", "PP2×CP2", "PP2×TP2", "DP4", "DP2×CP2", "DP2×TP2", "CP4", "CP2×TP2", "TP4"]
    assert all(lay.world == 8 for lay in layouts(8, cp=True)) and "PP2×CP2×TP2" in [
        lay.name for lay in layouts(8, True)
    ]
    assert [lay.name for lay in layouts(4, cp=True) if lay.cp == 1] == [lay.name for lay in layouts(4)]


def test_layouts_that_do_not_fit_say_why():
    fits, skipped = configs(4, model="gpt", model_args=GPT, m=4, batch_size=8)
    assert "TP4" in skipped and "heads" in skipped["TP4"]  # 2 heads cannot be split 4 ways
    assert "DP4" in skipped and "batch_size=8" in skipped["DP4"]  # 8 rows are not 4 replicas × 4 micro-batches
    assert {(c.p, c.dp, c.tp) for c in fits} == {(4, 1, 1), (2, 2, 1), (2, 1, 2), (1, 2, 2)}
    _, skipped = configs(4, model="mlp", model_args={"width": 16, "depth": 4}, cp=True)
    assert "CP4" in skipped and "no sequence to split" in skipped["CP4"]


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_every_layout_of_two_processes_same_losses_fewer_pipeline_bytes(capsys):
    from minipipe.cli import main
    from minipipe.compare import compare, sent_by_axis

    rows = compare(2, model="gpt", model_args=GPT, m=2, batch_size=8, steps=2, cp=True)
    names = [row.layout.name for row in rows]
    assert names == ["PP2", "DP2", "CP2", "TP2"]
    for row in rows[1:]:
        assert row.losses == pytest.approx(rows[0].losses, rel=1e-5)
    for row in rows:
        assert row.sent == pytest.approx(row.formula, rel=1e-12)
        assert row.step_ms > 0 and 0 <= row.idle < 1
        assert all(m.parameters > 0 for m in row.memory)
    pp, dp, cp, tp = rows
    assert sent_by_axis(pp)["pp"] == pp.total_sent < tp.total_sent == sent_by_axis(tp)["tp"]
    assert dp.total_sent == sent_by_axis(dp)["dp"]
    assert cp.total_sent == sent_by_axis(cp)["cp"] + sent_by_axis(cp)["dp"] and sent_by_axis(cp)["cp"] > 0
    text = table(rows)
    assert text.count(" =") == 5 and "≠" not in text and "CP KiB" in text
    assert "CP KiB" not in table([pp, dp, tp])
    # the terminal prints the same table
    assert (
        main(
            [
                "compare",
                "--world",
                "2",
                "-m",
                "2",
                "--batch-size",
                "8",
                "--steps",
                "1",
                "--model-arg",
                "width=32",
                "--model-arg",
                "heads=2",
                "--model-arg",
                "vocab=16",
                "--model-arg",
                "block=8",
                "--model-arg",
                "depth=4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "PP2" in out and "DP2" in out and "TP2" in out


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_two_processes_of_a_mixture_of_experts_experts_split_or_whole_same_losses():
    from minipipe.compare import compare, sent_by_axis

    rows = compare(2, model="moe", model_args=MOE, m=2, batch_size=8, steps=2)
    assert [row.layout.name for row in rows] == ["PP2", "DP2", "DP2×EP2", "TP2"]
    pp, dp, ep, tp = rows
    for row in rows:
        assert row.sent == pytest.approx(row.formula, rel=1e-12)
    # capacity is per routing group, the tokens one rank holds for one micro-batch: layouts that
    # cut the batch alike drop alike and train alike; dp's halves route (and drop) otherwise
    assert tp.losses == pytest.approx(pp.losses, rel=1e-5) and ep.losses == pytest.approx(dp.losses, rel=1e-5)
    assert dp.losses != pytest.approx(pp.losses, rel=1e-5)
    assert sent_by_axis(dp)["ep"] == 0 < sent_by_axis(ep)["ep"]
    assert sent_by_axis(ep)["dp"] < sent_by_axis(dp)["dp"]  # half the experts each: fewer gradients averaged
    text = table(rows)
    assert "EP KiB" in text and text.count(" =") == 5 and "≠" not in text


def fake_rows():
    from minipipe.compare import Layout, Row
    from minipipe.parallel.accounting import Memory
    from minipipe.traffic import KINDS

    def row(p, dp, tp, **sent):
        sent = {k: float(sent.get(k.name.lower(), 0)) for k in KINDS}
        return Row(
            Layout(p, dp, tp),
            None,
            10.0 * (p + tp),
            0.2,
            sent,
            dict(sent),
            [Memory(100, 100, 200, 50)] * (p * dp * tp),
            [1.0, 0.5],
        )

    return [row(2, 1, 1, pp_activation=1024, pp_gradient=1024), row(1, 1, 2, tp_all_reduce=8192)]


def test_figure_has_every_layout_and_kind():
    pytest.importorskip("plotly")
    import plotly.graph_objects as go

    from minipipe.viz.layouts import layouts_figure

    fig = layouts_figure(fake_rows())
    go.Figure(fig.to_dict())  # plotly's own validation
    names = {t.name for t in fig.data}
    assert {"pp activation", "pp gradient", "tp all-reduce", "formula (total)", "parameters", "activations"} <= names
    from minipipe.traffic import TrafficKind

    colour = {t.name: t.marker.color for t in fig.data}
    assert colour["tp all-reduce"] == TrafficKind.TP_ALL_REDUCE.colour  # the timeline's colour for the kind
    assert colour["pp activation"] == TrafficKind.PP_ACTIVATION.colour
    assert list(fig.data[0].x) == ["PP2", "TP2"]


def test_widget_runs_and_draws_without_processes():
    pytest.importorskip("ipywidgets")
    from minipipe.viz.compare_widget import LayoutExplorer

    calls = []

    def runner(world, **settings):
        calls.append((world, settings["m"], settings["model_args"]["width"]))
        return fake_rows()

    ex = LayoutExplorer(world=2, width=16, m=2, background=False, runner=runner)
    ex.run()
    assert calls == [(2, 2, 16)] and ex.error is None and ex.rows is not None
    assert ex.static_figures()[0] is ex.figure and len(ex.figure.data) > 3

    def broken(world, **settings):
        raise ValueError("no such layout")

    ex.runner = broken
    ex.run()
    assert "no such layout" in ex.error and "failed" in ex.status.value
