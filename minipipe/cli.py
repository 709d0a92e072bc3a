"""`minipipe simulate | train | compare | bench | plan | check | serve | workshop`: the engine from a terminal.

Every way a command ends is one message and an exit code (EXIT_CODES; `minipipe --help` lists them):
bad input exits 2 with what to change, before anything runs (output paths are checked first), a
run that failed exits 1 with the engine's words for it, Ctrl-C exits 130. Here: the arguments of
each command and the exits; what simulate, train, compare and check then do is in commands.py,
the other commands' in their own folders (bench/, planner/, serve/, workshop/: each cli.py).
"""

from __future__ import annotations

import argparse
import sys

from .bench.cli import add_bench_command  # nothing of the benchmark is imported until it runs
from .commands import cmd_check, cmd_compare, cmd_simulate, cmd_train, report_run, run_summary, textbook
from .planner.cli import add_arguments as add_plan_arguments
from .schedule import kinds
from .serve.cli import add_serve_command  # nothing of serving is imported until it runs

# the commands' own functions, in commands.py, are importable from here too, as they were
__all__ = [
    "EXIT_CODES",
    "add_schedule_args",
    "build_parser",
    "main",
    "cmd_check",
    "cmd_compare",
    "cmd_simulate",
    "cmd_train",
    "report_run",
    "run_summary",
    "textbook",
]

EXIT_CODES = {
    0: "done: the command did what it was asked",
    1: "failed: the run stopped (a rank failed, a file could not be written), or the answer is no "
    "(plan: no layout fits; check: a check did not pass)",
    2: "bad input: nothing was run; the message says what to change",
    130: "interrupted: Ctrl-C; every worker process was stopped",
}


def add_schedule_args(parser: argparse.ArgumentParser) -> None:
    menu = "; ".join(f"{k.name}: {k.summary}" for k in kinds.KINDS.values())
    parser.add_argument("--schedule", "-s", default="1f1b", help=f"the schedule kind (default 1f1b) — {menu}")
    parser.add_argument("-p", "--ranks", type=int, default=2, dest="p", help="pipeline ranks (default 2)")
    parser.add_argument(
        "-m", "--microbatches", type=int, default=4, dest="m", help="micro-batches per step (default 4)"
    )
    several = ", ".join(f"{k.name} (default {k.default_v})" for k in kinds.KINDS.values() if k.takes_v)
    parser.add_argument(
        "-v",
        "--virtual",
        type=int,
        default=None,
        dest="v",
        help=f"stages per rank, for kinds that take several: {several or 'none'}; else 1",
    )


def _add_model_arg(parser) -> None:
    """--model-arg NAME=INT, repeatable: `train` and `compare` size their model alike."""
    parser.add_argument(
        "--model-arg",
        action="append",
        type=_model_arg,
        default=[],
        metavar="NAME=INT",
        help="model size, e.g. --model-arg width=64 --model-arg depth=8",
    )


def _model_arg(text: str):
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER such as width=64, got {text!r}")
    return key, int(value.strip())


