"""Benchmarks: minipipe's executor against PyTorch's own pipelining, on the same stages."""
