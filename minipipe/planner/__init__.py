"""The planner: the fastest pipeline × tensor × data (× context × expert) layouts of a real model on a real cluster,
predicted from shapes and published figures (no processes, no torch).

    from minipipe.planner import plan
    print(plan("gpt3-175b", gpus=1024, gpu="a100-80gb").table())

One concept per module, in the order they build on each other:

    shapes            a transformer's parameters, bytes per parameter, FLOPs and activations
    presets           published models and GPUs
    moe_shape         a mixture-of-experts model's experts and latent attention, as data
    experts           mixture-of-experts shapes (Mixtral 8x7B, DeepSeek-V3): parameters, experts per
                      GPU over ep, the all-to-all's bytes and time (what the search adds per MoE block)
    efficiency        the fractions of peak and bandwidth fitted on published runs
    setup_and_layout  Setup (what is planned) and Layout (one way to run it), the links each axis uses
    footprint         the memory each GPU of a layout holds, by kind
    compute           a block's and the head's compute from their matmuls' shapes
    block_time        a block's time with what its tp, cp and ZeRO collectives expose
    timing            the pipeline's closed forms, and the simulator where they are only close
    step_end          the gradient reduction over data parallelism and the optimizer step
    prediction        Row: one layout's prediction
    evaluate          one layout predicted (Predictor: what many layouts share, worked out once)
    space             what the search tries
    advice            what would fit when nothing does
    search            every layout, ranked
    searched          a schedule searched for a layout where its memory holds more than its kind keeps
    report            the ranking as text and JSON
    cli               `minipipe plan`
    simulate          a layout replayed by simulate_mesh
    published         the runs it is fitted on and held to
    efficiency_fit    the fit, and how far to trust it

What recomputation keeps and redoes is minipipe/sim/recompute_costs.py, shared with the simulator
and the engine.
"""

from .evaluate import evaluate
from .prediction import Row
from .presets import GPU, GPUS, MODELS
from .search import Layouts, layouts, plan
from .setup_and_layout import Layout, Setup, make_setup
from .shapes import ModelShape

__all__ = [
    "plan",
    "layouts",
    "Layouts",
    "evaluate",
    "Row",
    "Layout",
    "Setup",
    "make_setup",
    "ModelShape",
    "GPU",
    "GPUS",
    "MODELS",
]
