"""A refused call, named in the learner's terms: "calls make_schedule, the engine's own schedules
(minipipe.schedule.kinds.make_schedule)" or "calls torch's ScheduleInterleaved1F1B
(torch.distributed.pipelining.schedules)". The most specific entry of phrases() whose dotted name the
call falls under wins; what no entry names is said by where it lives. Said in the learner's language
(i18n/<lang>/checkers/grading.words.po): the sandbox words a refusal itself, so it is made afresh each
time, never at import."""

from __future__ import annotations

from pathlib import Path

from ..i18n.messages import say as _
from .domain import BUCKETING


def phrases() -> dict[str, str]:
    """Dotted name -> what it is, in the learner's language: made at each refusal, so that a sandbox
    forked from a zygote started in English says it in its judge's language. In German the phrases
    stand in the accusative, as the verbs that take them (ruft … auf, importiert) want."""
    return {
        # the schedules
        "minipipe.schedule.ops": _("the engine's actions (F, B, I, W)"),
        "minipipe.schedule.ir.Schedule": _("the engine's Schedule"),
        "minipipe.schedule.generators.gpipe": _("the engine's own GPipe"),
        "minipipe.schedule.generators.one_f_one_b": _("the engine's own 1F1B"),
        "minipipe.schedule.generators.interleaved_1f1b": _("the engine's own interleaved 1F1B"),
        "minipipe.schedule.generators.zb_h1": _("the engine's own ZB-H1"),
        "minipipe.schedule.generators.naive": _("the engine's own naive schedule"),
        "minipipe.schedule.generators": _("the engine's own schedules"),
        "minipipe.schedule.vshape": _("the engine's own V-shaped schedules"),
        "minipipe.schedule.kinds.make_schedule": _("make_schedule, the engine's own schedules"),
        "minipipe.schedule.kinds.<lambda>": _("the engine's own formulas in its registry of schedules"),
        "minipipe.schedule.makespans": _("the engine's own formulas in its registry of schedules"),
        "minipipe.schedule.kinds": _("the engine's registry of schedules"),
        "minipipe.schedule.ir.round_robin": _("the engine's own placement of stages"),
        "minipipe.schedule.theory": _("the engine's own formulas"),
        "minipipe.schedule.replay": _("the engine's replay of a schedule (the simulator's core)"),
        "minipipe.schedule.rounds": _("the engine's own generation rounds"),
        "minipipe.schedule.search": _("the engine's own search"),
        "minipipe.schedule.zb_greedy": _("the engine's own heuristic (the zero-bubble greedy)"),
        "minipipe.schedule.milp": _("the engine's own exact search (MILP)"),
        "minipipe.schedule.ir.Schedule.messages": _("the engine's own count of messages"),
        "minipipe.sim.pipeline": _("the engine's simulator"),
        "minipipe.sim.request_stream": _("the engine's serving simulator and its stream of requests"),
        "minipipe.sim": _("the engine's simulator"),
        "minipipe.trace.Trace.peak_inflight": _("the simulator's count of micro-batches held"),
        "minipipe.trace": _("the simulator's measurements"),
        # the engine
        "minipipe.engine.stage.Stage.forward": _("the engine's own stage forward (Stage.forward)"),
        "minipipe.engine.stage.Stage.backward": _("the engine's own stage backward (Stage.backward)"),
        "minipipe.engine.stage": _("the engine's own stage forward and backward"),
        "minipipe.engine.partition.profile_layers": _("the engine's own profiler"),
        "minipipe.engine.partition._forward_backward": _("the engine's own profiler"),
        "minipipe.engine.partition": _("the engine's own partitioner"),
        "minipipe.engine.execute": _("the engine's own executor"),
        "minipipe.engine.train": _("the engine's own training loop"),
        "minipipe.engine.rank_stages": _("the engine's own stages, built for a rank"),
        "minipipe.engine.launch": _("the engine's run"),
        "minipipe.engine.config": _("the engine's own run set-up"),
        "minipipe.engine.run_checks": _("the engine's own run set-up"),
        "minipipe.engine.model_cut": _("the engine's own partitioner"),
        "minipipe.engine.stage_step": _("the engine's own stage step"),
        "minipipe.engine": _("the engine"),
        "minipipe.parallel.tensor.CopyToTP": _("the engine's own f (CopyToTP)"),
        "minipipe.parallel.tensor.ReduceFromTP": _("the engine's own g (ReduceFromTP)"),
        "minipipe.parallel.tensor.TPGroup": _("the engine's own tensor-parallel group (TPGroup)"),
        "minipipe.parallel.tensor": _("the engine's own tensor parallelism"),
        "minipipe.parallel.data.assign_buckets": _("the engine's own bucketing (assign_buckets)"),
        "minipipe.parallel.data.GradReducer": _("the engine's own gradient reducer (GradReducer)"),
        "minipipe.parallel.data": _("the engine's own data parallelism"),
        "minipipe.parallel.accounting": _("the engine's byte and memory accounting"),
        "minipipe.traffic.ring_bytes": _("the engine's ring formula (traffic.ring_bytes)"),
        "minipipe.traffic": _("the engine's byte accounting"),
        # the planner
        "minipipe.planner.search": _("the planner's search"),
        "minipipe.planner.footprint": _("the planner's memory model"),
        "minipipe.planner.shapes.bytes_per_parameter": _("the planner's bytes per parameter"),
        "minipipe.planner.evaluate": _("the planner's cost model (evaluate)"),
        "minipipe.planner.presets": _("the planner's catalogue of models and GPUs"),
        "minipipe.planner.setup_and_layout.make_setup": _("the planner's set-up of a model on a cluster"),
        "minipipe.planner": _("the planner"),
        # the frameworks adapters and the checkers
        "minipipe.frameworks.fsdp.formula_bytes": _("FSDP's own byte formula (frameworks/fsdp.py)"),
        "minipipe.frameworks.fsdp": _("minipipe's FSDP (frameworks/fsdp.py)"),
        "minipipe.frameworks": _("the course's framework adapters (minipipe.frameworks)"),
        "minipipe.course.exercises": _("the checker's own code"),
        "minipipe.course.grading": _("the grader's own code"),
        "minipipe": _("minipipe's own code"),
    }


