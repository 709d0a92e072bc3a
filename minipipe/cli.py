"""`minipipe simulate | train | compare | bench | plan | check | serve | workshop`: the engine from a terminal.

Every way a command ends is one message and an exit code (EXIT_CODES; `minipipe --help` lists them):
bad input exits 2 with what to change, before anything runs (output paths are checked first), a
run that failed exits 1 with the engine's words for it, Ctrl-C exits 130.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from .bench.cli import add_bench_command  # nothing of the benchmark is imported until it runs
from .outputs import writable_file
from .planner.cli import add_arguments as add_plan_arguments
from .schedule import kinds, theory
from .schedule.kinds import make_schedule
from .serve.cli import add_serve_command  # nothing of serving is imported until it runs
from .sim.costs import Costs
from .sim.measured_costs import calibrate
from .sim.pipeline import simulate

EXIT_CODES = {0: "done: the command did what it was asked",
              1: "failed: the run stopped (a rank failed, a file could not be written), or the answer is no "
                 "(plan: no layout fits; check: a check did not pass)",
              2: "bad input: nothing was run; the message says what to change",
              130: "interrupted: Ctrl-C; every worker process was stopped"}


def add_schedule_args(parser: argparse.ArgumentParser) -> None:
    menu = "; ".join(f"{k.name}: {k.summary}" for k in kinds.KINDS.values())
    parser.add_argument("--schedule", "-s", default="1f1b", help=f"the schedule kind (default 1f1b) — {menu}")
    parser.add_argument("-p", "--ranks", type=int, default=2, dest="p", help="pipeline ranks (default 2)")
    parser.add_argument("-m", "--microbatches", type=int, default=4, dest="m",
                        help="micro-batches per step (default 4)")
    several = ", ".join(f"{k.name} (default {k.default_v})" for k in kinds.KINDS.values() if k.takes_v)
    parser.add_argument("-v", "--virtual", type=int, default=None, dest="v",
                        help=f"stages per rank, for kinds that take several: {several or 'none'}; else 1")


def textbook(kind: str, formula, *args, **kw):
    """A theory figure, or None when the kind has no formula for it (or its formula does not hold here)."""
    try:
        return formula(kind, *args, **kw)
    except ValueError:
        return None


def cmd_simulate(args) -> int:
    if args.chrome:
        writable_file(args.chrome, "--chrome")
    if args.slow_factor is not None and args.slow_stage is None:
        raise ValueError(f"--slow-factor {args.slow_factor:g} slows the stage --slow-stage names; give --slow-stage "
                         f"too (e.g. --slow-stage 1 --slow-factor {args.slow_factor:g})")
    factor = 1.5 if args.slow_factor is None else args.slow_factor
    scale = {args.slow_stage: factor} if args.slow_stage is not None else {}
    costs = Costs(forward=args.forward, backward=args.backward, weight=args.weight, latency=args.latency,
                  stage_scale=scale, overlap=args.overlap)
    if args.all_kinds:
        from .sim.survey import survey, table

        print(f"every kind on p={args.p}, m={args.m}: step and idle in the costs' unit, peak in micro-batches of a "
              f"rank's share")
        print(table(survey(args.p, args.m, costs)))
        return 0
    schedule = make_schedule(args.schedule, args.p, args.m, args.v, steps=args.steps)
    trace = simulate(schedule, costs)
    print(schedule.to_text())
    print(schedule)
    print()
    uniform = not scale
    s = schedule
    if s.updates is not None:
        print(trace.summary())
        if uniform:
            run_summary(s, trace, args)
        if args.chrome:
            trace.to_chrome(args.chrome)
            print(f"Chrome trace written to {args.chrome} (open it in https://ui.perfetto.dev)")
        return 0
    paired = bool(s.paired) and args.overlap > 0     # pairs that overlap do less work: no idle-share formula
    bubble = textbook(s.kind, theory.bubble_fraction, s.p, s.m, s.v, args.forward, args.backward, args.weight) \
        if uniform and not paired else None
    print(trace.summary(theory=bubble))
    if uniform and (span := textbook(s.kind, theory.makespan, s.p, s.m, s.v, args.forward, args.backward,
                                     args.weight, args.overlap)) is not None:
        print(f"  makespan, theory: {span:g}")
    peaks = [textbook(s.kind, theory.peak_inflight, s.p, s.m, r, s.v) for r in range(s.p)]
    if None not in peaks:
        print(f"  peak in-flight micro-batches per rank, theory: {peaks}")
    if args.chrome:
        os.makedirs(os.path.dirname(args.chrome) or ".", exist_ok=True)     # as writable_file allowed
        trace.to_chrome(args.chrome)
        print(f"Chrome trace written to {args.chrome} (open it in https://ui.perfetto.dev)")
    return 0


def run_summary(s, trace, args) -> None:
    """A schedule of several steps: the run's theory beside the simulation, and what it keeps."""
    m, steps, f, b = s.updates.per_step, s.steps, args.forward, args.backward
    span = textbook(s.kind, theory.run_makespan, s.p, m, steps, s.v, f, b, args.weight)
    if span is not None:
        print(f"  {steps} steps of m={m}, theory: makespan {span:g}, bubble {1 - s.m * (f + b) / span:.1%}")
    flushed = textbook("1f1b", theory.run_makespan, s.p, m, steps, 1, f, b)
    if kinds.get(s.kind).asynchronous is not None and flushed is not None:
        print(f"  flushed 1F1B, the same {steps} steps: makespan {flushed:g} "
              f"({flushed / trace.makespan:.2f}x this run)")
    print(f"  weight versions held per rank: simulated {trace.peak_weight_versions()}, theory "
          f"{[textbook(s.kind, theory.weight_versions, s.p, m, r, steps) for r in range(s.p)]}")
    stale = [textbook(s.kind, theory.staleness, s.p, m, r) for r in range(s.p)]
    print(f"  staleness per rank (updates between a gradient's weights and the weights it updates): {stale}; "
          f"one update is {'one micro-batch' if s.updates.per_update == 1 else f'one step of {m} micro-batches'}")


