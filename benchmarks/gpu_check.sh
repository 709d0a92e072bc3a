#!/usr/bin/env bash
# On a machine with GPUs (and a CUDA build of torch), in a few minutes: same math of a stage on
# CUDA vs CPU, stage times from CUDA events, the simulator calibrated on them, and runs of the
# executor both ways: one GPU per rank (NCCL) and more ranks than GPUs (sharing them, over gloo
# through host memory), and lesson 00 as a workshop participant given one GPU runs it (its two
# ranks must share that GPU). See minipipe/bench/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PYTHONUNBUFFERED=1 "$PY" -m minipipe.bench.gpu_check "$@"
