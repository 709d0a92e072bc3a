"""PipeDream and PipeDream-2BW on real processes against the one-process reference of their rule.

An asynchronous pipeline does not compute the unsplit model's losses (it is asserted here too): the
same math it keeps is its paper's update rule, delayed gradients and weight versions, which
tests/support/async_reference.py writes out plainly on one process. The run must equal it bit for bit:
the same float operations in the same order (each stage's forward and backward, the gradients
summed in micro-batch order, the same optimizer step), on one thread per rank, so there is no
rounding to allow for. A backward with the newest weights instead of its forward's (no weight
stashing) differs from the reference in the fourth decimal within these few steps.

One group of processes per p runs both kinds on both course models (run_many): ~10-15 s each here.
"""

import pytest
import torch

from minipipe.engine.config import RunConfig
from minipipe.engine.launch import run_many
from tests.support.async_reference import reference_run
from tests.support.reference import reference_run as unsplit_run

pytestmark = pytest.mark.distributed

MODELS = {
    "mlp": {"width": 16, "depth": 5},  # 6 layers
    "gpt": {"width": 16, "heads": 2, "depth": 3, "block": 8, "vocab": 16},  # 5 layers
}
RULES = {"pipedream": "pipedream", "pipedream-2bw": "2bw"}
STEPS, M = 4, 4


def configs(p):
    return [
        RunConfig(
            schedule=kind,
            p=p,
            m=M,
            steps=STEPS,
            model=model,
            model_args=args,
            batch_size=16,
            optimizer="adam",
            lr=1e-2,
            timeout=60,
        )
        for kind in RULES
        for model, args in MODELS.items()
    ]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("p", [2, 3])
def test_asynchronous_runs_equal_the_one_process_reference_of_their_rule(p):
    for result in run_many(configs(p)):
        c = result.config
        label = f"{c.schedule} p={p} {c.model}"
        stage_layers = [list(result.plan.partition.layers_of(s)) for s in range(p)]
        losses, state = reference_run(c, RULES[c.schedule], stage_layers)
        assert result.losses == losses, f"{label}: losses {result.losses} differ from the reference's {losses}"
        assert set(result.state) == set(state), label
        for name, w in state.items():
            assert torch.equal(result.state[name], w), (
                f"{label}: {name} after {STEPS} steps differs from the reference by "
                f"{(result.state[name] - w).abs().max().item():.3g}"
            )
        # ... and it is not the unsplit model's math: the losses part from synchronous training's
        synchronous, _, _ = unsplit_run(c, STEPS)
        apart = max(abs(a - b) for a, b in zip(result.losses, synchronous))
        assert apart > 1e-3, f"{label}: losses within {apart:.2g} of synchronous training's"