def cmd_train(args) -> int:
    from .engine.config import RunConfig
    from .engine.torchrun import run_torchrun, under_torchrun

    writable_file(args.trace, "--trace")           # before training: a typo must not throw a finished run away
    if args.json:
        writable_file(args.json, "--json")
    config = RunConfig(schedule=args.schedule, p=args.p, m=args.m, v=args.v, model=args.model,
                       model_args=dict(kv for kv in args.model_arg), batch_size=args.batch_size, steps=args.steps,
                       seed=args.seed, optimizer=args.optimizer, lr=args.lr, partition=args.partition,
                       device=args.device, backend=args.backend, timeout=args.timeout,
                       startup_timeout=args.startup_timeout, dp=args.dp, cp=args.cp, tp=args.tp,
                       dp_overlap=not args.no_dp_overlap, oversubscribe=args.oversubscribe,
                       trace_steps=min(10, args.steps), recompute=args.recompute,
                       checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every, resume=args.resume)
    if under_torchrun():
        result = run_torchrun(config, progress=_printer(args.steps))
        if result is None:
            return 0     # not rank 0: rank 0 reports
    else:
        from tqdm import tqdm

        from .engine.launch import run

        bars = []        # made at the first event, so that bad input's message comes alone

        def bar():
            if not bars:
                bars.append(tqdm(total=args.steps, desc=f"{args.schedule} p={args.p} m={args.m}", unit="step"))
            return bars[0]

        def progress(event):
            if event["kind"] == "step":
                bar().update(1)
                bar().set_postfix(loss=f"{event['loss']:.4f}")
            elif event["kind"] == "note":
                bar().write(f"note: {event['text']}")

        try:
            result = run(config, progress=progress)
        finally:
            if bars:
                bars[0].close()
    report_run(result, args)
    return 0


def cmd_compare(args) -> int:
    from .compare import compare, configs, table

    settings = dict(model=args.model, model_args=dict(kv for kv in args.model_arg), m=args.m,
                    batch_size=args.batch_size, steps=args.steps, schedule=args.schedule, timeout=args.timeout,
                    cp=args.cp)
    _, skipped = configs(args.world, **settings)
    print(f"every layout of {args.world} processes that fits, {args.steps} steps each (median step after the first):")
    print(table(compare(args.world, **settings), skipped))
    return 0


def cmd_check(args) -> int:
    """Exit 0 only when every check of every notebook passed (minipipe/course/exercises/notebook.py)."""
    from .course.exercises.notebook import check_notebooks

    return check_notebooks(args.paths, timeout=args.timeout)


