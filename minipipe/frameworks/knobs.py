"""Each framework's knobs in the course's words, and the checks that they exist in the version here.

    show("deepspeed")            # a table: concept · minipipe · DeepSpeed
    check("megatron")            # {knob: True/False}: found in the installed Megatron-Core
    megatron_flags("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 ...",
                   world=64, num_layers=32)   # Megatron-LM's flags as minipipe's and the planner's options

A row is (concept, minipipe, the framework's knob, what to look up in the installed framework or
None). A lookup is "module:attribute" (it must exist), "callable(parameter)" (the callable must
take that parameter; callable in module:attribute form) or "class.field" (a dataclass field).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import shlex

TABLES: dict[str, list[tuple[str, str, str, str | None]]] = {
    "deepspeed": [
        (
            "pipeline stages *p*",
            "`RunConfig(p=)`",
            "`PipelineModule(num_stages=)`",
            "deepspeed.pipe:PipelineModule(num_stages)",
        ),
        (
            "micro-batches *m*",
            "`m=`",
            "`gradient_accumulation_steps`",
            "deepspeed.runtime.constants:GRADIENT_ACCUMULATION_STEPS",
        ),
        (
            "micro-batch size",
            "`batch_size` ÷ (dp·m)",
            "`train_micro_batch_size_per_gpu`",
            "deepspeed.runtime.constants:TRAIN_MICRO_BATCH_SIZE_PER_GPU",
        ),
        (
            "schedule",
            '`schedule="1f1b"`',
            "`TrainSchedule`, the only one (`InferenceSchedule` forward only)",
            "deepspeed.runtime.pipe.schedule:TrainSchedule",
        ),
        (
            "partition",
            '`partition="uniform"`, `"params"`',
            '`partition_method="uniform"`, `"parameters"`, `"type:regex"`',
            "deepspeed.pipe:PipelineModule(partition_method)",
        ),
        (
            "activation recomputation",
            "— (kept; lesson 06 counts them)",
            "`activation_checkpoint_interval=`",
            "deepspeed.pipe:PipelineModule(activation_checkpoint_interval)",
        ),
        ("data parallelism *d*", "`dp=`", "what is left: world ÷ `num_stages`", None),
        (
            "the mesh",
            "`Mesh(pp, dp=, tp=)`",
            "`PipelineModule(topology=PipeDataParallelTopology(num_pp=, num_dp=))`",
            "deepspeed.runtime.pipe.topology:PipeDataParallelTopology",
        ),
        ("sharded optimizer state", "—", "`zero_optimization.stage` 0 or 1 (2 and 3 refused with a pipeline)", None),
        (
            "optimizer",
            "`optimizer=`, `lr=`",
            "the JSON's `optimizer` block — ignored when `deepspeed.initialize(optimizer=)` "
            "is given one, as here (`DeepSpeedEngine._configure_optimizer` builds from the block only without it)",
            "deepspeed.runtime.engine:DeepSpeedEngine._configure_optimizer",
        ),
    ],
    "megatron": [
        (
            "pipeline stages *p*",
            "`p=`",
            "`--pipeline-model-parallel-size`",
            "megatron.core.transformer.transformer_config:TransformerConfig.pipeline_model_parallel_size",
        ),
        (
            "virtual stages *v*",
            "`v=`",
            "`--num-layers-per-virtual-pipeline-stage` (layers ÷ (p·v))",
            "megatron.core.transformer.transformer_config:TransformerConfig.virtual_pipeline_model_parallel_size",
        ),
        (
            "micro-batch group",
            "p, always (`interleaved`)",
            "`--microbatch-group-size-per-virtual-pipeline-stage` (default p)",
            "megatron.core.transformer.transformer_config:TransformerConfig.microbatch_group_size_per_vp_stage",
        ),
        ("micro-batches *m*", "`m=`", "`--global-batch-size` ÷ (`--micro-batch-size` × data-parallel size)", None),
        (
            "sends and receives",
            "posted early, waited for when needed",
            "overlapped for interleaving (its default; "
            "`--no-overlap-p2p-communication` batches them instead, refused for p ≤ 2), batched for 1F1B",
            "megatron.core.model_parallel_config:ModelParallelConfig.overlap_p2p_comm",
        ),
        (
            "tensor parallelism *t*",
            "`tp=`",
            "`--tensor-model-parallel-size`",
            "megatron.core.transformer.transformer_config:TransformerConfig.tensor_model_parallel_size",
        ),
        (
            "sequence parallelism",
            "planner: `plan(sequence_parallel=)`",
            "`--sequence-parallel`",
            "megatron.core.transformer.transformer_config:TransformerConfig.sequence_parallel",
        ),
        (
            "activation recomputation",
            'planner: `recompute="selective"`, `"full"`',
            "`--recompute-granularity selective|full`",
            "megatron.core.transformer.transformer_config:TransformerConfig.recompute_granularity",
        ),
        (
            "sharded optimizer state",
            "planner: `plan(distributed_optimizer=True)`",
            "`--use-distributed-optimizer`",
            None,
        ),
        ("overlapped gradient all-reduce", "`dp_overlap=True`", "`--overlap-grad-reduce`", None),
        ("data parallelism *d*", "`dp=`", "what is left: world ÷ (tp · pp)", None),
    ],
    "fsdp": [
        (
            "sharded data parallelism over *n*",
            "`fsdp_run(RunConfig(p=1, dp=n))`",
            "`fully_shard(module, mesh=)`",
            "torch.distributed.fsdp:fully_shard(mesh)",
        ),
        ("one unit (gathered at once)", "every layer", "each module you `fully_shard`, then the root", None),
        (
            "gather again for backward",
            "—",
            "`reshard_after_forward=True` (2 all-gathers a step) or `False` (1)",
            "torch.distributed.fsdp:fully_shard(reshard_after_forward)",
        ),
        (
            "PP × FSDP",
            "`runtime_runs([RunConfig(p=, dp=)])`",
            'FSDP inside each `PipelineStage` over `mesh["dp"]` (torchtitan)',
            "torch.distributed.pipelining:PipelineStage(group)",
        ),
        (
            "mixed precision",
            "— (float32)",
            "`mp_policy=MixedPrecisionPolicy(param_dtype=, reduce_dtype=)`",
            "torch.distributed.fsdp:fully_shard(mp_policy)",
        ),
        (
            "the mesh",
            "`Mesh(pp, dp=)`",
            '`init_device_mesh("cuda", (pp, dp), mesh_dim_names=("pp", "dp"))`',
            "torch.distributed.device_mesh:init_device_mesh(mesh_dim_names)",
        ),
    ],
    "jax": [
        ("pipeline stages *p*", "`p=`", 'a mesh axis: `jax.make_mesh((p,), ("stage",))`', "jax:make_mesh"),
        (
            "a stage's weights",
            "its layers (partition)",
            'stacked arrays, one slice per device: `PartitionSpec("stage")`',
            "jax.sharding:PartitionSpec",
        ),
        (
            "send/receive between stages",
            "derived from the schedule",
            '`jax.lax.ppermute(x, "stage", [(0, 1), ...])`',
            "jax.lax:ppermute",
        ),
        ("schedule", '`make_schedule("gpipe", p, m)`', "the loop you write inside `jax.shard_map`", "jax:shard_map"),
        (
            "backward",
            "B actions",
            "`jax.grad` of the whole loop (ticks in reverse; `frameworks.jax.order` writes that "
            "order by hand, it is not read from the program)",
            "jax:grad",
        ),
        (
            "data / tensor parallelism",
            "`dp=`, `tp=`",
            "more mesh axes; `jax.jit` with `NamedSharding`s lets XLA insert the collectives",
            "jax.sharding:NamedSharding",
        ),
        (
            "launch",
            "`minipipe.run`, `torchrun`",
            "one process per host, `jax.distributed.initialize()`",
            "jax.distributed:initialize",
        ),
    ],
    "torch": [
        (
            "a schedule, as data",
            "`Schedule`, `to_csv(schedule)`",
            "`_PipelineScheduleRuntime._load_csv(path)`",
            "torch.distributed.pipelining.schedules:_PipelineScheduleRuntime._load_csv",
        ),
        ("…on a cluster", "`to_csv`", "torchtitan: `--parallelism.pipeline_parallel_schedule_csv` (the order)", None),
        (
            "stages per rank, where they sit",
            "`v=`, `placement`",
            "torchtitan: `--parallelism.pipeline_parallel_schedule` even "
            "with a CSV — `PipelineScheduleSingle` (1), `PipelineScheduleMulti` (a loop of 2), "
            "`ZBVZeroBubble` (a V of 2); "
            "`torchtitan.command(schedule, csv)` writes them all",
            "torch.distributed.pipelining.schedules:ScheduleZBVZeroBubble",
        ),
        (
            "virtual stages beyond 2 a rank",
            "`v=3`, ...",
            "torchtitan: `--parallelism.pipeline_parallel_layers_per_stage`",
            None,
        ),
        ("pipeline stages *p*", "`p=`", "torchtitan: `--parallelism.pipeline_parallel_degree`", None),
        (
            "micro-batches *m*",
            "`m=`",
            "torchtitan: `--training.local_batch_size` ÷ `--parallelism.pipeline_parallel_microbatch_size`",
            None,
        ),
        (
            "a named schedule",
            '`schedule="interleaved"`',
            "`--parallelism.pipeline_parallel_schedule Interleaved1F1B`",
            "torch.distributed.pipelining:ScheduleInterleaved1F1B",
        ),
        ("sharded data parallelism", "`dp=` (FSDP in the stages)", "`--parallelism.data_parallel_shard_degree`", None),
        ("tensor parallelism *t*", "`tp=`", "`--parallelism.tensor_parallel_degree`", None),
    ],
}
NAMES = {
    "deepspeed": "DeepSpeed",
    "megatron": "Megatron-LM / Megatron-Core",
    "fsdp": "PyTorch FSDP2",
    "jax": "JAX",
    "torch": "PyTorch pipelining / torchtitan",
}


def _found(lookup: str) -> bool:
    """Whether `lookup` (see the module docstring) exists in what is installed."""
    module, _, rest = lookup.partition(":")
    try:
        target = importlib.import_module(module)
    except ImportError:
        return False
    name, _, param = rest.partition("(")
    head, _, attr = name.partition(".")
    obj = getattr(target, head, None)
    if obj is None:
        return False
    if attr:
        if dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            return True
        return hasattr(obj, attr)
    if param:
        return param.rstrip(")") in inspect.signature(obj).parameters
    return True


def check(name: str) -> dict[str, bool]:
    """For each row of `name`'s table that names a lookup: whether the installed framework has it."""
    return {knob: _found(lookup) for _, _, knob, lookup in TABLES[name] if lookup}


