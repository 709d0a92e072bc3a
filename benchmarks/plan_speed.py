"""How long the planner takes (target: `minipipe plan` well under a second). Prints figures only:
the in-process time of plan() for each preset model on a typical cluster, and the wall time of
the whole command, interpreter start included."""
import statistics
import subprocess
import sys
import time

from minipipe.planner import plan

CASES = [("gpt3-175b", 1024, "a100-80gb"), ("llama2-7b", 64, "h100-sxm"), ("llama2-70b", 512, "h100-sxm"),
         ("llama3-405b", 8192, "h100-sxm")]


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(quick: bool = False):
    repeats = 3 if quick else 7
    for model, gpus, gpu in CASES:
        n = 0

        def once():
            nonlocal n
            result = plan(model, gpus, gpu)
            n = len(result.rows) + len(result.misses)

        print(f"plan {model:<12} on {gpus:>5} × {gpu:<10} {1000 * median_time(once, repeats):8.1f} ms "
              f"({n} layouts predicted; median of {repeats})")
    cmd = [sys.executable, "-m", "minipipe", "plan", "--model", "gpt3-175b", "--gpus", "1024", "--gpu", "a100-80gb"]
    wall = median_time(lambda: subprocess.run(cmd, check=True, capture_output=True), repeats)
    print(f"`minipipe plan --model gpt3-175b --gpus 1024 --gpu a100-80gb`, whole command: {1000 * wall:.0f} ms "
          f"(median of {repeats})")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
