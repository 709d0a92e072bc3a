"""A rank's mixture-of-experts layers: its share of the experts, their gradients' average, and
what its routers chose.

- `split_experts` runs where a rank builds its layers (rank_stages.build_stages): every MoE layer's
  auxiliary loss weighted per micro-batch (loss_scale = 1/m, as each stage divides its loss by m)
  and, with ep > 1, this rank's experts kept and the all-to-alls put on its ep group
  (parallel/expert.py).
- `expert_parameter_ids`: which of a rank's parameters are experts. With ep > 1 they differ between
  the ranks of an ep group, so they are not averaged over dp × cp with the rest but over the edp
  group, the ranks holding the same experts. Each expert saw the tokens of its whole ep group, so
  its gradient is the sum over ep ranks' tokens: the sum over edp, divided by all dp × cp ranks
  (not by edp's size alone), is the mean the one-process model takes — Megatron-Core scales its
  expert gradients the same way.
- `RoutingRecord`: the first step's choices and dropped tokens of every MoE layer, per
  micro-batch (RunConfig(return_grads=True)), to hold against one process routing the same groups.
"""

from __future__ import annotations

from ..models.moe import MoE, moe_layers
from ..parallel.expert import EPGroup, expert_parallel, expert_parameters


def split_experts(layers: list, groups, microbatches: int, hook=None, timeout: float | None = None) -> list:
    """The layers as this rank runs them: see the module docstring. `groups`: the rank's
    MeshGroups (None: one process per pipeline rank, no ep)."""
    for layer in layers:
        for moe in moe_layers(layer):
            moe.loss_scale = 1.0 / microbatches
    if groups is None or groups.ep.size == 1:
        return layers
    ep = EPGroup(groups.ep.group, groups.ep.index, groups.ep.size, hook, timeout)
    return [expert_parallel(layer, ep) for layer in layers]


def expert_parameter_ids(stages: dict) -> set[int]:
    """id() of every expert parameter in these stages."""
    return {id(p) for st in stages.values() for p in expert_parameters(st.module)}


class RoutingRecord:
    """What a rank's routers choose while recording: for each MoE layer (named as in the whole
    model, '<layer index>.<path>', e.g. '2.moe') and micro-batch, (choices [n, k], slots [n, k]:
    -1 where the choice was dropped). Recomputed forwards are not recorded again."""

    def __init__(self, stages: dict, cut):
        self.layers = {}
        for s, st in stages.items():
            found = []
            for local, layer in enumerate(st.module):
                for path, moe in layer.named_modules():
                    if isinstance(moe, MoE):
                        self.layers[f"{cut.layers_of(s)[local]}.{path}"] = moe
                        found.append(moe)
            if found:
                st.forward = self._tagged(st.forward, found)

    @staticmethod
    def _tagged(forward, moes):
        def tagged(mb, x, target=None):
            for moe in moes:
                moe.record_key = mb
            try:
                return forward(mb, x, target)
            finally:
                for moe in moes:
                    moe.record_key = None

        return tagged

    def __bool__(self):
        return bool(self.layers)

    def start(self) -> None:
        for moe in self.layers.values():
            moe.record = {}

    def stop(self) -> dict:
        out = {name: {key: chosen for (key, _), chosen in moe.record.items()} for name, moe in self.layers.items()}
        for moe in self.layers.values():
            moe.record = None
        return out