def markdown(name: str) -> str:
    rows = [f"| concept | minipipe | {NAMES[name]} |", "| --- | --- | --- |"]
    rows += [f"| {concept} | {ours} | {theirs} |" for concept, ours, theirs, _ in TABLES[name]]
    return "\n".join(rows)


def show(name: str) -> None:
    """Display `name`'s table in a notebook."""
    from IPython.display import Markdown, display

    display(Markdown(markdown(name)))


def megatron_flags(flags: str, world: int, num_layers: int) -> dict:
    """Megatron-LM's parallelism flags as minipipe's RunConfig options (`run`) and the planner's
    layout and setup (`planner`), and how its pipeline ranks exchange (`overlap_p2p_comm`, as
    `megatron.train` takes it). Raises ValueError for what Megatron-LM would refuse. A micro-batch
    group other than p (`group_size`) is an order minipipe's interleaved kind does not generate:
    run `megatron.record(p, m, v, group_size).schedule` as your own Schedule."""
    parser = argparse.ArgumentParser(prog="megatron", add_help=False, exit_on_error=False)
    parser.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    parser.add_argument("--tensor-model-parallel-size", type=int, default=1)
    parser.add_argument("--num-layers-per-virtual-pipeline-stage", type=int)
    parser.add_argument("--num-virtual-stages-per-pipeline-rank", type=int)
    parser.add_argument("--microbatch-group-size-per-virtual-pipeline-stage", type=int)
    parser.add_argument("--global-batch-size", type=int, required=True)
    parser.add_argument("--micro-batch-size", type=int, required=True)
    parser.add_argument("--recompute-granularity", choices=("full", "selective"))
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--no-overlap-p2p-communication", action="store_false", dest="overlap_p2p_comm")
    try:
        a = parser.parse_args(shlex.split(flags))
    except (argparse.ArgumentError, SystemExit) as e:
        raise ValueError(f"cannot read the flags {flags!r}: {e}") from None
    pp, tp = a.pipeline_model_parallel_size, a.tensor_model_parallel_size
    if world % (pp * tp):
        raise ValueError(f"world={world} is not a multiple of tp × pp = {tp * pp}: Megatron refuses it")
    dp = world // (pp * tp)
    v = a.num_virtual_stages_per_pipeline_rank or 1
    if a.num_layers_per_virtual_pipeline_stage:
        if num_layers % (pp * a.num_layers_per_virtual_pipeline_stage):
            raise ValueError(
                f"{num_layers} layers do not split into {pp} ranks × chunks of "
                f"{a.num_layers_per_virtual_pipeline_stage} layers"
            )
        v = num_layers // (pp * a.num_layers_per_virtual_pipeline_stage)
    if a.global_batch_size % (a.micro_batch_size * dp):
        raise ValueError(
            f"--global-batch-size {a.global_batch_size} is not a multiple of --micro-batch-size × dp "
            f"= {a.micro_batch_size * dp}"
        )
    m = a.global_batch_size // (a.micro_batch_size * dp)
    group = a.microbatch_group_size_per_virtual_pipeline_stage or pp
    schedule = "interleaved" if v > 1 else "1f1b"
    from .megatron import exchange  # Megatron-LM's rule for the p2p exchange, without Megatron-Core itself

    overlap, _ = exchange(pp, v > 1, a.overlap_p2p_comm and v > 1) if pp > 1 else (False, True)
    run = {
        "schedule": schedule,
        "p": pp,
        "v": v,
        "m": m,
        "dp": dp,
        "tp": tp,
        "batch_size": a.global_batch_size,
        "dp_overlap": a.overlap_grad_reduce,
    }
    planner = {
        "layout": {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "micro_batch": a.micro_batch_size,
            "m": m,
            "schedule": schedule,
            "v": v,
            "recompute": a.recompute_granularity or "none",
        },
        "setup": {
            "sequence_parallel": a.sequence_parallel,
            "distributed_optimizer": a.use_distributed_optimizer,
            "dp_overlap": a.overlap_grad_reduce,
            "batch": a.global_batch_size,
        },
    }
    return {"run": run, "planner": planner, "group_size": group, "overlap_p2p_comm": overlap}
