"""Checks for a GPU machine, in a few minutes: `python -m minipipe.bench.gpu_check` (or
benchmarks/gpu_check.sh). Works with one GPU or several:

1. same math: one stage's forward and backward on CUDA against the CPU (fp32, TF32 off);
2. stage timing with CUDA events: forward / backward ms of each stage of the tiny GPT;
3. calibration: those times as simulator costs, and the simulated bubble they imply for a
   4-rank 1F1B / interleaved pipeline (next to the textbook value);
4. one GPU per rank: a run through `minipipe.run` on min(GPUs, 4) ranks over NCCL (CUDA-event
   traces), whose losses must match a one-process CPU run;
5. shared GPUs: more ranks than GPUs (4 on 1 GPU; GPUs + 1 when there are 4 or more), which
   share them round robin and exchange tensors through host memory over gloo (placement.place);
   losses must match a one-process CPU run too;
6. a lesson as a workshop participant given one GPU runs it: lesson 00, headless, with
   CUDA_VISIBLE_DEVICES naming one GPU; its 2-rank run (device "auto", as every lesson) must have
   used that GPU, both ranks on it, and every assert in the lesson must hold.

`--device cpu` runs the same code on the CPU (the test suite does, so it cannot rot).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from ..engine.config import RunConfig
from ..engine.partition import partition
from ..models.catalog import make_task
from ..schedule import theory
from ..schedule.kinds import make_schedule
from ..sim.costs import Costs
from ..sim.pipeline import simulate


def stage_times(stage: nn.Module, x: torch.Tensor, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median forward and backward ms of one stage on one micro-batch."""
    fwd, bwd = [], []
    for _ in range(repeats):
        inp = x.detach().requires_grad_(x.is_floating_point())
        if device.type == "cuda":
            events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            events[0].record()
            out = stage(inp)
            events[1].record()
            out.backward(torch.ones_like(out))
            events[2].record()
            torch.cuda.synchronize()
            fwd.append(events[0].elapsed_time(events[1]))
            bwd.append(events[1].elapsed_time(events[2]))
        else:
            t0 = time.perf_counter()
            out = stage(inp)
            t1 = time.perf_counter()
            out.backward(torch.ones_like(out))
            t2 = time.perf_counter()
            fwd.append(1000 * (t1 - t0))
            bwd.append(1000 * (t2 - t1))
        stage.zero_grad(set_to_none=True)
    return statistics.median(fwd), statistics.median(bwd)


