"""Which model a name means: one of the course's ("mlp", "gpt"), or your own (custom.py).

make_task("gpt", depth=4)                       # a course model
make_task("moe", experts=4, top_k=2)            # the GPT with mixture-of-experts blocks
make_task("mypackage.mymodule:make_net")        # your own, by name ...
make_task(MyNet)                                # ... or by value (also from a notebook cell)
"""

from __future__ import annotations

from .course import TASKS
from .custom import custom_task
from .task import Task


def check_moe_args(args: dict) -> None:
    """The mixture-of-experts settings that only make sense together."""
    experts, top_k = args.get("experts", 4), args.get("top_k", 2)
    if top_k > experts:
        raise ValueError(f"moe top_k={top_k} choices per token need at least as many experts, got experts={experts}")
    if args.get("capacity_factor", 1.25) <= 0:
        raise ValueError(
            f"moe capacity_factor must be > 0 (1.25 is Switch Transformer's; experts/top_k = "
            f"{experts / top_k:g} drops nothing), got {args['capacity_factor']!r}"
        )
    if args.get("moe_every", 2) > args.get("depth", 4):
        raise ValueError(
            f"moe moe_every={args['moe_every']} leaves no block of the {args.get('depth', 4)} a mixture "
            f"of experts; choose moe_every <= depth"
        )


def task_of(run) -> Task:
    """The task of a run: anything with `model`, `batch_size`, `seed` and `model_args` (a RunConfig)."""
    return make_task(run.model, batch_size=run.batch_size, seed=run.seed, **run.model_args)


MAX_SEED = 2**40 - 1


def make_task(model="mlp", batch_size: int = 32, seed: int = 0, **model_args) -> Task:
    """`make_task("mlp", width=64, depth=8)`, `make_task("gpt", depth=4, width=32)`, or your own
    model: `make_task("mypackage.mymodule:make_net", width=64)` or `make_task(MyNet)` (custom.py)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(
            f"seed must be a whole number from 0 to 2^40 - 1 = {MAX_SEED:,}, got {seed!r}: every rank draws "
            f"the weights and the data from it (each step's data from seed · 1,000,003 + step, which "
            f"torch's generator takes below 2^64)"
        )
    if not (isinstance(model, str) and model in TASKS):
        return custom_task(model, batch_size, seed, model_args)
    cls = TASKS[model]
    fields = set(cls.__dataclass_fields__) - {"name", "batch_size", "seed"}
    unknown = set(model_args) - fields
    if unknown:
        raise ValueError(
            f"model {model!r} has no setting {', '.join(sorted(unknown))}; its settings are {', '.join(sorted(fields))}"
        )
    floats = getattr(cls, "FLOAT_ARGS", ())
    for key, value in model_args.items():
        if key in floats:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"model setting {key} must be a number >= 0, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"model setting {key} must be a whole number >= 1, got {value!r}")
    if model in ("gpt", "moe") and model_args.get("width", 32) % model_args.get("heads", 2):
        raise ValueError(
            f"{model} width must be a multiple of heads, got width={model_args.get('width', 32)}, "
            f"heads={model_args.get('heads', 2)}"
        )
    if model == "moe":
        check_moe_args(model_args)
    return cls(name=model, batch_size=batch_size, seed=seed, **model_args)
