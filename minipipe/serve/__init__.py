"""Serving through a pipeline: a stream of requests, or greedy generation token by token, on the
executor training runs on.

    api.py     the front doors (serve, generate, serve_many) and the results
    config.py  ServeConfig and GenerateConfig: what serving adds to the engine's shared fields
    plan.py    every check, and the Plan, before any process starts
    work.py    what a serving Plan carries: its stream, or its generation
    rank.py    what each rank does: engine/train.py's RankStep, warmed up, one pass of the executor
    cli.py     `minipipe serve` (torch is imported only when the command runs)
"""
