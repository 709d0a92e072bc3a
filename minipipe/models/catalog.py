"""Which model a name means: one of the course's ("mlp", "gpt"), or your own (custom.py).

    make_task("gpt", depth=4)                       # a course model
    make_task("mypackage.mymodule:make_net")        # your own, by name ...
    make_task(MyNet)                                # ... or by value (also from a notebook cell)
"""
from __future__ import annotations

from .course import TASKS
from .custom import custom_task
from .task import Task


def task_of(run) -> Task:
    """The task of a run: anything with `model`, `batch_size`, `seed` and `model_args` (a RunConfig)."""
    return make_task(run.model, batch_size=run.batch_size, seed=run.seed, **run.model_args)


MAX_SEED = 2 ** 40 - 1


def make_task(model="mlp", batch_size: int = 32, seed: int = 0, **model_args) -> Task:
    """`make_task("mlp", width=64, depth=8)`, `make_task("gpt", depth=4, width=32)`, or your own
    model: `make_task("mypackage.mymodule:make_net", width=64)` or `make_task(MyNet)` (custom.py)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be a whole number from 0 to 2^40 - 1 = {MAX_SEED:,}, got {seed!r}: every rank draws "
                         f"the weights and the data from it (each step's data from seed · 1,000,003 + step, which "
                         f"torch's generator takes below 2^64)")
    if not (isinstance(model, str) and model in TASKS):
        return custom_task(model, batch_size, seed, model_args)
    cls = TASKS[model]
    fields = set(cls.__dataclass_fields__) - {"name", "batch_size", "seed"}
    unknown = set(model_args) - fields
    if unknown:
        raise ValueError(f"model {model!r} has no setting {', '.join(sorted(unknown))}; its settings are {', '.join(sorted(fields))}")
    for key, value in model_args.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"model setting {key} must be a whole number >= 1, got {value!r}")
    if model == "gpt" and model_args.get("width", 32) % model_args.get("heads", 2):
        raise ValueError(f"gpt width must be a multiple of heads, got width={model_args.get('width', 32)}, "
                         f"heads={model_args.get('heads', 2)}")
    return cls(name=model, batch_size=batch_size, seed=seed, **model_args)
