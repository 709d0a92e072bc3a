"""Serving throughput and latency: one process, a pipeline of p=2, and tensor parallelism tp=2
(the same 2 processes), on the same MLP, as the micro-batch size k grows. Prints figures only
(speed is never asserted in a test).

    .venv/bin/python benchmarks/serve_speed.py            # MLP 8×512, 384 requests, k = 1, 4, 16
    .venv/bin/python benchmarks/serve_speed.py --quick    # small and short, for CI
    .venv/bin/python benchmarks/serve_speed.py --figure runs/serving.html

Every request arrives at once; each configuration runs `rounds` times in one group of
processes (in turns) and the medians are printed, beside what the cost model predicts from each
run's own stage times. What to expect: the pipeline serves up to twice the requests per second
of one process (less on a 2-core machine, where two busy processes slow each other), while one
request alone is no faster through it (last lines).
"""

from __future__ import annotations

import os
import statistics
import sys

from minipipe.serve.api import ServeConfig, serve_many


def layouts(width: int, depth: int, requests: int, k: int, rounds: int) -> dict[str, list[ServeConfig]]:
    base = ServeConfig(
        model="mlp",
        model_args={"width": width, "depth": depth},
        requests=requests,
        microbatch=k,
        keep_outputs=False,
        timeout=120,
    )
    return {
        "1 process": [base.replace(p=1)] * rounds,
        "pipeline p=2": [base.replace(p=2)] * rounds,
        "tensor tp=2": [base.replace(p=1, tp=2)] * rounds,
    }


def run(width: int, depth: int, requests: int, ks: list[int], rounds: int):
    """{(layout, k): [measured StreamResult per round]}, one group of processes per world size."""
    plan = {(name, k): configs for k in ks for name, configs in layouts(width, depth, requests, k, rounds).items()}
    out = {}
    for world in (1, 2):
        keys = [key for key, configs in plan.items() if configs[0].p * configs[0].tp == world]
        order = [(key, i) for i in range(rounds) for key in keys]  # in turns: noise hits all alike
        results = serve_many([plan[key][i] for key, i in order])
        for (key, _), result in zip(order, results):
            out.setdefault(key, []).append(result)
    return out


def median_of(results, fn):
    return statistics.median(fn(r) for r in results)


def main(quick: bool = False, figure: str | None = None):
    width, depth, requests, ks, rounds = (256, 4, 64, [4], 1) if quick else (512, 8, 384, [1, 4, 16], 3)
    print(
        f"MLP {depth}×{width}, {requests} requests all at once, {rounds} round(s) each, medians; "
        f"'predicted': the cost model fitted on the same runs"
    )
    print(
        f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other work shares the cores: "
        f"then every process gets a share of one, and two processes get twice one process's)"
    )
    results = run(width, depth, requests, ks, rounds)
    print(
        f"{'layout':<14} {'k':>3} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8}   "
        f"{'predicted: requests/s':>21} {'p50 ms':>8}"
    )
    for (name, k), rs in results.items():
        predicted = [r.predicted() for r in rs]
        print(
            f"{name:<14} {k:>3} {median_of(rs, lambda r: r.throughput):>11,.0f} {median_of(rs, lambda r: r.p50):>8.2f}"
            f" {median_of(rs, lambda r: r.p99):>8.2f}   {median_of(predicted, lambda r: r.throughput):>21,.0f}"
            f" {median_of(predicted, lambda r: r.p50):>8.2f}"
        )
    for k in ks:
        one = median_of(results["1 process", k], lambda r: r.throughput)
        print(
            f"k={k}: throughput against 1 process: pipeline p=2 "
            f"{median_of(results['pipeline p=2', k], lambda r: r.throughput) / one:.2f}x, tensor tp=2 "
            f"{median_of(results['tensor tp=2', k], lambda r: r.throughput) / one:.2f}x"
        )
    alone = run(width, depth, 1, [1], 3 if not quick else 1)
    print(
        "one request alone, latency: "
        + ", ".join(
            f"{name} {median_of(alone[name, 1], lambda r: r.p50):.2f} ms"
            for name in ("1 process", "pipeline p=2", "tensor tp=2")
        )
    )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if figure:
        from minipipe.viz.latency_throughput import latency_throughput

        os.makedirs(os.path.dirname(figure) or ".", exist_ok=True)
        shown = [rs[len(rs) // 2] for rs in results.values()]
        latency_throughput(shown + [r.predicted() for r in shown if r.label == "pipeline p=2"]).write_html(figure)
        print(f"figure: {figure}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(quick="--quick" in args, figure=args[args.index("--figure") + 1] if "--figure" in args else None)