def owners() -> dict[str, str]:
    """A piece of a file's path -> whose code it is (the first that the path holds wins), in the
    learner's language. In German and Dutch an owner follows "aus"/"van" (aus der Tensor Parallelism
    von torch, van een bibliotheek)."""
    return {
        "torch/distributed/pipelining/": _("torch's"),
        "torch/distributed/tensor/parallel/": _("torch's tensor parallelism:"),
        "torch/distributed/fsdp/": _("torch's FSDP:"),
        "torch/distributed/_composable/": _("torch's FSDP:"),
        "torch/nn/parallel/distributed.py": _("torch's own DistributedDataParallel:"),
        "torch/distributed/algorithms/ddp_comm": _("torch's DistributedDataParallel:"),
        "torch/distributed/nn/": _("torch's differentiable collectives:"),
        "deepspeed/": _("DeepSpeed's"),
        "megatron/": _("Megatron's"),
        "jax/": _("JAX's"),
        "jaxlib/": _("JAX's"),
        "optax/": _("Optax's"),
        "flax/": _("Flax's"),
    }


def words(origin, copy: bool = False, verb: bool = True) -> str:
    """The refused call, as the learner reads it, with its verb: "calls ...", "imports ...", "runs a
    copy of ..." (origin: domain.Origin, or (file, qualname) of the by-file domain; `copy`: the
    code run is a copy of the original's, under another file name); without it (`verb` False), what
    the call is: "make_schedule, the engine's own schedules (...)", "a copy of ..."."""
    if isinstance(origin, tuple):
        filename, qualname = origin
        whose = next((w for piece, w in owners().items() if piece in filename), None) or _("a library's")
        if qualname == "<module>":
            what = _("{module} ({whose} code)", module=_module_of(filename), whose=whose.rstrip(":"))
            return _("imports {what}", what=what) if verb else what
        what = _(
            "{whose} {name} ({module})",
            whose=whose,
            name=qualname.split(".<locals>")[0],
            module=_module_of(filename),
        )
        return _("calls {what}", what=what) if verb else what
    if origin.module.startswith("torch.distributed.pipelining"):
        said = (
            _("torch's pipelining ({module})", module=origin.module)
            if origin.qualname == "<module>"
            else _("torch's {name} ({module})", name=origin.qualname.split(".<locals>")[0], module=origin.module)
        )
    else:
        dotted = origin.module if origin.qualname == "<module>" else origin.dotted
        parts = dotted.split(".")
        known = phrases()
        said = next(
            (
                f"{known[key]} ({dotted})"
                for key in (".".join(parts[:cut]) for cut in range(len(parts), 0, -1))
                if key in known
            ),
            dotted,
        )
    if origin.qualname == "<module>":
        if copy:
            return (
                _("runs a copy of the source of {what}", what=said)
                if verb
                else _("a copy of the source of {what}", what=said)
            )
        return _("imports {what}", what=said) if verb else said
    if copy:
        return _("calls a copy of {what}", what=said) if verb else _("a copy of {what}", what=said)
    return _("calls {what}", what=said) if verb else said


def c_function(dotted: str, said: str) -> str:
    """A refused call of torch's answers written in C (domain.FOREIGN_C: {dotted: said}), with its
    verb, in the learner's language."""
    if dotted == BUCKETING:
        said = _("torch's own bucketing ({dotted}, DDP's reducer's)", dotted=dotted)
    return _("calls {what}", what=said)


def _module_of(filename: str) -> str:
    parts = Path(filename).with_suffix("").parts
    for top in ("torch", "deepspeed", "megatron", "jax", "jaxlib", "optax", "flax"):
        if top in parts:
            rest = parts[parts.index(top) :]
            return ".".join(rest[:-1] if rest[-1] == "__init__" else rest)
    return filename
