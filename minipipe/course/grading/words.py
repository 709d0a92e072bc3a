"""A refused call, named in the learner's terms: "calls make_schedule, the engine's own schedules
(minipipe.schedule.kinds.make_schedule)" or "calls torch's ScheduleInterleaved1F1B
(torch.distributed.pipelining.schedules)". The most specific entry of WORDS whose dotted name the call
falls under wins; what no entry names is said by where it lives."""

from __future__ import annotations

from pathlib import Path

WORDS = {
    # the schedules
    "minipipe.schedule.ops": "the engine's actions (F, B, I, W)",
    "minipipe.schedule.ir.Schedule": "the engine's Schedule",
    "minipipe.schedule.generators.gpipe": "the engine's own GPipe",
    "minipipe.schedule.generators.one_f_one_b": "the engine's own 1F1B",
    "minipipe.schedule.generators.interleaved_1f1b": "the engine's own interleaved 1F1B",
    "minipipe.schedule.generators.zb_h1": "the engine's own ZB-H1",
    "minipipe.schedule.generators.naive": "the engine's own naive schedule",
    "minipipe.schedule.generators": "the engine's own schedules",
    "minipipe.schedule.vshape": "the engine's own V-shaped schedules",
    "minipipe.schedule.kinds.make_schedule": "make_schedule, the engine's own schedules",
    "minipipe.schedule.kinds.<lambda>": "the engine's own formulas in its registry of schedules",
    "minipipe.schedule.makespans": "the engine's own formulas in its registry of schedules",
    "minipipe.schedule.kinds": "the engine's registry of schedules",
    "minipipe.schedule.ir.round_robin": "the engine's own placement of stages",
    "minipipe.schedule.theory": "the engine's own formulas",
    "minipipe.schedule.replay": "the engine's replay of a schedule (the simulator's core)",
    "minipipe.schedule.rounds": "the engine's own generation rounds",
    "minipipe.schedule.search": "the engine's own search",
    "minipipe.schedule.zb_greedy": "the engine's own heuristic (the zero-bubble greedy)",
    "minipipe.schedule.milp": "the engine's own exact search (MILP)",
    "minipipe.schedule.ir.Schedule.messages": "the engine's own count of messages",
    "minipipe.sim.pipeline": "the engine's simulator",
    "minipipe.sim.request_stream": "the engine's serving simulator and its stream of requests",
    "minipipe.sim": "the engine's simulator",
    "minipipe.trace.Trace.peak_inflight": "the simulator's count of micro-batches held",
    "minipipe.trace": "the simulator's measurements",
    # the engine
    "minipipe.engine.stage.Stage.forward": "the engine's own stage forward (Stage.forward)",
    "minipipe.engine.stage.Stage.backward": "the engine's own stage backward (Stage.backward)",
    "minipipe.engine.stage": "the engine's own stage forward and backward",
    "minipipe.engine.partition.profile_layers": "the engine's own profiler",
    "minipipe.engine.partition._forward_backward": "the engine's own profiler",
    "minipipe.engine.partition": "the engine's own partitioner",
    "minipipe.engine.execute": "the engine's own executor",
    "minipipe.engine.train": "the engine's own training loop",
    "minipipe.engine.rank_stages": "the engine's own stages, built for a rank",
    "minipipe.engine.launch": "the engine's run",
    "minipipe.engine.config": "the engine's own run set-up",
    "minipipe.engine.run_checks": "the engine's own run set-up",
    "minipipe.engine.model_cut": "the engine's own partitioner",
    "minipipe.engine.stage_step": "the engine's own stage step",
    "minipipe.engine": "the engine",
    "minipipe.parallel.tensor.CopyToTP": "the engine's own f (CopyToTP)",
    "minipipe.parallel.tensor.ReduceFromTP": "the engine's own g (ReduceFromTP)",
    "minipipe.parallel.tensor.TPGroup": "the engine's own tensor-parallel group (TPGroup)",
    "minipipe.parallel.tensor": "the engine's own tensor parallelism",
    "minipipe.parallel.data.assign_buckets": "the engine's own bucketing (assign_buckets)",
    "minipipe.parallel.data.GradReducer": "the engine's own gradient reducer (GradReducer)",
    "minipipe.parallel.data": "the engine's own data parallelism",
    "minipipe.parallel.accounting": "the engine's byte and memory accounting",
    "minipipe.traffic.ring_bytes": "the engine's ring formula (traffic.ring_bytes)",
    "minipipe.traffic": "the engine's byte accounting",
    # the planner
    "minipipe.planner.search": "the planner's search",
    "minipipe.planner.footprint": "the planner's memory model",
    "minipipe.planner.shapes.bytes_per_parameter": "the planner's bytes per parameter",
    "minipipe.planner.evaluate": "the planner's cost model (evaluate)",
    "minipipe.planner.presets": "the planner's catalogue of models and GPUs",
    "minipipe.planner.setup_and_layout.make_setup": "the planner's set-up of a model on a cluster",
    "minipipe.planner": "the planner",
    # the frameworks adapters and the checkers
    "minipipe.frameworks.fsdp.formula_bytes": "FSDP's own byte formula (frameworks/fsdp.py)",
    "minipipe.frameworks.fsdp": "minipipe's FSDP (frameworks/fsdp.py)",
    "minipipe.frameworks": "the course's framework adapters (minipipe.frameworks)",
    "minipipe.course.exercises": "the checker's own code",
    "minipipe.course.grading": "the grader's own code",
    "minipipe": "minipipe's own code",
}
FOREIGN = {
    "torch/distributed/pipelining/": "torch's",
    "torch/distributed/tensor/parallel/": "torch's tensor parallelism:",
    "torch/distributed/fsdp/": "torch's FSDP:",
    "torch/distributed/_composable/": "torch's FSDP:",
    "torch/nn/parallel/distributed.py": "torch's own DistributedDataParallel:",
    "torch/distributed/algorithms/ddp_comm": "torch's DistributedDataParallel:",
    "torch/distributed/nn/": "torch's differentiable collectives:",
    "deepspeed/": "DeepSpeed's",
    "megatron/": "Megatron's",
    "jax/": "JAX's",
    "jaxlib/": "JAX's",
    "optax/": "Optax's",
    "flax/": "Flax's",
}


