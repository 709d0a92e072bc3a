"""Shortcuts a learner might take, one of each class that applies, per exercise: each is a cell
added to a participant's notebook after the reference solution's answer cells, redefining one of
the answers, and the words the verdict must hold when the grader refuses it.

The classes (issue 28 §2): torch's schedule classes converted ("torch"); minipipe.frameworks
adapters ("frameworks"); the engine's siblings and private names ("sibling"); the checkers'
reference helpers ("checker"); answers tabled in an earlier cell ("table") and scenarios imported
from the checker module ("scenarios"); threads; subprocesses; the profiler switched off and on
("profiler"); copies of the engine's source ("copy"). The last four apply to every exercise and
are made here from the exercise's first answer (GENERIC); the others are written per exercise.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# exercise: (its first answer, a class: an autograd Function?, the engine's module whose source is the answer)
FIRST = {
    "01_scale_the_loss": ("accumulate", False, "minipipe.engine.stage"),
    "02_write_gpipe": ("gpipe", False, "minipipe.schedule.generators"),
    "03_one_f_one_b": ("one_f_one_b", False, "minipipe.schedule.generators"),
    "04_fix_a_deadlock": ("fixed", False, "minipipe.schedule.generators"),
    "05_memory_budget": ("peak_bytes", False, "minipipe.schedule.theory"),
    "06_pass_the_baton": ("stage_step", False, "minipipe.engine.stage"),
    "07_interleaved_1f1b": ("placement", False, "minipipe.schedule.generators"),
    "08_balance_the_stages": ("balance", False, "minipipe.engine.partition"),
    "09_bubble_arithmetic": ("makespan", False, "minipipe.schedule.theory"),
    "10_zero_bubble": ("zb_h1", False, "minipipe.schedule.generators"),
    "11_tensor_parallel": ("Copy", True, "minipipe.parallel.tensor"),
    "12_bucketed_all_reduce": ("buckets", False, "minipipe.parallel.data"),
    "13_choose_a_layout": ("choose", False, "minipipe.planner.search"),
    "14_serve_and_generate": ("generation_order", False, "minipipe.sim.request_stream"),
    "15_sharded_data_parallel": ("fsdp_bytes", False, "minipipe.frameworks.fsdp"),
    "16_beat_the_search": ("my_schedule", False, "minipipe.schedule.zb_greedy"),
}

ENGINE = "__import__('minipipe').make_schedule('1f1b', 2, 2)"  # any call of the engine's
GENERIC_BODY = {
    "threads": (
        f"import threading\nworker = threading.Thread(target=lambda: {ENGINE})\nworker.start()\nworker.join()",
        "starts a thread",
    ),
    "subprocesses": (
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import minipipe'], check=False)",
        "starts a process (subprocess)",
    ),
    "profiler": (
        f"import sys\nsys.setprofile(None)\n{ENGINE}\nsys.setprofile(None)",
        "switches the checker's watch off or over (sys.setprofile)",
    ),
    "copy": (None, "runs a copy of the source of"),
}


def _copy_body(module: str) -> str:
    """Run a pasted copy of the engine module's whole source, under another file name."""
    path = Path(importlib.util.find_spec(module).origin)
    package = module.rsplit(".", 1)[0]
    return (
        f"copy = {{'__name__': 'my_copy', '__package__': {package!r}}}\n"
        f"exec(compile({path.read_text()!r}, 'my_copy.py', 'exec'), copy)"
    )


def generic(exercise: str, kind: str) -> tuple[str, str]:
    """The cell of a generic shortcut in the exercise's first answer, and the words of its refusal."""
    name, is_class, module = FIRST[exercise]
    body, words = GENERIC_BODY[kind]
    body = _copy_body(module) if body is None else body
    indent = " " * 8 if is_class else " " * 4
    inner = "\n".join(indent + line for line in body.splitlines())
    if is_class:
        cell = (
            f"_yours = {name}\n\n\nclass {name}(_yours):\n    @staticmethod\n    def forward(ctx, *args):\n"
            f"{inner}\n        return _yours.forward(ctx, *args)\n"
        )
    else:
        cell = f"_yours = {name}\n\n\ndef {name}(*args, **kwargs):\n{inner}\n    return _yours(*args, **kwargs)\n"
    return cell, words


