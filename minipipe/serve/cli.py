"""`minipipe serve`: serve a stream of requests, or generate, through a pipeline from a terminal.

    minipipe serve -p 2 --requests 64 --microbatch 4 --rate 2000
    minipipe serve -p 2 --generate --prompt 1,3,5 --prompt 2,4,6 --new-tokens 8

The stream prints latency p50 / p95 / p99 and throughput, measured and as the cost model
predicts it from the run's own stage times, then the timeline. Generation prints the tokens as
they come out of the last stage. cli.py adds this command; nothing here imports torch until the
command runs.
"""

from __future__ import annotations


def add_serve_command(sub, model_arg) -> None:
    serve = sub.add_parser(
        "serve", help="serve requests (or generate tokens) through a forward-only pipeline; latency and throughput"
    )
    serve.add_argument("-p", "--ranks", type=int, default=2, dest="p", help="pipeline ranks (default 2)")
    serve.add_argument("-v", "--virtual", type=int, default=None, dest="v", help="stages per rank (default 1)")
    serve.add_argument("--tp", type=int, default=1, help="tensor-parallel shards of every layer (default 1)")
    serve.add_argument("--model", default="gpt", help="gpt, mlp, or your own as package.module:function (default gpt)")
    serve.add_argument(
        "--model-arg",
        action="append",
        type=model_arg,
        default=[],
        metavar="NAME=INT",
        help="model size, e.g. --model-arg depth=6",
    )
    serve.add_argument("--requests", type=int, default=None, help="requests in the stream (default 64)")
    serve.add_argument(
        "--microbatch",
        "-k",
        type=int,
        default=None,
        help="requests (or sequences) per micro-batch (default 4; 1 when generating)",
    )
    serve.add_argument("--rate", type=float, default=None, help="requests per second (default: all at once)")
    serve.add_argument("--poisson", action="store_true", help="random arrivals at that rate, not evenly spaced")
    serve.add_argument("--generate", action="store_true", help="generate tokens greedily instead of a stream")
    serve.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="T,T,...",
        help="a prompt of token ids, e.g. --prompt 1,3,5 (repeat for more; all of one length)",
    )
    serve.add_argument("--new-tokens", type=int, default=None, help="tokens to generate per prompt (default 8)")
    serve.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="train the model first for this many steps and serve its weights (default: 150 when "
        "generating, else 0: the seed's untrained weights, which time the same)",
    )
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--device", default="auto", help="auto, cpu or cuda")
    serve.add_argument("--backend", default="auto", help="auto, gloo or nccl")
    serve.add_argument("--timeout", type=float, default=60.0, help="seconds a rank may wait for a peer")
    serve.add_argument("--oversubscribe", action="store_true", help="allow more than 4 processes per CPU core")
    serve.add_argument("--trace", default="runs/serve_trace.json", help="where to write the Chrome trace")
    serve.set_defaults(func=cmd_serve)


def _prompt(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise ValueError(f"a prompt is token ids separated by commas, e.g. 1,3,5; got {text!r}") from None


def _check_mode(args) -> None:
    """An option of the other mode would be ignored: say so instead."""
    if args.generate:
        given = {"--requests": args.requests is not None, "--rate": args.rate is not None, "--poisson": args.poisson}
    else:
        given = {"--prompt": args.prompt, "--new-tokens": args.new_tokens is not None}
    names = ", ".join(name for name, value in given.items() if value)
    if names:
        verb = "is" if "," not in names else "are"
        raise ValueError(
            f"{names} {verb} for a request stream, not --generate; drop {names}, or drop --generate"
            if args.generate
            else f"{names} {verb} for --generate; add --generate, or drop {names}"
        )


def cmd_serve(args) -> int:
    import os

    from ..outputs import writable_file
    from .api import GenerateConfig, ServeConfig, generate, serve

    writable_file(args.trace, "--trace")
    _check_mode(args)

    common = dict(
        model=args.model,
        model_args=dict(args.model_arg),
        seed=args.seed,
        p=args.p,
        v=args.v,
        tp=args.tp,
        device=args.device,
        backend=args.backend,
        timeout=args.timeout,
        oversubscribe=args.oversubscribe,
    )
    if args.generate:
        config = GenerateConfig(
            **common,
            prompts=[_prompt(t) for t in args.prompt] or None,
            new_tokens=8 if args.new_tokens is None else args.new_tokens,
            microbatch=1 if args.microbatch is None else args.microbatch,
        )
    else:
        config = ServeConfig(
            **common,
            requests=64 if args.requests is None else args.requests,
            microbatch=4 if args.microbatch is None else args.microbatch,
            rate=args.rate,
            arrivals="poisson" if args.poisson else "even",
        )
    from .api import prepare

    prepare(config)  # every mistake in the arguments, before training starts
    steps = args.train_steps if args.train_steps is not None else (150 if args.generate else 0)
    if steps:
        from ..engine.config import RunConfig
        from ..engine.launch import run

        print(f"training {args.model} for {steps} steps first (1f1b, p={args.p}) ...", flush=True)
        trained = run(
            RunConfig(
                model=args.model,
                model_args=dict(args.model_arg),
                seed=args.seed,
                p=args.p,
                steps=steps,
                schedule="1f1b",
                device=args.device,
                backend=args.backend,
                oversubscribe=args.oversubscribe,
            )
        )
        print(f"loss {trained.losses[0]:.3f} -> {trained.losses[-1]:.3f}")
        config = config.replace(state=trained.state)

    def progress(event):
        if event["kind"] == "note":
            print(f"note: {event['text']}", flush=True)
        elif event["kind"] == "token":
            pairs = ", ".join(f"#{s}: {t}" for s, t in zip(event["sequences"], event["tokens"]))
            print(f"{event['ms']:9.2f} ms  token {event['round'] + 1:>3}  {pairs}", flush=True)

    if args.generate:
        result = generate(config, progress=progress)
        print()
        print(result.summary())
        trace = result.trace
    else:
        result = serve(config, progress=progress)
        print(result.summary())
        print(result.predicted().summary().replace("simulated", "simulated (costs fitted on this run)", 1))
        trace = result.trace
        print()
        print(trace.ascii(width=100))
    os.makedirs(os.path.dirname(args.trace) or ".", exist_ok=True)
    trace.to_chrome(args.trace)
    print(f"\nChrome trace: {args.trace} (open in https://ui.perfetto.dev)")
    return 0
