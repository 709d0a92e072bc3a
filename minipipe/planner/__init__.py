"""The planner: the fastest pipeline × tensor × data layouts of a real model on a real cluster,
predicted from shapes and published figures (no processes, no torch).

    from minipipe.planner import plan
    print(plan("gpt3-175b", gpus=1024, gpu="a100-80gb").table())

One concept per module, in the order they build on each other: shapes (a transformer's
parameters, FLOPs and activations), presets (published models and GPUs), layout (Setup and
Layout), memory, timing (the pipeline's closed form), evaluate (one layout predicted), search
(every layout, ranked), report (the ranking as text), cli (`minipipe plan`), simulate (a layout
replayed by the simulator), published (the runs the planner is calibrated on and held to).
"""
from .evaluate import Row, evaluate
from .layout import Layout, Setup, make_setup
from .presets import GPU, GPUS, MODELS
from .search import Layouts, layouts, plan
from .shapes import ModelShape

__all__ = ["plan", "layouts", "Layouts", "evaluate", "Row", "Layout", "Setup", "make_setup", "ModelShape", "GPU",
           "GPUS", "MODELS"]
