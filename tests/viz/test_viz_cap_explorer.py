"""The memory-cap widget (viz/cap_explorer.py): the slider shows the search's best under each cap, and
the exported page's picture holds every cap's timeline behind a slider of its own, not played on load."""

import json

from minipipe import Costs, simulate
from minipipe.viz.cap_explorer import CapExplorer, cap_figure, searched

COSTS = Costs(forward=1, backward=2, weight=1)


def test_the_slider_shows_the_best_schedule_under_each_cap():
    w = CapExplorer(4, 8, COSTS, caps=(1, 2, 4))
    assert w.slider.value == 4 and w.trace.makespan == w.found[4].makespan
    w.slider.value = 1
    assert w.trace.schedule is w.found[1].schedule
    assert max(x / 2 for x in w.trace.peak_inflight()) <= 1
    assert "cap 1 micro-batches a rank" in w.figure.layout.title.text
    assert f"bubble {simulate(w.found[1].schedule, COSTS).bubble():.1%}" in w.figure.layout.title.text
    assert w.found[1].makespan > w.found[4].makespan


def test_the_exported_picture_has_a_frame_and_a_step_per_cap_and_waits_for_the_reader():
    found = searched(2, 4, COSTS, (1, 2))
    fig = cap_figure(found, COSTS)
    assert [f.name for f in fig.frames] == ["1", "2"]
    assert [s["label"] for s in fig.layout.sliders[0].steps] == ["1", "2"]
    assert len(fig.frames[0].data) == len(fig.frames[1].data) == len(fig.data)  # the same bars, restyled
    assert fig.layout.xaxis.range[1] >= max(f.makespan for f in found.values())
    page = CapExplorer(2, 4, COSTS, caps=(1, 2), found=found).static_html()
    assert "Plotly.animate" not in page  # plotly plays frames on load unless told
    json.dumps(fig.to_plotly_json(), default=str)  # it serialises whole
