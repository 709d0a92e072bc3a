"""For tests/test_frameworks_*.py: skip a framework's tests when its package is absent, or fail
instead when MINIPIPE_REQUIRE_FRAMEWORKS=1 (CI installs them all: `pip install -e .[frameworks]`)."""
import os

import pytest

from minipipe.frameworks import missing


def need(name: str) -> None:
    why = missing(name)
    if why is None:
        return
    if os.environ.get("MINIPIPE_REQUIRE_FRAMEWORKS") == "1":
        pytest.fail(why + " (MINIPIPE_REQUIRE_FRAMEWORKS=1)", pytrace=False)
    pytest.skip(why, allow_module_level=True)


GPT = dict(depth=4, width=32, heads=2, block=16)   # the course GPT, small enough for 2 cores
