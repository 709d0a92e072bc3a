"""What learners see: plotly figures of a Trace and ipywidgets that drive the simulator or a run.

    from minipipe import make_schedule, simulate
    from minipipe.viz import timeline, animate, memory, compare, ScheduleExplorer
    timeline(simulate(make_schedule("1f1b", p=4, m=8)))

cap_explorer.py (CapExplorer) drags a memory cap and shows the best schedule the search finds under it.

Needs the course extras (plotly; ipywidgets and anywidget for the widgets). Importing this in a
Jupyter kernel makes figures and widgets readable in exported HTML pages too (offline.py).
"""

from .bars import OP_COLOR
from .inflight import memory
from .offline import embed_plotly
from .style import OKABE_ITO, TEMPLATE
from .timeline import animate, compare, timeline

# Inside a Jupyter kernel, figures also carry HTML (plotly.js embedded once per notebook), so an
# exported page shows them offline; JupyterLab still draws plotly's own mimetype.
embed_plotly()

__all__ = [
    "timeline",
    "animate",
    "memory",
    "compare",
    "ScheduleExplorer",
    "RunExplorer",
    "OP_COLOR",
    "OKABE_ITO",
    "TEMPLATE",
]


def __getattr__(name):
    # The widgets import ipywidgets; the figures alone should not need it.
    if name == "ScheduleExplorer":
        from .widgets import ScheduleExplorer

        return ScheduleExplorer
    if name == "RunExplorer":
        from .run_explorer import RunExplorer

        return RunExplorer
    raise AttributeError(f"module 'minipipe.viz' has no attribute {name!r}")