TORCH_1F1B_ORDER = """\
from torch.distributed.pipelining.schedules import _get_1f1b_rank_ops


def {name}({args}):
    return _get_1f1b_rank_ops(1, p, p, m, 0, 0, 0, 1)
"""
TORCH_INTERLEAVED = """\
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B


def {name}({args}):
    torch_schedule = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)
    torch_schedule.pp_group_size, torch_schedule.n_local_stages, torch_schedule._n_microbatches = p, v, m
    return [torch_schedule._calculate_single_rank_operations(r) for r in range(p)]
"""
TORCH_CLASS = """\
from torch.distributed.pipelining.schedules import get_schedule_class


def {name}({args}):
    get_schedule_class({which!r})
    return _yours({args})
"""
CHECKER_IMPORT = "from minipipe.course.exercises.{module} import {what}\n"
TORCH_WORDS = "calls torch's"
FRAMEWORKS_WORDS = "the course's framework adapters"
CHECKER_WORDS = "the checker's own code"  # imported, or called when the module is there already
TABLE_WORDS = "If it looks answers up in a table made beforehand"


def _wrapped(name: str, args: str, body: str) -> str:
    inner = "\n".join("    " + line for line in body.splitlines())
    return f"_yours = {name}\n\n\ndef {name}({args}):\n{inner}\n"


# the sizes each exercise's table of answers made beforehand holds, as (key, comprehension): the notebook's sizes
# and more (tests/course/test_draws_past_tables.py: every check draws a case past them)
KINDS_SIZES = "for k in ('gpipe', '1f1b') for p in range(1, 9) for m in range(1, 17)"
TABLED = {
    "02_write_gpipe": ("(p, m)", "for p in range(1, 9) for m in range(1, 17)"),
    "03_one_f_one_b": ("(p, m)", "for p in range(1, 17) for m in range(1, 81)"),
    "05_memory_budget": ("(k, p, m)", KINDS_SIZES),
    "07_interleaved_1f1b": ("(p, m, v)", "for p in range(1, 11) for v in (2, 3, 4) for m in range(p, 7 * p + 1, p)"),
    "09_bubble_arithmetic": (
        "(k, p, m, v)",
        "for k, v in [('gpipe', 1), ('1f1b', 1), ('interleaved', 2), ('interleaved', 3), ('interleaved', 4)] "
        "for p in range(1, 9) for m in range(1, 33) if k != 'interleaved' or m % p == 0",
    ),
    "10_zero_bubble": ("(p, m)", "for p in range(1, 11) for m in range(1, 51)"),
    "14_serve_and_generate": (
        "(p, per_round, rounds)",
        "for p in range(1, 13) for per_round in range(1, 25) for rounds in range(1, 13)",
    ),
    "16_beat_the_search": ("(p, m, cap)", "for (p, m, cap) in [(2, 3, 1.0), (3, 3, 1.5), (2, 4, 1.5)]"),
}


def tabled(exercise: str) -> set:
    key, sizes = TABLED[exercise]
    return eval(f"{{{key} {sizes}}}")  # noqa: S307 (the test's own constants)


def _table(name: str, args: str, exercise: str) -> str:
    """The learner's own right answers for the sizes the notebook shows, looked up."""
    key, sizes = TABLED[exercise]
    return (
        f"_yours = {name}\nTABLE = {{{key}: _yours(*{key}) {sizes}}}\n\n\n"
        f"def {name}({args}):\n    return TABLE[{key}]\n"
    )


