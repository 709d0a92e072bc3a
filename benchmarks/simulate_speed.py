"""How long generating, validating and simulating a schedule takes (targets: < 1 s for
p=64, m=512 1F1B; < 10 ms for a classroom p=8, m=32, v=2 interleaved). Prints figures only."""

import statistics
import time

from minipipe import make_schedule, simulate


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(quick: bool = False):
    big = make_schedule("1f1b", 64, 512)
    rows = [
        ("1f1b p=64 m=512: simulate", lambda: simulate(big), 3 if quick else 5),
        (
            "1f1b p=64 m=512: make_schedule + simulate",
            lambda: simulate(make_schedule("1f1b", 64, 512)),
            1 if quick else 3,
        ),
        (
            "interleaved p=8 m=32 v=2: make_schedule + simulate + bubble",
            lambda: simulate(make_schedule("interleaved", 8, 32, 2)).bubble(),
            20 if quick else 100,
        ),
    ]
    for label, fn, repeats in rows:
        print(f"{label:<62} {1000 * timed(fn, repeats):9.2f} ms (median of {repeats})")


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
