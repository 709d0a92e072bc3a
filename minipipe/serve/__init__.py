"""Serving through a pipeline: a stream of requests, or greedy generation token by token (api.py),
on worker processes (worker.py), from the command line too (cli.py: torch is imported only when a
serving command runs)."""
