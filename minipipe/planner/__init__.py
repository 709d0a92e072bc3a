"""The planner: the fastest pipeline × tensor × data layouts of a real model on a real cluster,
predicted from shapes and published figures (no processes, no torch).

    from minipipe.planner import plan
    print(plan("gpt3-175b", gpus=1024, gpu="a100-80gb").table())

One concept per module, in the order they build on each other: shapes (a transformer's
parameters, bytes per parameter, FLOPs and activations), presets (published models and GPUs),
efficiency (the fractions of peak and bandwidth fitted on published runs), setup_and_layout (Setup and
Layout), footprint (the memory each GPU holds), compute (a block's cost from its matmuls' shapes), timing (the pipeline's closed
forms, and the simulator where they are only close), evaluate (one layout predicted), space (what
the search tries), advice (what would fit when nothing does), search (every layout, ranked),
report (the ranking as text and JSON), cli (`minipipe plan`), simulate (a layout replayed by
simulate_mesh), published (the runs it is fitted on and held to), efficiency_fit (the fit, and how far
to trust it). What recomputation keeps and redoes is minipipe/sim/recompute_costs.py, shared with
the simulator and the engine.
"""
from .evaluate import Row, evaluate
from .setup_and_layout import Layout, Setup, make_setup
from .presets import GPU, GPUS, MODELS
from .search import Layouts, layouts, plan
from .shapes import ModelShape

__all__ = ["plan", "layouts", "Layouts", "evaluate", "Row", "Layout", "Setup", "make_setup", "ModelShape", "GPU",
           "GPUS", "MODELS"]
