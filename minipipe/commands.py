"""What `minipipe simulate`, `train`, `compare` and `check` do once cli.py has read their arguments:
the schedule's grid with its simulation beside the textbook's numbers; a training run with its
progress, then its report (measured beside simulated, the memory, the bytes sent, the trace); every
layout of N processes compared; the exercise notebooks checked. Each returns its exit code, and
raises what cli.main turns into one (ValueError: bad input, exit 2; the engine's WorkerError: 1).
"""

from __future__ import annotations

import json
import os
import statistics

from .outputs import writable_file
from .schedule import kinds, theory
from .schedule.kinds import make_schedule
from .sim.costs import Costs
from .sim.measured_costs import calibrate
from .sim.pipeline import simulate


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
        raise ValueError(
            f"--slow-factor {args.slow_factor:g} slows the stage --slow-stage names; give --slow-stage "
            f"too (e.g. --slow-stage 1 --slow-factor {args.slow_factor:g})"
        )
    factor = 1.5 if args.slow_factor is None else args.slow_factor
    scale = {args.slow_stage: factor} if args.slow_stage is not None else {}
    costs = Costs(
        forward=args.forward,
        backward=args.backward,
        weight=args.weight,
        latency=args.latency,
        stage_scale=scale,
        overlap=args.overlap,
    )
    if args.all_kinds:
        from .sim.survey import survey, table

        print(
            f"every kind on p={args.p}, m={args.m}: step and idle in the costs' unit, peak in micro-batches of a "
            f"rank's share"
        )
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
    paired = bool(s.paired) and args.overlap > 0  # pairs that overlap do less work: no idle-share formula
    bubble = (
        textbook(s.kind, theory.bubble_fraction, s.p, s.m, s.v, args.forward, args.backward, args.weight)
        if uniform and not paired
        else None
    )
    print(trace.summary(theory=bubble))
    if (
        uniform
        and (
            span := textbook(
                s.kind, theory.makespan, s.p, s.m, s.v, args.forward, args.backward, args.weight, args.overlap
            )
        )
        is not None
    ):
        print(f"  makespan, theory: {span:g}")
    peaks = [textbook(s.kind, theory.peak_inflight, s.p, s.m, r, s.v) for r in range(s.p)]
    if None not in peaks:
        print(f"  peak in-flight micro-batches per rank, theory: {peaks}")
    if args.chrome:
        os.makedirs(os.path.dirname(args.chrome) or ".", exist_ok=True)  # as writable_file allowed
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
        print(
            f"  flushed 1F1B, the same {steps} steps: makespan {flushed:g} ({flushed / trace.makespan:.2f}x this run)"
        )
    print(
        f"  weight versions held per rank: simulated {trace.peak_weight_versions()}, theory "
        f"{[textbook(s.kind, theory.weight_versions, s.p, m, r, steps) for r in range(s.p)]}"
    )
    stale = [textbook(s.kind, theory.staleness, s.p, m, r) for r in range(s.p)]
    print(
        f"  staleness per rank (updates between a gradient's weights and the weights it updates): {stale}; "
        f"one update is {'one micro-batch' if s.updates.per_update == 1 else f'one step of {m} micro-batches'}"
    )


def cmd_train(args) -> int:
    from .engine.config import RunConfig
    from .engine.torchrun import run_torchrun, under_torchrun

    writable_file(args.trace, "--trace")  # before training: a typo must not throw a finished run away
    if args.json:
        writable_file(args.json, "--json")
    config = RunConfig(
        schedule=args.schedule,
        p=args.p,
        m=args.m,
        v=args.v,
        model=args.model,
        model_args=dict(kv for kv in args.model_arg),
        batch_size=args.batch_size,
        steps=args.steps,
        seed=args.seed,
        optimizer=args.optimizer,
        lr=args.lr,
        partition=args.partition,
        device=args.device,
        backend=args.backend,
        timeout=args.timeout,
        startup_timeout=args.startup_timeout,
        dp=args.dp,
        cp=args.cp,
        tp=args.tp,
        dp_overlap=not args.no_dp_overlap,
        oversubscribe=args.oversubscribe,
        trace_steps=min(10, args.steps),
        recompute=args.recompute,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
    )
    if under_torchrun():
        result = run_torchrun(config, progress=_printer(args.steps))
        if result is None:
            return 0  # not rank 0: rank 0 reports
    else:
        from tqdm import tqdm

        from .engine.launch import run

        bars = []  # made at the first event, so that bad input's message comes alone

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

    settings = dict(
        model=args.model,
        model_args=dict(kv for kv in args.model_arg),
        m=args.m,
        batch_size=args.batch_size,
        steps=args.steps,
        schedule=args.schedule,
        timeout=args.timeout,
        cp=args.cp,
    )
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
    simulated = simulate(s, calibrate(traces))  # op times: medians over the traced steps
    makespan = statistics.median(t.makespan for t in traces)
    bubble = statistics.median(t.bubble() for t in traces)
    ideal = textbook(s.kind, theory.bubble_fraction, s.p, s.m, s.v)
    which = "the whole run" if s.updates is not None else f"last {len(traces)} steps, median"
    print(
        f"{which}: makespan {makespan:.2f} ms "
        f"(simulated from their op times and message latency: {simulated.makespan:.2f} ms)"
    )
    print(
        f"bubble: measured {bubble:.1%}   simulated {simulated.bubble():.1%}"
        + (f"   theory {ideal:.1%}" if ideal is not None else "")
    )
    print(f"peak micro-batches held per rank: {result.peak_held}")
    if s.updates is not None:
        print(
            f"no flush: {s.steps} steps in one trace; weight versions held per rank: {result.weight_versions} "
            f"(stashed besides the live weights: {', '.join(f'{m.stashed_weights:,} B' for m in result.memory)})"
        )
    print(
        f"peak activation bytes per rank: {', '.join(f'{b:,}' for b in result.peak_bytes)}"
        + (f" (recompute: {plan.config.recompute})" if plan.config.recompute.on else "")
    )
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
            json.dump(
                {
                    "losses": result.losses,
                    "first_step": result.first_step,
                    "bubble": bubble,
                    "makespan_ms": makespan,
                    "simulated_bubble": simulated.bubble(),
                    "theory_bubble": ideal,
                },
                f,
                indent=1,
            )
