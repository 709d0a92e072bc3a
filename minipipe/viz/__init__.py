"""What learners see: plotly figures of a Trace and ipywidgets that drive the simulator or a run.

    from minipipe import make_schedule, simulate
    from minipipe.viz import timeline, animate, memory, compare, ScheduleExplorer
    timeline(simulate(make_schedule("1f1b", p=4, m=8)))

Needs the course extras (plotly; ipywidgets and anywidget for the widgets).
"""
from .timeline import OP_COLOR, animate, compare, memory, timeline

__all__ = ["timeline", "animate", "memory", "compare", "ScheduleExplorer", "RunExplorer", "OP_COLOR"]


def __getattr__(name):
    # The widgets import ipywidgets; the figures alone should not need it.
    if name in ("ScheduleExplorer", "RunExplorer"):
        from . import widgets

        return getattr(widgets, name)
    raise AttributeError(f"module 'minipipe.viz' has no attribute {name!r}")
