"""`minipipe plan`: the planner from a terminal (cli.py adds the subcommand).

    minipipe plan --model gpt3-175b --gpus 1024 --gpu a100-80gb          # the ranking
    minipipe plan ... --layout tp=8,pp=8,dp=16,v=3,mb=1,recompute=selective   # score one layout
    minipipe plan --model my_model.toml --gpu my_gpu.json --gpus 256 --json
    minipipe plan --accuracy                                               # held against published runs

Exit status: 0 when a layout fits (and a given --layout fits), 1 when none does (the answer then
says what would), 2 for input it cannot use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..sim import recompute_costs as recomputation
from . import schema
from .evaluate import evaluate
from .presets import GB, GPU, GPUS, MODELS, MOE_MODELS
from .presets import gpu as gpu_named
from .presets import model as model_named
from .report import as_json, explain
from .search import REFINE, search
from .setup_and_layout import ZERO, Layout, Setup, make_setup
from .shapes import ModelShape
from .space import Space

MODEL_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq")
GPU_FLAGS = {
    "memory_gb": "memory",
    "peak_tflops": "peak",
    "nvlink_gbs": "nvlink",
    "network_gbs": "network",
    "hbm_gbs": "hbm",
}
GPU_UNITS = {"memory": GB, "peak": 1e12, "nvlink": GB, "network": GB, "hbm": GB}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`minipipe plan`'s options."""
    a = parser.add_argument
    a(
        "--model",
        help=f"a model preset ({', '.join(MODELS)}; default gpt3-175b) or a TOML/JSON file "
        f"of ModelShape's fields (layers, hidden, heads, kv_heads, ffn, vocab, seq, ...)",
    )
    for flag in MODEL_FLAGS:
        a(f"--{flag.replace('_', '-')}", type=int, help=f"the model's {flag} (overrides --model's)")
    a("--gpus", type=int, default=1024, help="GPUs in the cluster (default 1024)")
    a(
        "--gpu",
        default="a100-80gb",
        help=f"a GPU preset ({', '.join(GPUS)}; default a100-80gb) or a TOML/JSON file "
        f"(name, memory_gb, peak_tflops, nvlink_gbs, network_gbs, hbm_gbs, gpus_per_node)",
    )
    for flag in GPU_FLAGS:
        a(f"--{flag.replace('_', '-')}", type=float, help=f"the GPU's {flag} (overrides --gpu's)")
    a("--gpus-per-node", type=int, help="GPUs a node holds (default: the GPU preset's, 8)")
    a("--batch", type=int, help="global batch in sequences (default: the model's published one)")
    a("--precision", default="bf16-mixed", help="bf16-mixed (default), fp16-mixed or fp32")
    a("--optimizer", default="adam", help="adam (default), sgd or sgd-momentum")
    a(
        "--efficiency",
        type=float,
        help="run every FLOP at this fraction of peak, memory traffic not priced (default: the fractions fitted on "
        "published runs, see --accuracy)",
    )
    a("--no-sequence-parallel", action="store_true", help="keep norms and dropouts whole on every tensor-parallel rank")
    a("--tp-overlap", action="store_true", help="hide tensor-parallel collectives behind the matmuls next to them")
    a("--no-dp-overlap", action="store_true", help="reduce gradients after the whole pipeline, not during the backward")
    a("--fp32-grads", action="store_true", help="accumulate and reduce gradients in fp32")
    a(
        "--memory-reserve",
        type=float,
        default=0.1,
        help="share of each GPU's memory kept free for what is not counted (default 0.1)",
    )
    a("--latency", type=float, default=0.0, help="seconds per message or ring step (default 0)")
    a(
        "--schedules",
        help="schedule kinds to try, comma-separated (default: every kind the registry can time and size)",
    )
    a(
        "--recompute",
        default=",".join(recomputation.BLOCK_NAMES),
        help="recomputation to try (default none,selective,full)",
    )
    a("--zero", default=",".join(map(str, ZERO)), help="ZeRO stages to try (default 0,1,2,3; 3 is FSDP)")
    a("--micro-batch", help="micro-batch sizes to try, comma-separated (default: every divisor)")
    a("--cp", help="context-parallel degrees to try (default: 1, and more for long sequences)")
    a(
        "--ep",
        help="expert-parallel degrees to try, for a mixture-of-experts model (default: every one that "
        "divides its experts and dp·cp)",
    )
    a("--max-tp", type=int, help="largest tensor-parallel degree (default: what the model allows)")
    a("--max-pp", type=int, help="largest pipeline-parallel degree")
    a("--max-v", type=int, default=8, help="most chunks per rank for interleaving kinds (default 8)")
    a(
        "--layout",
        help="score this layout: tp=8,pp=8,dp=16,v=3,mb=1,recompute=selective[,schedule=..., "
        "zero=..., cp=..., m=...] (dp and m follow from the GPUs and the batch if left out)",
    )
    a(
        "--refine",
        type=int,
        default=REFINE,
        help=f"ways to cut the GPUs replayed by the simulator where the closed form is only close (default {REFINE})",
    )
    a("--top", type=int, default=10, help="layouts to print (default 10)")
    a("--every", action="store_true", help="print every fitting row, not the best of each cut")
    a("--json", action="store_true", help="print JSON for scripts instead of the table")
    a(
        "--search-schedule",
        action="store_true",
        help="for the best layout, search a schedule under its GPUs' room for activations (schedule/search.py) and say "
        "whether it beats the layout's own kind",
    )
    a("--accuracy", action="store_true", help="print the planner against every published run it knows, and exit")
    parser.set_defaults(func=command)


