"""A pipeline rank's stages, built once for training and serving alike (train.py's RankStep,
serve/rank.py, the benchmark's jobs): every layer made from the seed (or the plan's state), checked
against the model the plan was made from, then this rank's own kept, in its tensor-, context- and
expert-parallel forms and with the recomputation asked for; and a stage's tensors named as in the
whole model (`by_layer`, `named_spec`), for checkpoints, results and their shard specs.
"""

from __future__ import annotations

from torch import nn

from ..parallel.context import context_parallel, zigzag_positions
from ..parallel.ring_attention import CPGroup
from ..parallel.tensor import shard_spec, tensor_parallel
from ..sim.recompute_costs import parse as parse_recompute
from .config import Plan
from .experts import split_experts
from .partition import Partition, stage_module
from .recomputing_stage import RecomputingStage
from .stage import HeldBytes, Stage


class DifferentModel(ValueError):
    """This process built other layers than the plan was made from: the ranks would disagree on
    every message's size (gloo: a size mismatch, then an abort)."""

    plain = True


def check_same_model(layers, plan: Plan, q: int) -> None:
    """The layers this rank built are the plan's: as many, with the same parameter shapes."""
    built = {n: tuple(p.shape) for n, p in nn.Sequential(*layers).named_parameters()}
    planned = {n: tuple(s) for n, s in plan.meta.get("param_shapes", built).items()}
    wrong = (
        [f"{len(layers)} layers, the plan {len(plan.layer_shapes) - 1}"]
        if plan.layer_shapes and len(layers) != len(plan.layer_shapes) - 1
        else [
            f"{n} is {built.get(n, 'missing')} here, {planned.get(n, 'missing')} in the plan"
            for n in sorted(set(built) | set(planned))
            if built.get(n) != planned.get(n)
        ][:3]
    )
    if wrong:
        raise DifferentModel(
            f"pipeline rank {q} built a different model than the one the run was planned with "
            f"({'; '.join(wrong)}). layers() must build the same layers on every process: from "
            f"the seed and model_args alone (no unseeded randomness, clock, process id or "
            f"machine-dependent files)"
        )


def build_stages(
    plan: Plan, q: int, task, device, groups=None, hook=None, cp_hook=None, *, ep_hook=None
) -> dict[int, Stage]:
    """Pipeline rank q's stages, for training and serving alike. Every rank builds all layers
    from the seed, so the weights are those of the one-process model (or the plan's `state`,
    loaded: the weights a serving run serves), then keeps its own — with tensor parallelism, its
    slice of each split layer (parallel/tensor.py); with context parallelism, each layer made to
    work on its share of every sequence (parallel/context.py: ring attention); with expert
    parallelism, its share of each mixture-of-experts layer's experts (engine/experts.py). `hook`,
    `cp_hook` and `ep_hook` hear the tensor-parallel collectives, the ring attention steps and the
    all-to-alls. A forward-only schedule's stages are in eval mode: they serve."""
    layers, schedule = task.layers(), plan.schedule
    check_same_model(layers, plan, q)
    if plan.state is not None:
        nn.Sequential(*layers).load_state_dict(plan.state)
    if groups is not None and groups.tp.size > 1:
        layers = [
            tensor_parallel(layer, groups.tp.index, groups.tp.size, groups.tp.group, hook, plan.config.timeout)
            for layer in layers
        ]
    if groups is not None and groups.cp.size > 1:
        cp = CPGroup(groups.cp.group, groups.cp.index, groups.cp.size, cp_hook, plan.config.timeout)
        positions = zigzag_positions(plan.layer_shapes[0][0][1] * cp.size, cp.size, cp.rank)
        layers = [context_parallel(layer, cp, positions) for layer in layers]
    layers = split_experts(layers, groups, schedule.m, ep_hook, plan.config.timeout)
    # one count for the rank
    held, recompute = HeldBytes(), parse_recompute(getattr(plan.config, "recompute", "none"), len(layers))
    per_update = schedule.m if schedule.updates is None else schedule.updates.per_update  # the losses' divisor

    def stage(s: int) -> Stage:
        module = stage_module(layers, plan.partition, s).to(device)
        common = dict(split_backward=schedule.splits_backward(s), held=held)
        if not recompute.on:
            return Stage(s, module, schedule.n_stages, per_update, task.loss, **common)
        return RecomputingStage(
            s,
            module,
            schedule.n_stages,
            per_update,
            task.loss,
            **common,
            flags=recompute.of_stage(plan.partition.layers_of(s)),
            per_layer=recompute.mode == "layers",
        )

    stages = {s: stage(s) for s in schedule.stages_of(q)}
    for st in stages.values():
        st.module.train(not schedule.forward_only)
    return stages


def named_spec(module: nn.Module, cut: Partition, stage: int) -> dict:
    """shard_spec of a stage, named as in the whole model."""
    return {
        f"{cut.layers_of(stage)[int(name.split('.', 1)[0])]}.{name.split('.', 1)[1]}": sh
        for name, sh in shard_spec(module).items()
    }


def by_layer(stages: dict, cut: Partition, fn, state: bool = False) -> dict:
    """Name tensors as in `nn.Sequential(*task.layers())`: '<layer index>.<name>'."""
    out = {}
    for s, st in stages.items():
        items = st.module.state_dict().items() if state else st.module.named_parameters()
        for name, t in items:
            local, rest = name.split(".", 1)
            out[f"{cut.layers_of(s)[int(local)]}.{rest}"] = fn(t)
    return out
