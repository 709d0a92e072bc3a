"""minipipe: pipeline parallelism you can read, simulate and run.

from minipipe import make_schedule, simulate
trace = simulate(make_schedule("1f1b", p=4, m=8))
print(trace.summary())

from minipipe import run, RunConfig
result = run(RunConfig(schedule="1f1b", p=2, m=4, steps=20))   # real processes
"""

import importlib

from .schedule import kinds, theory
from .schedule.generators import gpipe, interleaved_1f1b, naive, one_f_one_b, zb_h1
from .schedule.ir import Schedule, grid
from .schedule.kinds import Kind, make_schedule, register
from .schedule.ops import OPS, Action, OpType
from .schedule.validate import ScheduleError, validate
from .sim.costs import Costs
from .sim.pipeline import simulate
from .trace import CollectiveEvent, Event, Trace, Wait

__all__ = [
    "Action",
    "OPS",
    "OpType",
    "Schedule",
    "make_schedule",
    "kinds",
    "Kind",
    "register",
    "naive",
    "gpipe",
    "one_f_one_b",
    "interleaved_1f1b",
    "zb_h1",
    "grid",
    "validate",
    "ScheduleError",
    "simulate",
    "Costs",
    "Trace",
    "Event",
    "Wait",
    "CollectiveEvent",
    "theory",
    "run",
    "run_many",
    "RunConfig",
    "RunResult",
    "WorkerError",
    "make_task",
]

# The engine needs torch; the schedules, the simulator and the CLI's `simulate` do not, so the
# engine is imported on first use.
_LAZY = {
    "run": "engine.launch",
    "run_many": "engine.launch",
    "RunResult": "engine.launch",
    "WorkerError": "engine.diagnosis",
    "RunConfig": "engine.config",
    "make_task": "models",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'minipipe' has no attribute {name!r}")
