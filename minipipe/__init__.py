"""minipipe: pipeline parallelism you can read, simulate and run.

    from minipipe import make_schedule, simulate
    trace = simulate(make_schedule("1f1b", p=4, m=8))
    print(trace.summary())
"""
from . import theory
from .schedule import Action, Schedule, gpipe, grid, interleaved_1f1b, make_schedule, naive, one_f_one_b
from .simulate import Costs, simulate
from .trace import Event, Trace, Wait
from .validate import ScheduleError, validate

__all__ = [
    "Action", "Schedule", "make_schedule", "naive", "gpipe", "one_f_one_b", "interleaved_1f1b", "grid",
    "validate", "ScheduleError", "simulate", "Costs", "Trace", "Event", "Wait", "theory",
]