def build_parser() -> argparse.ArgumentParser:
    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    parser = argparse.ArgumentParser(
        prog="minipipe",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"exit codes:\n{codes}",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="print a schedule's grid, its simulated bubble and memory")
    add_schedule_args(sim)
    sim.add_argument(
        "--forward",
        type=float,
        default=1.0,
        help="forward time of one micro-batch through a rank's share of the model (default 1)",
    )
    sim.add_argument("--backward", type=float, default=2.0, help="backward time, likewise (default 2)")
    sim.add_argument(
        "--weight",
        type=float,
        default=None,
        help="the weight-gradient part of backward, for schedules that split it (default: half)",
    )
    sim.add_argument("--latency", type=float, default=0.0, help="time per point-to-point message")
    sim.add_argument(
        "--overlap",
        type=float,
        default=0.0,
        help="for schedules that pair a forward with a backward (dualpipe-v): the share of the shorter "
        "hidden under the longer, 0 (one stream, a CPU) to 1 (default 0)",
    )
    sim.add_argument("--slow-stage", type=int, default=None, help="make this stage slower ...")
    sim.add_argument("--slow-factor", type=float, default=None, help="... by this factor (default 1.5)")
    sim.add_argument("--chrome", default=None, metavar="PATH", help="also write a Chrome trace JSON here")
    sim.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps in one schedule: pipedream and pipedream-2bw run several without a flush "
        "(default 3); a flushed kind's step repeated (default: one step)",
    )
    sim.add_argument(
        "--all-kinds",
        action="store_true",
        help="simulate every registered kind on these p, m and costs instead: step, bubble, peak memory",
    )
    sim.set_defaults(func=cmd_simulate)

    train = sub.add_parser(
        "train", help="train on p local processes (or under torchrun) and show the measured pipeline"
    )
    add_schedule_args(train)
    train.add_argument(
        "--model", default="mlp", help="mlp, gpt, or your own as package.module:function (default mlp; see the README)"
    )
    _add_model_arg(train)
    train.add_argument("--dp", type=int, default=1, help="data-parallel replicas (default 1); processes = p·dp·cp·tp")
    train.add_argument(
        "--cp",
        type=int,
        default=1,
        help="context-parallel ranks: each sequence split over them, attention by a ring (default 1)",
    )
    train.add_argument("--tp", type=int, default=1, help="tensor-parallel shards of every layer (default 1)")
    train.add_argument(
        "--no-dp-overlap", action="store_true", help="all-reduce the gradients after the backward instead of during it"
    )
    train.add_argument("--oversubscribe", action="store_true", help="allow more than 4 processes per CPU core")
    train.add_argument(
        "--recompute",
        nargs="?",
        const="stage",
        default="none",
        metavar="WHAT",
        help="activation recomputation: 'stage' (the default when given alone) keeps only each "
        "stage's input and runs its forward again in the backward; a list of layer indices "
        "such as 1,2,5 recomputes those layers; 'none' (default) keeps everything",
    )
    train.add_argument("--steps", type=int, default=50)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--optimizer", default="adam", help="adam or sgd")
    train.add_argument("--lr", type=float, default=3e-3)
    train.add_argument("--partition", default="uniform", help="uniform, params or time")
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--backend", default="auto", help="auto, gloo or nccl")
    train.add_argument("--timeout", type=float, default=60.0, help="seconds a rank may wait for a peer, in a step")
    train.add_argument(
        "--startup-timeout",
        type=float,
        default=300.0,
        help="seconds the ranks may take to start: find each other, build the model (default 300)",
    )
    train.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="FOLDER",
        help="save checkpoints here (a folder of its own for each run: it is locked while the run lives)",
    )
    train.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="K",
        help="steps between checkpoints (default 0: only after the last step)",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest intact checkpoint in --checkpoint-dir (none yet: start at step "
        "0); under torchrun --max-restarts, each restart resumes so",
    )
    train.add_argument("--trace", default="runs/trace.json", help="where to write the Chrome trace")
    train.add_argument("--json", default=None, help="also write losses and bubbles as JSON here")
    train.set_defaults(func=cmd_train)

    cmp = sub.add_parser(
        "compare", help="pipeline vs tensor vs data parallelism: every layout of N processes, measured"
    )
    cmp.add_argument("--world", type=int, default=4, help="processes (default 4)")
    cmp.add_argument("--schedule", "-s", default="1f1b", help="the pipeline schedule of layouts with p > 1")
    cmp.add_argument("-m", "--microbatches", type=int, default=4, dest="m", help="micro-batches per step (default 4)")
    cmp.add_argument("--model", default="gpt", help="mlp, gpt or moe (default gpt; moe adds the layouts with ep)")
    _add_model_arg(cmp)
    cmp.add_argument("--batch-size", type=int, default=32)
    cmp.add_argument("--steps", type=int, default=8)
    cmp.add_argument("--timeout", type=float, default=60.0)
    cmp.add_argument(
        "--cp",
        action="store_true",
        help="also the layouts with context parallelism (each sequence split, attention by a ring)",
    )
    cmp.set_defaults(func=cmd_compare)

    add_bench_command(sub)

    add_plan_arguments(
        sub.add_parser(
            "plan",
            help="the fastest pipeline × tensor × data layouts for a real model and cluster, predicted (no processes)",
        )
    )

    check = sub.add_parser("check", help="run exercise notebooks headless and print their checks' verdicts")
    check.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="exercise notebooks (exercises/03_one_f_one_b.ipynb) or folders of them (exercises/)",
    )
    check.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    check.set_defaults(func=cmd_check)

    add_serve_command(sub, _model_arg)

    from .workshop.cli import add_workshop_command

    add_workshop_command(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say = lambda text: print(f"minipipe {args.command}: {text}", file=sys.stderr)  # noqa: E731
    try:
        return args.func(args)
    except ValueError as e:  # bad input, a damaged checkpoint: what to change
        say(f"error: {e}")
        return 2
    except RuntimeError as e:  # the engine's own account (a WorkerError): which rank, where, why
        from .engine.diagnosis import WorkerError  # here, not at the top: simulate and plan run without torch

        if not isinstance(e, WorkerError):
            raise
        say(str(e))
        return 1
    except OSError as e:  # a write that failed after the checks: a full disk, a vanished folder
        say(f"{e.filename}: {(e.strerror or str(e)).lower()}" if e.filename else f"{e}")
        return 1
    except KeyboardInterrupt:  # launch's finally has stopped the workers by now
        say("interrupted (Ctrl-C); every worker process was stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
