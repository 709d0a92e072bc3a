"""`minipipe bench`: step times against the ideal, the machine's limit and torch's pipelining, from a
terminal (the suite in suite.py, the mesh's in dp_tp_vs_torch.py; imported when the command runs)."""

from __future__ import annotations

import sys
import time


def add_bench_command(sub) -> None:
    bench = sub.add_parser("bench", help="step times against the ideal, the machine's limit and torch's pipelining")
    bench.add_argument("--quick", action="store_true", help="small models, one round (for CI)")
    bench.add_argument(
        "--rounds", type=int, default=None, help="rounds, each one step of every configuration (default 15)"
    )
    bench.add_argument("--no-torch", action="store_true", help="skip torch.distributed.pipelining")
    bench.add_argument(
        "--no-mesh",
        action="store_true",
        help="skip data and tensor parallelism on 4 processes (against torch's DDP and tensor parallel)",
    )
    bench.set_defaults(func=cmd_bench)


class BenchProgress:
    """The benchmark's progress: a bar on a terminal; in a log (not a terminal), one line per
    configuration when its rounds are done, rather than hundreds of carriage-return updates."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc="benchmark rounds", unit="round", file=self.stream)
        else:
            self.bar = None

    def __call__(self, event: dict) -> None:
        if event["kind"] != "round" or event.get("rank", 0) != 0:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(event["name"])
        elif event["round"] + 1 == event["of"]:
            print(
                f"bench: {event['name']}: {event['of']} rounds done ({time.monotonic() - self.started:.0f} s)",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def cmd_bench(args) -> int:
    from .dp_tp_vs_torch import mesh_report, run_mesh_bench
    from .suite import report, run_suite

    if args.rounds is not None and args.rounds < 1:
        raise ValueError(
            f"--rounds is how many rounds to measure, each one step of every configuration: a whole "
            f"number >= 1, got {args.rounds} (default 15; --quick: 2)"
        )
    progress = BenchProgress()
    try:
        results = run_suite(quick=args.quick, rounds=args.rounds, with_torch=not args.no_torch, progress=progress)
        mesh = None if args.no_mesh else run_mesh_bench(quick=args.quick, rounds=args.rounds, progress=progress)
    finally:
        progress.close()
    print(report(results))
    if mesh is not None:
        print(mesh_report(mesh))
    return 0
