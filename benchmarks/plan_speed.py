"""How fast the planner answers (target: a search over >= 10^4 layouts in under 0.5 s, so the planner
widget answers as a slider moves). Prints figures only: per preset case, the layouts the search
considered (predicted, and left out unpredicted because a smaller sibling did not fit), the time of
the search alone (the closed forms; best of the repeats, wall and CPU), the layouts per second, the
time with its default refinement (the top cuts replayed by the simulator), and the wall time of the
whole `minipipe plan` command, interpreter start included. Timings on a shared machine are noisy:
compare figures from one run."""

import statistics
import subprocess
import sys
import time

from minipipe.planner.search import search
from minipipe.planner.setup_and_layout import make_setup

CASES = [
    ("gpt3-175b", 1024, "a100-80gb"),
    ("llama2-7b", 64, "h100-sxm"),
    ("llama2-70b", 256, "h100-sxm"),
    ("llama3-405b", 8192, "h100-sxm"),
]


def best_of(fn, repeats):
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def main(quick: bool = False):
    repeats = 2 if quick else 5
    for model, gpus, gpu in CASES:
        setup = make_setup(model, gpus, gpu)
        result = search(setup, refine=0)
        wall, cpu = best_of(lambda: search(setup, refine=0), repeats)
        refined, _ = best_of(lambda: search(setup, refine=10), 1 if quick else 2)
        print(
            f"{model:<12} on {gpus:>5} × {gpu:<10} {result.considered:>6} layouts considered "
            f"({result.predicted} predicted): search {1000 * wall:6.0f} ms wall, {1000 * cpu:6.0f} ms CPU "
            f"= {result.considered / wall:>7,.0f} layouts/s; with the top 10 cuts replayed {1000 * refined:6.0f} ms"
        )
    cmd = [sys.executable, "-m", "minipipe", "plan", "--model", "gpt3-175b", "--gpus", "1024", "--gpu", "a100-80gb"]
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        runs.append(time.perf_counter() - t0)
    print(
        f"`minipipe plan --model gpt3-175b --gpus 1024 --gpu a100-80gb`, whole command: "
        f"{1000 * statistics.median(runs):.0f} ms (median of {repeats})"
    )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