def same_math(task, device: torch.device) -> float:
    """Largest relative difference of one stage's output and gradients, device vs CPU."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    layers = task.layers()
    x, _ = task.batch(0)
    h = layers[0](x).detach()  # the input the second stage would receive
    cpu = nn.Sequential(*layers[1:3])
    gpu = nn.Sequential(*task.layers()[1:3]).to(device)
    worst = 0.0
    outs, grads = [], []
    for module, dev in ((cpu, torch.device("cpu")), (gpu, device)):
        inp = h.to(dev).requires_grad_(True)
        out = module(inp)
        out.backward(torch.ones_like(out))
        outs.append(out.detach().cpu())
        grads.append([inp.grad.cpu()] + [p.grad.cpu() for p in module.parameters()])
    for a, b in zip([outs[0]] + grads[0], [outs[1]] + grads[1]):
        worst = max(worst, ((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item())
    return worst


def modes(device: torch.device) -> tuple[int, int]:
    """Ranks for the two ways to run: one GPU per rank, and more ranks than GPUs (shared). On
    the CPU (a dry run), 1 and 2 ranks."""
    if device.type != "cuda":
        return 1, 2
    gpus = torch.cuda.device_count()
    return min(gpus, 4), 4 if gpus < 4 else gpus + 1


def run_on_ranks(number: int, p: int, device: str, size: dict, batch_size: int) -> float:
    """Train 3 steps on p ranks and on one CPU process; the largest relative loss difference."""
    from ..engine.launch import run

    m = 2 * p  # 1f1b needs m >= p
    config = RunConfig(
        schedule="1f1b",
        p=p,
        m=m,
        model="gpt",
        model_args={**size, "depth": max(size["depth"], p)},
        batch_size=max(batch_size // m, 1) * m,
        steps=3,
        optimizer="sgd",
        lr=0.05,
    )
    notes = []
    result = run(config.replace(device=device), progress=lambda e: e["kind"] == "note" and notes.append(e["text"]))
    reference = run(config.replace(p=1, device="cpu"))
    diff = max(abs(a - b) / abs(b) for a, b in zip(result.losses, reference.losses))
    plan, trace = result.plan, result.traces[-1]
    gpus = ", ".join(f"cuda:{g}" for g in plan.gpus) or "cpu"
    print(
        f"{number}. minipipe.run, {p} rank{'s' if p > 1 else ''} on {gpus} ({plan.backend}): losses "
        f"{[round(x, 5) for x in result.losses]}, largest relative difference from one CPU process "
        f"{diff:.2e}; last step {trace.makespan:.3f} ms over {len(trace.events)} actions"
    )
    for note in notes:
        print(f"   note: {note}")
    return diff


LESSON = Path(__file__).resolve().parents[2] / "lessons" / "00_start_here.ipynb"


def lesson_on_one_gpu(number: int, device: torch.device, lesson: Path = LESSON) -> bool:
    """Run `lesson` top to bottom in a fresh kernel that sees one GPU (on the CPU, a dry run: none),
    then ask where its run went. True when it ran where a participant's would: both ranks on the GPU."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    from ..course.exercises.notebook import execute_here

    nb = nbformat.read(lesson, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print(result.plan.device, list(result.plan.gpus), result.plan.where)"))
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0] if device.type == "cuda" else ""
    start = time.perf_counter()
    try:
        execute_here(nb, lesson.parent, 600, env=dict(os.environ, CUDA_VISIBLE_DEVICES=first))
    except CellExecutionError as e:
        print(f"{number}. {lesson.stem} with CUDA_VISIBLE_DEVICES={first!r}: FAILED\n{str(e)[-1500:]}")
        return False
    said = "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()
    where = said.split(" ", 2)
    ok = where[:2] == (["cuda", "[0, 0]"] if device.type == "cuda" else ["cpu", "[]"])
    print(
        f"{number}. {lesson.stem} with CUDA_VISIBLE_DEVICES={first!r}, every assert held, in "
        f"{time.perf_counter() - start:.0f} s; its 2-rank run: {said}"
        f"{'' if ok else '  <- expected both ranks on the GPU'}"
    )
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    parser.add_argument("--quick", action="store_true", help="a small model and few repeats")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU visible: nothing to check (use --device cpu for a dry run)")
        return 1
    device = torch.device(args.device)
    size = dict(depth=2, width=32) if args.quick else dict(depth=8, width=256, heads=8, block=64, vocab=64)
    task = make_task("gpt", batch_size=64 if not args.quick else 16, **size)
    print(
        f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; torch {torch.__version__}"
    )
    print(f"model: {task.describe()}")

    worst = same_math(task, device)
    print(f"1. one stage on {device.type} vs cpu: largest relative difference {worst:.2e}")

    p, m = 4, 8
    layers = [layer.to(device) for layer in task.layers()]
    cut = partition(layers, p, "params")
    x, _ = task.batch(0)
    h = x[: task.batch_size // m].to(device)
    f_ms, b_ms = [], []
    for s in range(p):
        stage = nn.Sequential(*(layers[i] for i in cut.layers_of(s)))
        f, b = stage_times(stage, h, 5 if args.quick else 30, device)
        f_ms.append(f)
        b_ms.append(b)
        with torch.no_grad():
            h = stage(h)
        print(
            f"2. stage {s} (layers {cut.bounds[s]}..{cut.bounds[s + 1] - 1}): forward {f:.3f} ms, backward {b:.3f} ms"
        )

    costs = Costs(forward=f_ms, backward=b_ms)
    for kind, v in (("1f1b", 1), ("interleaved", 2)):
        schedule = make_schedule(kind, p, m, v)
        stage_costs = (
            costs
            if v == 1
            else Costs(
                forward=[f / v for f in f_ms for _ in range(v)], backward=[b / v for b in b_ms for _ in range(v)]
            )
        )
        trace = simulate(schedule, stage_costs)
        print(
            f"3. calibrated {kind} p={p} m={m}: simulated step {trace.makespan:.3f} ms, bubble "
            f"{trace.bubble():.1%} (textbook {theory.bubble_fraction(kind, p, m, v):.1%})"
        )

    diffs = [run_on_ranks(n, ranks, args.device, size, task.batch_size) for n, ranks in enumerate(modes(device), 4)]
    lesson_ok = lesson_on_one_gpu(6, device)
    ok = worst < 1e-4 and max(diffs) < 1e-4 and lesson_ok
    print("all checks passed" if ok else "a check FAILED: see above")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
