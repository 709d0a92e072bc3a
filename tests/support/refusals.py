"""Refusals compared whole: while `SAID` is a list (tests/conftest.py makes it one for each test of the
torch-free core, AREAS), every exception a test expects through pytest.raises, or hands to `record`, is
appended to it as "TypeName: message", and the test's list is compared with its snapshot (syrupy). A test
that matches a few words of a message still holds the rest of what the user reads."""

from __future__ import annotations

import re

from _pytest._code import ExceptionInfo

SAID: list[str] | None = None
# the tests whose refusals are compared whole: the torch-free core's (mutmut's selection, pyproject.toml)
AREAS = (
    "tests/schedule/",
    "tests/sim/",
    "tests/planner/",
    "tests/serve/test_serve_sim.py",
    "tests/test_limits_core.py",
    "tests/test_limits.py",
    "tests/test_traffic.py",
    "tests/test_edges.py",
    "tests/test_compare.py",
)


def record(error: BaseException) -> None:
    if SAID is not None:
        SAID.append(steady(f"{type(error).__name__}: {error}"))


def steady(text: str) -> str:
    """What varies from run to run taken out: addresses of objects, a test's temporary folder (pytest
    numbers it by the tests run before it that share its name's first 30 letters)."""
    text = re.sub(r" at 0x[0-9a-f]+", " at 0x…", text)
    return re.sub(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s']+", "<tmp>", text)


class _Recording:
    def __init__(self, expecting):
        self._expecting = expecting

    def __enter__(self):
        return self._expecting.__enter__()

    def __exit__(self, kind, value, traceback):
        caught = self._expecting.__exit__(kind, value, traceback)
        if caught:
            record(value)
        return caught


def recording(raises):
    """pytest.raises, each exception it catches recorded."""

    def recorded(*args, **kwargs):
        expecting = raises(*args, **kwargs)
        if isinstance(expecting, ExceptionInfo):  # the form raises(Error, fn, *args): already caught
            record(expecting.value)
            return expecting
        return _Recording(expecting)

    return recorded