def words(origin, copy: bool = False) -> str:
    """The refused call, as the learner reads it, with its verb: "calls ...", "imports ...", "runs a
    copy of ..." (origin: domain.Origin, or (file, qualname) of the by-file domain; `copy`: the
    code run is a copy of the original's, under another file name)."""
    if isinstance(origin, tuple):
        filename, qualname = origin
        whose = next((w for piece, w in FOREIGN.items() if piece in filename), "a library's")
        if qualname == "<module>":
            return f"imports {_module_of(filename)} ({whose.rstrip(':')} code)"
        return f"calls {whose} {qualname.split('.<locals>')[0]} ({_module_of(filename)})"
    if origin.module.startswith("torch.distributed.pipelining"):
        said = (
            f"torch's pipelining ({origin.module})"
            if origin.qualname == "<module>"
            else f"torch's {origin.qualname.split('.<locals>')[0]} ({origin.module})"
        )
    else:
        dotted = origin.module if origin.qualname == "<module>" else origin.dotted
        parts = dotted.split(".")
        said = next(
            (
                f"{WORDS[key]} ({dotted})"
                for key in (".".join(parts[:cut]) for cut in range(len(parts), 0, -1))
                if key in WORDS
            ),
            dotted,
        )
    if origin.qualname == "<module>":
        return f"runs a copy of the source of {said}" if copy else f"imports {said}"
    return f"calls a copy of {said}" if copy else f"calls {said}"


def _module_of(filename: str) -> str:
    parts = Path(filename).with_suffix("").parts
    for top in ("torch", "deepspeed", "megatron", "jax", "jaxlib", "optax", "flax"):
        if top in parts:
            rest = parts[parts.index(top) :]
            return ".".join(rest[:-1] if rest[-1] == "__init__" else rest)
    return filename