def _ints(text: str | None, name: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{name} takes whole numbers, comma-separated; got {schema.shown(text)}") from None


def _looks_like_file(name: str | None) -> bool:
    return name is not None and (name.endswith((".toml", ".json")) or "/" in name)


def model_of(args: argparse.Namespace) -> ModelShape | str:
    """--model (a preset or a file) with the shape flags applied; a mixture-of-experts preset by its
    name (make_setup gives it its experts)."""
    flags = {k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None}
    if isinstance(args.model, str) and args.model.lower() in MOE_MODELS:
        if flags:
            raise ValueError(
                f"--model {args.model} is a mixture-of-experts preset; its shape cannot be changed by "
                f"--{', --'.join(flags)} here (use minipipe.planner.make_setup with your own ModelShape "
                f"and experts=Experts(...))"
            )
        return args.model.lower()
    if _looks_like_file(args.model):
        fields = schema.checked(schema.read(args.model), schema.MODEL_KEYS, schema.MODEL_NEEDS, args.model)
        fields.setdefault("name", Path(args.model).stem)
        try:
            shape = ModelShape(**fields)
        except ValueError as e:
            raise ValueError(f"{args.model}: {e}") from None
    elif args.model is None and flags:
        missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq") if k not in flags]
        if missing:
            raise ValueError(f"a model of your own needs --{', --'.join(missing)} too (or --model PRESET|FILE)")
        return ModelShape("your model", **flags)
    else:
        shape = model_named(args.model or "gpt3-175b")
    return shape.with_(**flags) if flags else shape


def gpu_of(args: argparse.Namespace) -> GPU:
    """--gpu (a preset or a file, in GB, TFLOP/s and GB/s) with the GPU flags applied."""
    if _looks_like_file(args.gpu):
        raw = schema.checked(schema.read(args.gpu), schema.GPU_KEYS, schema.GPU_NEEDS, args.gpu)
        fields = {
            "name": raw.get("name", Path(args.gpu).stem),
            "gpus_per_node": raw.get("gpus_per_node", 8),
            "source": raw.get("source", f"given in {args.gpu}"),
        }
        for flag, key in GPU_FLAGS.items():
            if flag in raw:
                fields[key] = raw[flag] * GPU_UNITS[key]
        card = GPU(**fields)
    else:
        card = gpu_named(args.gpu)
    changes = {
        GPU_FLAGS[f]: getattr(args, f) * GPU_UNITS[GPU_FLAGS[f]] for f in GPU_FLAGS if getattr(args, f) is not None
    }
    if changes:
        fields = {**card.__dict__, **changes, "source": card.source + "; changed by flags: " + ", ".join(changes)}
        card = GPU(**fields)
    return card


def parse_layout(text: str, setup: Setup) -> Layout:
    """--layout's words: tp, pp, dp, cp, ep, mb (micro_batch), m, schedule, v, recompute, zero."""
    names = {
        "tp": "tp",
        "pp": "pp",
        "dp": "dp",
        "cp": "cp",
        "mb": "micro_batch",
        "micro_batch": "micro_batch",
        "m": "m",
        "schedule": "schedule",
        "v": "v",
        "recompute": "recompute",
        "zero": "zero",
        "ep": "ep",
    }
    words: dict[str, str] = {}  # schedule, recompute
    given: dict[str, int] = {}  # the numbers
    said: dict[str, str] = {}  # each name as the text gave it, to name a repeat
    for item in text.split(","):
        key, _, value = item.partition("=")
        key = key.strip().lower()
        if key not in names or not value.strip():
            raise ValueError(
                f"--layout: {schema.shown(item)} is not one of {', '.join(sorted(names))} = a value; e.g. "
                f"tp=8,pp=8,dp=16,v=3,mb=1,recompute=selective"
            )
        value = value.strip()
        if names[key] in said:
            raise ValueError(f"--layout gives {names[key]} twice ({said[names[key]]}, {item.strip()}); keep one")
        said[names[key]] = item.strip()
        if names[key] in ("schedule", "recompute"):
            words[names[key]] = value
            continue
        number = _ints(value, "layout " + key) or ()
        lowest = 0 if key == "zero" else 1
        if len(number) != 1 or number[0] < lowest:
            raise ValueError(f"--layout {key} must be one whole number >= {lowest}, got {schema.shown(value)}")
        given[names[key]] = number[0]
    tp, pp, cp = given.get("tp", 1), given.get("pp", 1), given.get("cp", 1)
    dp = given.get("dp", setup.gpus // (tp * pp * cp) if setup.gpus % (tp * pp * cp) == 0 else 0)
    mb = given.get("micro_batch", 1)
    m = given.get("m", setup.batch // (dp * mb) if dp and setup.batch % (dp * mb) == 0 else 0)
    if not dp or not m:
        raise ValueError(
            f"--layout {text}: tp·pp·cp = {tp * pp * cp} must divide the {setup.gpus} GPUs and "
            f"dp·mb the batch of {setup.batch}; give dp= and m= that do"
        )
    v = given.get("v", 1)
    schedule = words.get("schedule", "interleaved" if v > 1 else "1f1b")
    return Layout(
        tp, pp, dp, mb, m, schedule, v, words.get("recompute", "none"), given.get("zero", 0), cp, given.get("ep", 1)
    )


def command(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be a whole number >= 1 (layouts to print), got {args.top}")
    if args.refine < 0:
        raise ValueError(
            f"--refine must be a whole number >= 0 (ways to cut the GPUs replayed by the simulator; "
            f"0: none), got {args.refine}"
        )
    if args.accuracy:
        from .efficiency_fit import accuracy, report

        rows = accuracy()
        print(json.dumps([r.__dict__ | {"error": r.error} for r in rows], indent=1) if args.json else report(rows))
        return 0
    setup = make_setup(
        model_of(args),
        args.gpus,
        gpu_of(args),
        batch=args.batch,
        precision=args.precision,
        optimizer=args.optimizer,
        efficiency=args.efficiency,
        gpus_per_node=args.gpus_per_node,
        sequence_parallel=not args.no_sequence_parallel,
        dp_overlap=not args.no_dp_overlap,
        tp_overlap=args.tp_overlap,
        fp32_gradients=args.fp32_grads,
        memory_reserve=args.memory_reserve,
        latency=args.latency,
    )
    space = Space(
        tuple(x.strip() for x in args.schedules.split(",") if x.strip()) if args.schedules else None,
        tuple(x.strip() for x in args.recompute.split(",") if x.strip()),
        _ints(args.zero, "zero") or (),
        _ints(args.micro_batch, "micro-batch"),
        args.max_tp,
        args.max_pp,
        _ints(args.cp, "cp"),
        args.max_v,
        _ints(args.ep, "ep"),
    )
    given = None
    if args.layout:
        layout = parse_layout(args.layout, setup)
        given = evaluate(setup, layout, simulate=layout.pp > 1)
    result = search(setup, space, refine=args.refine)
    if args.json:
        print(json.dumps(as_json(result, args.top, given), indent=1))
    else:
        if given is not None:
            print(explain(result, given), end="\n\n")
        print(result.table(top=args.top, every=args.every))
        if args.search_schedule and result.rows:
            from .searched import searched_for

            print("\n" + searched_for(setup, result.rows[0]).describe())
    if not result.rows or (given is not None and not given.fits):
        return 1
    return 0