def _printer(steps):
    def progress(event):
        if event.get("kind") == "note":
            print(f"note: {event['text']}", flush=True)
        if event.get("kind") == "step" and (event["step"] % max(1, steps // 10) == 0 or event["step"] == steps - 1):
            print(f"step {event['step']:>5}  loss {event['loss']:.4f}", flush=True)
    return progress


def report_run(result, args) -> None:
    plan, traces, trace = result.plan, result.traces, result.traces[-1]
    s = plan.schedule
    m = s.m if s.updates is None else f"{s.updates.per_step} (× {s.steps} steps without a flush)"
    print(f"\n{s.kind} p={s.p} m={m} v={s.v} on {plan.backend}/{plan.device}; {plan.partition.report()}")
    print(f"loss: step 0 {result.losses[0]:.4f} -> step {len(result.losses) - 1} {result.losses[-1]:.4f}")
    simulated = simulate(s, calibrate(traces))      # op times: medians over the traced steps
    makespan = statistics.median(t.makespan for t in traces)
    bubble = statistics.median(t.bubble() for t in traces)
    ideal = textbook(s.kind, theory.bubble_fraction, s.p, s.m, s.v)
    which = "the whole run" if s.updates is not None else f"last {len(traces)} steps, median"
    print(f"{which}: makespan {makespan:.2f} ms "
          f"(simulated from their op times and message latency: {simulated.makespan:.2f} ms)")
    print(f"bubble: measured {bubble:.1%}   simulated {simulated.bubble():.1%}"
          + (f"   theory {ideal:.1%}" if ideal is not None else ""))
    print(f"peak micro-batches held per rank: {result.peak_held}")
    if s.updates is not None:
        print(f"no flush: {s.steps} steps in one trace; weight versions held per rank: {result.weight_versions} "
              f"(stashed besides the live weights: {', '.join(f'{m.stashed_weights:,} B' for m in result.memory)})")
    print(f"peak activation bytes per rank: {', '.join(f'{b:,}' for b in result.peak_bytes)}"
          + (f" (recompute: {plan.config.recompute})" if plan.config.recompute.on else ""))
    if plan.mesh.world > plan.mesh.pp:
        print(f"\n{plan.mesh}\nbytes sent in the last step, by kind:")
        for r, sent in enumerate(result.traffic()):
            print(f"  rank {r} ({plan.mesh.label(r)}): " + ", ".join(f"{k} {v:,.0f}" for k, v in sent.items() if v))
    print()
    print(trace.ascii(width=100))
    os.makedirs(os.path.dirname(args.trace) or ".", exist_ok=True)
    trace.to_chrome(args.trace)
    what = "the whole run (no flush: its steps overlap)" if s.updates is not None else "the last step"
    print(f"\nChrome trace of {what}: {args.trace} (open in https://ui.perfetto.dev)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"losses": result.losses, "first_step": result.first_step, "bubble": bubble,
                       "makespan_ms": makespan,
                       "simulated_bubble": simulated.bubble(), "theory_bubble": ideal}, f, indent=1)


def _model_arg(text: str):
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER such as width=64, got {text!r}")
    return key, int(value.strip())


def build_parser() -> argparse.ArgumentParser:
    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    parser = argparse.ArgumentParser(prog="minipipe", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"exit codes:\n{codes}")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="print a schedule's grid, its simulated bubble and memory")
    add_schedule_args(sim)
    sim.add_argument("--forward", type=float, default=1.0,
                     help="forward time of one micro-batch through a rank's share of the model (default 1)")
    sim.add_argument("--backward", type=float, default=2.0, help="backward time, likewise (default 2)")
    sim.add_argument("--weight", type=float, default=None,
                     help="the weight-gradient part of backward, for schedules that split it (default: half)")
    sim.add_argument("--latency", type=float, default=0.0, help="time per point-to-point message")
    sim.add_argument("--overlap", type=float, default=0.0,
                     help="for schedules that pair a forward with a backward (dualpipe-v): the share of the shorter "
                          "hidden under the longer, 0 (one stream, a CPU) to 1 (default 0)")
    sim.add_argument("--slow-stage", type=int, default=None, help="make this stage slower ...")
    sim.add_argument("--slow-factor", type=float, default=None, help="... by this factor (default 1.5)")
    sim.add_argument("--chrome", default=None, metavar="PATH", help="also write a Chrome trace JSON here")
    sim.add_argument("--steps", type=int, default=None,
                     help="training steps in one schedule: pipedream and pipedream-2bw run several without a flush "
                          "(default 3); a flushed kind's step repeated (default: one step)")
    sim.add_argument("--all-kinds", action="store_true",
                     help="simulate every registered kind on these p, m and costs instead: step, bubble, peak memory")
    sim.set_defaults(func=cmd_simulate)

    train = sub.add_parser("train",
                           help="train on p local processes (or under torchrun) and show the measured pipeline")
    add_schedule_args(train)
    train.add_argument("--model", default="mlp",
                       help="mlp, gpt, or your own as package.module:function (default mlp; see the README)")
    train.add_argument("--model-arg", action="append", type=_model_arg, default=[], metavar="NAME=INT",
                       help="model size, e.g. --model-arg width=64 --model-arg depth=8")
    train.add_argument("--dp", type=int, default=1, help="data-parallel replicas (default 1); processes = p·dp·cp·tp")
    train.add_argument("--cp", type=int, default=1,
                       help="context-parallel ranks: each sequence split over them, attention by a ring (default 1)")
    train.add_argument("--tp", type=int, default=1, help="tensor-parallel shards of every layer (default 1)")
    train.add_argument("--no-dp-overlap", action="store_true",
                       help="all-reduce the gradients after the backward instead of during it")
    train.add_argument("--oversubscribe", action="store_true",
                       help="allow more than 4 processes per CPU core")
    train.add_argument("--recompute", nargs="?", const="stage", default="none", metavar="WHAT",
                       help="activation recomputation: 'stage' (the default when given alone) keeps only each "
                            "stage's input and runs its forward again in the backward; a list of layer indices "
                            "such as 1,2,5 recomputes those layers; 'none' (default) keeps everything")
    train.add_argument("--steps", type=int, default=50)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--optimizer", default="adam", help="adam or sgd")
    train.add_argument("--lr", type=float, default=3e-3)
    train.add_argument("--partition", default="uniform", help="uniform, params or time")
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--backend", default="auto", help="auto, gloo or nccl")
    train.add_argument("--timeout", type=float, default=60.0, help="seconds a rank may wait for a peer, in a step")
    train.add_argument("--startup-timeout", type=float, default=300.0,
                       help="seconds the ranks may take to start: find each other, build the model (default 300)")
    train.add_argument("--checkpoint-dir", default=None, metavar="FOLDER",
                       help="save checkpoints here (a folder of its own for each run: "
                            "it is locked while the run lives)")
    train.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                       help="steps between checkpoints (default 0: only after the last step)")
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest intact checkpoint in --checkpoint-dir (none yet: start at step "
                            "0); under torchrun --max-restarts, each restart resumes so")
    train.add_argument("--trace", default="runs/trace.json", help="where to write the Chrome trace")
    train.add_argument("--json", default=None, help="also write losses and bubbles as JSON here")
    train.set_defaults(func=cmd_train)

    cmp = sub.add_parser("compare",
                         help="pipeline vs tensor vs data parallelism: every layout of N processes, measured")
    cmp.add_argument("--world", type=int, default=4, help="processes (default 4)")
    cmp.add_argument("--schedule", "-s", default="1f1b", help="the pipeline schedule of layouts with p > 1")
    cmp.add_argument("-m", "--microbatches", type=int, default=4, dest="m", help="micro-batches per step (default 4)")
    cmp.add_argument("--model", default="gpt", help="mlp, gpt or moe (default gpt; moe adds the layouts with ep)")
    cmp.add_argument("--model-arg", action="append", type=_model_arg, default=[], metavar="NAME=INT",
                     help="model size, e.g. --model-arg width=64 --model-arg depth=8")
    cmp.add_argument("--batch-size", type=int, default=32)
    cmp.add_argument("--steps", type=int, default=8)
    cmp.add_argument("--timeout", type=float, default=60.0)
    cmp.add_argument("--cp", action="store_true",
                     help="also the layouts with context parallelism (each sequence split, attention by a ring)")
    cmp.set_defaults(func=cmd_compare)

    add_bench_command(sub)

    add_plan_arguments(sub.add_parser("plan", help="the fastest pipeline × tensor × data layouts for a real model "
                                                   "and cluster, predicted (no processes)"))

    check = sub.add_parser("check", help="run exercise notebooks headless and print their checks' verdicts")
    check.add_argument("paths", nargs="+", metavar="PATH",
                       help="exercise notebooks (exercises/03_one_f_one_b.ipynb) or folders of them (exercises/)")
    check.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    check.set_defaults(func=cmd_check)

    add_serve_command(sub, _model_arg)

    from .workshop.cli import add_workshop_command
    add_workshop_command(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say = lambda text: print(f"minipipe {args.command}: {text}", file=sys.stderr)   # noqa: E731
    try:
        return args.func(args)
    except ValueError as e:            # bad input, a damaged checkpoint: what to change
        say(f"error: {e}")
        return 2
    except RuntimeError as e:          # the engine's own account (a WorkerError): which rank, where, why
        from .engine.diagnosis import WorkerError  # here, not at the top: simulate and plan run without torch
        if not isinstance(e, WorkerError):
            raise
        say(str(e))
        return 1
    except OSError as e:               # a write that failed after the checks: a full disk, a vanished folder
        say(f"{e.filename}: {(e.strerror or str(e)).lower()}" if e.filename else f"{e}")
        return 1
    except KeyboardInterrupt:          # launch's finally has stopped the workers by now
        say("interrupted (Ctrl-C); every worker process was stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
