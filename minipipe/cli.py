"""`minipipe simulate | train | bench`: the engine from a terminal.

Bad input exits with code 2 and a message that says what to change.
"""
from __future__ import annotations

import argparse
import sys

from . import theory
from .schedule import GENERATORS, make_schedule
from .simulate import Costs, simulate


def add_schedule_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", "-s", default="1f1b", help=f"one of {', '.join(GENERATORS)} (default 1f1b)")
    parser.add_argument("-p", "--ranks", type=int, default=2, dest="p", help="pipeline ranks (default 2)")
    parser.add_argument("-m", "--microbatches", type=int, default=4, dest="m", help="micro-batches per step (default 4)")
    parser.add_argument("-v", "--virtual", type=int, default=None, dest="v",
                        help="stages per rank (interleaved only; default 2 for interleaved, else 1)")


def stages_per_rank(args) -> int:
    if args.v is not None:
        return args.v
    return 2 if args.schedule.lower().startswith("interleaved") else 1


def cmd_simulate(args) -> int:
    schedule = make_schedule(args.schedule, args.p, args.m, stages_per_rank(args))
    scale = {args.slow_stage: args.slow_factor} if args.slow_stage is not None else {}
    trace = simulate(schedule, Costs(forward=args.forward, backward=args.backward, latency=args.latency,
                                     stage_scale=scale))
    print(schedule.to_text())
    print(schedule)
    print()
    print(trace.summary(theory=theory.bubble_fraction(schedule.kind, schedule.p, schedule.m, schedule.v)))
    peaks = [theory.peak_inflight(schedule.kind, schedule.p, schedule.m, r, schedule.v) for r in range(schedule.p)]
    print(f"  peak in-flight micro-batches per rank, theory: {peaks}")
    if args.chrome:
        trace.to_chrome(args.chrome)
        print(f"Chrome trace written to {args.chrome} (open it in https://ui.perfetto.dev)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minipipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="print a schedule's grid, its simulated bubble and memory")
    add_schedule_args(sim)
    sim.add_argument("--forward", type=float, default=1.0, help="forward time of one micro-batch on one stage")
    sim.add_argument("--backward", type=float, default=2.0, help="backward time of one micro-batch on one stage")
    sim.add_argument("--latency", type=float, default=0.0, help="time per point-to-point message")
    sim.add_argument("--slow-stage", type=int, default=None, help="make this stage slower ...")
    sim.add_argument("--slow-factor", type=float, default=1.5, help="... by this factor (default 1.5)")
    sim.add_argument("--chrome", default=None, metavar="PATH", help="also write a Chrome trace JSON here")
    sim.set_defaults(func=cmd_simulate)

    for extra in _EXTRA_COMMANDS:
        extra(sub)
    return parser


_EXTRA_COMMANDS: list = []


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"minipipe {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
