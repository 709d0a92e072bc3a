"""How often exercise 08's checker refuses an honest timing of the layers (a false reject), and how
often it lets a guess through. Runs the checker's judgement of layer costs
(minipipe/course/exercises/layer_clock.py) `n`
times (default 100) on its three GPTs with honest timings of several kinds beside typed-in and
guessed lists, and prints each one's count of refusals. Run it on the machine in question, as busy
as it will be: `.venv/bin/python benchmarks/layer_clock_noise.py 200`. With `--sandboxed` the
timings run as when graded (grading/): in a sandbox under the exercise's watch, judged by the
checker's own `_weighs_time` in this process. Prints figures only."""

import statistics
import sys
import time
from collections import Counter

import torch

from minipipe.course.exercises import layer_clock
from minipipe.course.exercises.verdict import Mistake
from minipipe.models.catalog import make_task


def timed(layers, sample, repeats=7, skip=2, mean=False, backward=True):
    """A learner's timing: `repeats` runs of each layer, the first `skip` dropped, their median."""
    costs, x = [], sample
    for layer in layers:
        if x.is_floating_point():
            x = x.detach().requires_grad_()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = layer(x)
            if backward:
                out.sum().backward()
            times.append(time.perf_counter() - start)
        costs.append((statistics.mean if mean else statistics.median)(times[skip:]))
        with torch.no_grad():
            x = layer(x)
    return costs


HONEST = {
    "the solution (median of 5 after 2)": timed,
    "forward only": lambda layers, sample: timed(layers, sample, backward=False),
    "the mean of 3, no warm-up": lambda layers, sample: timed(layers, sample, repeats=3, skip=0, mean=True),
    "one run each, no warm-up": lambda layers, sample: timed(layers, sample, repeats=1, skip=0),
}
GUESSES = {
    "typed in: 0.1, then 1 a block, 3 the head": lambda layers, sample: [0.1] + [1.0] * (len(layers) - 2) + [3.0],
    "the head the cheapest": lambda layers, sample: [0.1] + [1.0] * (len(layers) - 2) + [0.05],
}


def sandboxed(n: int) -> None:
    """The checker's own judgement (`balance._weighs_time`), each timing run in a watched sandbox."""
    import shutil
    import tempfile

    import cloudpickle

    from minipipe.course.exercises import balance
    from minipipe.course.grading.judge import Client, Learner
    from minipipe.course.grading.run import allowlists
    from minipipe.course.grading.zygote import Zygote

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    fns = {**HONEST, **GUESSES}
    refused, start, zygote = Counter(), time.perf_counter(), Zygote()
    refusals = tempfile.mkdtemp(prefix="minipipe-refusals-")
    client = Client.start(None, allowlists("check_balance"), refusals, zygote)
    try:
        client.reply(client.request(("payload", cloudpickle.dumps(list(fns.values()))), "payload"), "payload")
        learners = [Learner(client, f"#{i}", "layer_costs") for i in range(len(fns))]
        torch.set_num_threads(1)
        for done in range(n):
            if done and done % 10 == 0:
                print(f"  {done} checks: " + ", ".join(f"{label} {refused[label]}" for label in fns), flush=True)
            for label, learner in zip(fns, learners):
                try:
                    balance._weighs_time(learner)
                except Mistake:
                    refused[label] += 1
    finally:
        client.stop()
        shutil.rmtree(refusals, ignore_errors=True)
    print(f"{n} checks each, sandboxed, {time.perf_counter() - start:.0f} s, ratio {layer_clock.RATIO:g}:")
    for label in fns:
        kind = "honest" if label in HONEST else "guess "
        print(f"  {kind} {label:<45} refused {refused[label]:4d} of {n}")


def main(n: int = 100):
    torch.set_num_threads(1)  # as the checker runs
    gpts = []
    for args in layer_clock.GPTS.values():
        task = make_task("gpt", batch_size=64, **args)
        gpts.append((task.layers(), task.batch(0)[0][:8]))
    refused, start = Counter(), time.perf_counter()
    for done in range(n):
        if done and done % 10 == 0:  # so far, for a run stopped early
            print(
                f"  {done} checks: " + ", ".join(f"{label} {refused[label]}" for label in {**HONEST, **GUESSES}),
                flush=True,
            )
        for label, fn in {**HONEST, **GUESSES}.items():
            seen = []
            for (layers, sample), gpt in zip(gpts, layer_clock.GPTS):
                before = layer_clock.measure(layers, sample)
                costs = fn(layers, sample)
                seen.append(layer_clock.Weighed(gpt, layers, costs, before, layer_clock.measure(layers, sample)))
            try:
                layer_clock.judge(seen)
            except Mistake:
                refused[label] += 1
    print(f"{n} checks each, {time.perf_counter() - start:.0f} s, ratio {layer_clock.RATIO:g}:")
    for label in {**HONEST, **GUESSES}:
        kind = "honest" if label in HONEST else "guess "
        print(f"  {kind} {label:<45} refused {refused[label]:4d} of {n}")


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    (sandboxed if "--sandboxed" in sys.argv else main)(numbers[0] if numbers else 100)