SPECIFIC = {
    "01_scale_the_loss": {
        "sibling": (
            _wrapped(
                "accumulate",
                "model, loss_fn, x, y, m",
                "from minipipe.engine.stage import Stage\n"
                "stage = Stage(0, model, 1, m, loss_fn)\n"
                "return _yours(model, loss_fn, x, y, m)",
            ),
            "the engine's own stage",
        ),
        "checker": (CHECKER_IMPORT.format(module="loss", what="_reference"), CHECKER_WORDS),
    },
    "02_write_gpipe": {
        "torch": (TORCH_CLASS.format(name="gpipe", args="p, m", which="GPipe"), TORCH_WORDS),
        "frameworks": (
            _wrapped(
                "gpipe",
                "p, m",
                "from minipipe.frameworks.jax import order\nreturn [list(row) for row in order(p, m).actions]",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "gpipe",
                "p, m",
                "from minipipe.schedule.kinds import KINDS\n"
                "return [list(row) for row in KINDS['gpipe'].generate(p, m).actions]",
            ),
            "the engine's own GPipe",
        ),
        "checker": (
            _wrapped(
                "gpipe", "p, m", "from minipipe.course.exercises.schedules import fill_and_drain\nreturn _yours(p, m)"
            ),
            CHECKER_WORDS,
        ),
        "table": (_table("gpipe", "p, m", "02_write_gpipe"), TABLE_WORDS),
        "scenarios": (CHECKER_IMPORT.format(module="gpipe", what="FIXED"), CHECKER_WORDS),
    },
    "03_one_f_one_b": {
        "torch": (TORCH_1F1B_ORDER.format(name="one_f_one_b", args="p, m"), "calls torch's _get_1f1b_rank_ops"),
        "frameworks": (
            _wrapped(
                "one_f_one_b",
                "p, m",
                "from minipipe.frameworks.deepspeed import to_schedule\n"
                "return [list(row) for row in to_schedule(p, m).actions]",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "one_f_one_b",
                "p, m",
                "from minipipe import make_schedule\n"
                "return [list(row) for row in make_schedule('pipedream-flush', p, m).actions]",
            ),
            "make_schedule, the engine's own schedules",
        ),
        "checker": (
            _wrapped(
                "one_f_one_b", "p, m", "from minipipe.course.exercises.one_f_one_b import cases\nreturn _yours(p, m)"
            ),
            CHECKER_WORDS,
        ),
        "table": (_table("one_f_one_b", "p, m", "03_one_f_one_b"), TABLE_WORDS),
        "scenarios": (CHECKER_IMPORT.format(module="one_f_one_b", what="FIXED"), CHECKER_WORDS),
    },
    "04_fix_a_deadlock": {
        "torch": (TORCH_1F1B_ORDER.format(name="fixed", args="p=3, m=4"), "calls torch's _get_1f1b_rank_ops"),
        "frameworks": (
            _wrapped(
                "fixed", "", "from minipipe.frameworks.deepspeed import to_schedule\nreturn to_schedule(3, 4).to_text()"
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "fixed", "", "from minipipe.schedule import generators\nreturn generators.one_f_one_b(3, 4).to_text()"
            ),
            "the engine's own 1F1B",
        ),
        "checker": (
            _wrapped("fixed", "", "from minipipe.course.exercises.deadlock import broken\nreturn broken().to_text()"),
            CHECKER_WORDS,
        ),
        # the engine's 1F1B made in a cell and pasted: refused by the count of moves
        "table": (
            "from minipipe import make_schedule\nTEXT = make_schedule('1f1b', 3, 4).to_text()\n\n\n"
            "def fixed():\n    return TEXT\n",
            "you moved 2 actions",
        ),
    },
    "05_memory_budget": {
        "torch": (
            TORCH_CLASS.format(name="peak_bytes", args="kind, p, m, rank, per_microbatch", which="1F1B"),
            TORCH_WORDS,
        ),
        "frameworks": (
            _wrapped(
                "peak_bytes",
                "kind, p, m, rank, per_microbatch",
                "from minipipe import simulate\nfrom minipipe.frameworks.deepspeed import to_schedule\n"
                "return simulate(to_schedule(p, m)).peak_inflight()[rank] * per_microbatch",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "peak_bytes",
                "kind, p, m, rank, per_microbatch",
                "from minipipe.schedule.theory import peak_inflight\n"
                "return peak_inflight(kind, p, m, rank) * per_microbatch",
            ),
            "the engine's own formulas",
        ),
        "checker": (
            _wrapped(
                "peak_bytes",
                "kind, p, m, rank, per_microbatch",
                "from minipipe.course.exercises.memory import _right\nreturn _right(kind, p, m, rank, per_microbatch)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "from minipipe import make_schedule, simulate\n"
            "HELD = {(k, p, m): simulate(make_schedule(k, p, m)).peak_inflight()\n"
            f"        {KINDS_SIZES}}}\n\n\n"
            "def peak_bytes(kind, p, m, rank, per_microbatch):\n"
            "    return HELD[kind, p, m][rank] * per_microbatch\n",
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="memory", what="_cases") + "SCENARIOS = _cases()\n", CHECKER_WORDS),
    },
    "06_pass_the_baton": {
        "sibling": (
            _wrapped(
                "stage_step",
                "stage, baton",
                "from minipipe.engine.stage import Stage\nreturn Stage.forward(stage, baton.mb, None)",
            ),
            "the engine's own stage forward",
        ),
        "checker": (CHECKER_IMPORT.format(module="baton", what="_whole"), CHECKER_WORDS),
    },
    "07_interleaved_1f1b": {
        "torch": (
            TORCH_INTERLEAVED.format(name="interleaved", args="p, m, v"),
            "calls torch's ScheduleInterleaved1F1B._calculate_single_rank_operations",
        ),
        "frameworks": (
            _wrapped(
                "interleaved",
                "p, m, v",
                "from minipipe.frameworks.megatron import record\n"
                "return [list(row) for row in record(p, m, v).schedule.actions]",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "placement", "p, v", "from minipipe.schedule.ir import round_robin\nreturn list(round_robin(p, v))"
            ),
            "the engine's own placement of stages",
        ),
        "checker": (
            _wrapped(
                "placement",
                "p, v",
                "from minipipe.course.exercises.interleaved import peak_allowed\nreturn _yours(p, v)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            _table("interleaved", "p, m, v", "07_interleaved_1f1b"),
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="interleaved", what="FIXED"), CHECKER_WORDS),
    },
    "08_balance_the_stages": {
        "sibling": (
            _wrapped(
                "balance",
                "costs, p",
                "from minipipe.engine.partition import split_evenly\nreturn split_evenly(costs, p)",
            ),
            "the engine's own partitioner",
        ),
        "checker": (
            _wrapped(
                "balance",
                "costs, p",
                "from minipipe.course.exercises.balance import optimum\nreturn optimum(costs, p)[1]",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "_yours = balance\nTABLE = {}\n\n\ndef balance(costs, p):\n    return TABLE[tuple(costs), p]\n",
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="balance", what="cases"), CHECKER_WORDS),
    },
    "09_bubble_arithmetic": {
        "torch": (TORCH_CLASS.format(name="makespan", args="kind, p, m, v, f, b", which="GPipe"), TORCH_WORDS),
        "frameworks": (
            _wrapped(
                "makespan",
                "kind, p, m, v, f, b",
                "from minipipe import Costs, simulate\nfrom minipipe.frameworks.deepspeed import "
                "to_schedule\nreturn simulate(to_schedule(p, m), Costs(f, b)).makespan",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "makespan",
                "kind, p, m, v, f, b",
                "from minipipe.schedule.makespans import fill_drain\nreturn fill_drain(p, m, v, f, b, None)",
            ),
            "the engine's own formulas",
        ),
        "checker": (
            _wrapped(
                "makespan",
                "kind, p, m, v, f, b",
                "from minipipe.course.exercises.schedules import fill_and_drain\nreturn _yours(kind, p, m, v, f, b)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "from minipipe import Costs, make_schedule, simulate\n"
            "TABLE = {(k, p, m, v): simulate(make_schedule(k, p, m, v), Costs(1.0, 2.0)).makespan\n"
            f"         {TABLED['09_bubble_arithmetic'][1]}}}\n\n\n"
            "def makespan(kind, p, m, v, f, b):\n    return TABLE[kind, p, m, v] * (f + b) / 3\n",
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="bubble", what="cases"), CHECKER_WORDS),
    },
    "10_zero_bubble": {
        "torch": (TORCH_CLASS.format(name="zb_h1", args="p, m", which="ZBVZeroBubble"), TORCH_WORDS),
        "frameworks": (
            _wrapped(
                "zb_h1",
                "p, m",
                "from minipipe.frameworks.deepspeed import to_schedule\n"
                "return [list(row) for row in to_schedule(p, m).actions]",
            ),
            FRAMEWORKS_WORDS,
        ),
        "sibling": (
            _wrapped(
                "zb_h1",
                "p, m",
                "from minipipe.schedule import generators\n"
                "return [list(row) for row in generators.zb_h1(p, m).actions]",
            ),
            "the engine's own ZB-H1",
        ),
        "checker": (
            _wrapped(
                "zb_h1", "p, m", "from minipipe.course.exercises.zero_bubble import zb_h1_step\nreturn _yours(p, m)"
            ),
            CHECKER_WORDS,
        ),
        "table": (_table("zb_h1", "p, m", "10_zero_bubble"), TABLE_WORDS),
        "scenarios": (CHECKER_IMPORT.format(module="zero_bubble", what="FIXED"), CHECKER_WORDS),
    },
    "16_beat_the_search": {
        "torch": (TORCH_CLASS.format(name="my_schedule", args="p, m, cap", which="ZBVZeroBubble"), TORCH_WORDS),
        "sibling": (
            _wrapped(
                "my_schedule",
                "p, m, cap",
                "from minipipe import Costs\n"
                "from minipipe.schedule.search import search\n"
                "found = search(p, m, Costs(forward=1, backward=2, weight=1), cap, placements=('v',))\n"
                "return [list(row) for row in found.schedule.actions]",
            ),
            "the engine's own search",
        ),
        # the given cells import the checker module (its challenges are the exercise's, shown): a call is refused
        "checker": (
            _wrapped(
                "my_schedule",
                "p, m, cap",
                "from minipipe.course.exercises.searched import CHALLENGES, "
                "the_search\nthe_search(CHALLENGES[0])\nreturn _yours(p, m, cap)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            _table("my_schedule", "p, m, cap", "16_beat_the_search"),
            TABLE_WORDS,
        ),
    },
    "11_tensor_parallel": {
        "frameworks": (
            "from torch.distributed.tensor.parallel import ColwiseParallel\n_yours = Copy\n\n\n"
            "class Copy(_yours):\n    @staticmethod\n    def forward(ctx, *args):\n"
            "        ColwiseParallel()\n        return _yours.forward(ctx, *args)\n",
            "torch's tensor parallelism",
        ),
        "sibling": (
            "from minipipe.parallel.tensor import CopyToTP\n_yours = Copy\n\n\nclass Copy(CopyToTP):\n    pass\n",
            "the engine's own f (CopyToTP)",
        ),
        "checker": (
            "from minipipe.course.exercises.tensor_parallel import unsplit\n_yours = Copy\n\n\n"
            "class Copy(_yours):\n    @staticmethod\n    def forward(ctx, *args):\n        unsplit()\n"
            "        return _yours.forward(ctx, *args)\n",
            CHECKER_WORDS,
        ),
    },
    "12_bucketed_all_reduce": {
        "frameworks": (
            _wrapped(
                "all_reduce_gradients",
                "params, bucket_bytes, group=None",
                "import torch\ntorch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))\n"
                "return _yours(params, bucket_bytes, group)",
            ),
            "torch's own DistributedDataParallel",
        ),
        "torch": (
            _wrapped(
                "buckets",
                "params, bucket_bytes",
                "import torch.distributed as dist\n"
                "return dist._compute_bucket_assignment_by_size(params, [bucket_bytes])",
            ),
            "torch's own bucketing",
        ),
        "sibling": (
            _wrapped(
                "buckets",
                "params, bucket_bytes",
                "from minipipe.parallel.data import assign_buckets\nreturn assign_buckets(params, bucket_bytes)",
            ),
            "the engine's own bucketing",
        ),
        "checker": (
            _wrapped(
                "buckets",
                "params, bucket_bytes",
                "from minipipe.course.exercises.data_parallel import "
                "nbytes\nreturn _yours(params, bucket_bytes) if nbytes(params[0]) else []",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "_yours = buckets\nTABLE = {}\n\n\ndef buckets(params, bucket_bytes):\n"
            "    return TABLE[tuple(t.numel() for t in params), bucket_bytes]\n",
            TABLE_WORDS,
        ),
        "scenarios": (
            CHECKER_IMPORT.format(module="data_parallel", what="param_lists") + "SCENARIOS = param_lists()\n",
            CHECKER_WORDS,
        ),
    },
    "13_choose_a_layout": {
        "sibling": (
            _wrapped(
                "choose",
                "model, gpus, gpu",
                "from minipipe.planner import plan\nreturn plan(model, gpus, gpu).rows[0].layout",
            ),
            "the planner's search",
        ),
        "checker": (
            _wrapped(
                "choose",
                "model, gpus, gpu",
                "from minipipe.course.exercises.layout import CHOICES\nreturn _yours(model, gpus, gpu)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "_yours = choose\nTABLE = {s: _yours(*s) for s in [('llama2-7b', 64, 'a100-80gb'), "
            "('gpt3-175b', 1024, 'a100-80gb'), ('llama2-70b', 256, 'h100-sxm')]}\n\n\n"
            "def choose(model, gpus, gpu):\n    return TABLE[model, gpus, gpu]\n",
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="layout", what="NAMED"), CHECKER_WORDS),
    },
    "14_serve_and_generate": {
        "torch": (TORCH_CLASS.format(name="generation_order", args="p, per_round, rounds", which="GPipe"), TORCH_WORDS),
        "sibling": (
            _wrapped(
                "generation_order",
                "p, per_round, rounds",
                "from minipipe.schedule import generators\n"
                "return [[a._replace(mb=t * per_round + a.mb) for t in range(rounds) for a in row]\n"
                "        for row in generators.inference(p, per_round).actions]",
            ),
            "the engine's own schedules",
        ),
        "checker": (
            _wrapped(
                "generation_order",
                "p, per_round, rounds",
                "from minipipe.course.exercises.serving import order_cases\nreturn _yours(p, per_round, rounds)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            _table("generation_order", "p, per_round, rounds", "14_serve_and_generate"),
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="serving", what="stream_cases"), CHECKER_WORDS),
    },
    "15_sharded_data_parallel": {
        "frameworks": (
            _wrapped(
                "fsdp_bytes",
                "units, n",
                "import torch\nfrom minipipe.frameworks.fsdp import formula_bytes\n"
                "layers = [torch.nn.ParameterList([torch.nn.Parameter(torch.empty(s)) for s in unit])\n"
                "          for unit in units]\nreturn formula_bytes(layers, n)",
            ),
            "FSDP's own byte formula",
        ),
        "sibling": (
            _wrapped(
                "zero_memory",
                "parameters, tensors, block, n, zero",
                "from minipipe.planner.shapes import bytes_per_parameter\n"
                "bytes_per_parameter('bf16-mixed')\nreturn _yours(parameters, tensors, block, n, zero)",
            ),
            "the planner's bytes per parameter",
        ),
        "checker": (
            _wrapped(
                "fsdp_bytes",
                "units, n",
                "from minipipe.course.exercises.sharded import _by_kind\nreturn _yours(units, n)",
            ),
            CHECKER_WORDS,
        ),
        "table": (
            "_yours = fsdp_bytes\nTABLE = {}\n\n\ndef fsdp_bytes(units, n):\n    return TABLE[str(units), n]\n",
            TABLE_WORDS,
        ),
        "scenarios": (CHECKER_IMPORT.format(module="sharded", what="unit_cases"), CHECKER_WORDS),
    },
}


def cases() -> dict[str, tuple[str, str, str]]:
    """{"NN_name: class": (exercise, the added cell, the words its refusal holds)}."""
    out = {}
    for exercise in FIRST:
        for kind, (cell, words) in SPECIFIC[exercise].items():
            out[f"{exercise[:2]}: {kind}"] = (exercise, cell, words)
        for kind in GENERIC_BODY:
            out[f"{exercise[:2]}: {kind}"] = (exercise, *generic(exercise, kind))
    return out
