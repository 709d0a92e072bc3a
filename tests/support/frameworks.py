"""For tests/test_frameworks_*.py: skip a framework's tests when its package is absent, or fail
instead when MINIPIPE_REQUIRE_FRAMEWORKS=1 (CI installs them all: `pip install -e .[frameworks]`);
and minipipe's executor's runs that the frameworks' losses are compared with, bit for bit."""

import os

import pytest

from minipipe import RunConfig, Schedule, run_many
from minipipe.frameworks import missing


def need(name: str) -> None:
    why = missing(name)
    if why is None:
        return
    if os.environ.get("MINIPIPE_REQUIRE_FRAMEWORKS") == "1":
        pytest.fail(why + " (MINIPIPE_REQUIRE_FRAMEWORKS=1)", pytrace=False)
    pytest.skip(why, allow_module_level=True)


GPT = dict(depth=4, width=32, heads=2, block=16)  # the course GPT, small enough for 2 cores
BASE = RunConfig(schedule="1f1b", p=2, m=4, model="gpt", model_args=GPT, batch_size=16, steps=3)
# GPipe with its backwards last first: no framework ships it by name (it is the JAX program's order)
LAST_FIRST = Schedule.custom([("0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0").split(), ("1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3").split()])
RUNS = {
    "1f1b": BASE,
    "interleaved": BASE.replace(schedule="interleaved", v=2),
    "zb-h1": BASE.replace(schedule="zb-h1"),
    "zb-v": BASE.replace(schedule="zb-v", v=2),  # two stages a rank, placed as a V
    "last-first": BASE.replace(schedule=LAST_FIRST),
    "fsdp": BASE.replace(p=1, dp=2, m=1),  # data parallelism: FSDP's twin
    "1f1b dp2": BASE.replace(dp=2, batch_size=32),  # two pipelines, 4 processes
    "interleaved dp2": BASE.replace(schedule="interleaved", v=2, dp=2, batch_size=32),
}
_done: dict = {}


def executor(name: str):
    """minipipe's executor's run of RUNS[name]. The runs of one world size start their processes
    together, once a session (starting a group costs seconds)."""
    if name not in _done:
        world = RUNS[name].p * RUNS[name].dp
        same = [n for n, c in RUNS.items() if c.p * c.dp == world and n not in _done]
        _done.update(zip(same, run_many([RUNS[n] for n in same])))
    return _done[name]
