"""The checker's code that runs in the sandbox and touches the learner's objects: the harness.

A checker judges in the judge process, but some of its work has to happen where the learner's
code is: calling the learner's function and taking what it returned apart (plain.py), watching the
model's calls while the learner's `accumulate` runs, handing the learner's `stage_step` a baton,
playing the other ranks as threads. That code is marked `@harness`. In the sandbox the watch
never refuses it, and never trusts it as a caller either: whatever it reaches through the
learner's objects (a method of the learner's class, an iterator the learner returned) counts as
the learner's own call. The rest of a checker's sandbox code (setting a stage up, launching
worker processes whose learner code the workers watch themselves) is the course's own code, and
must not touch the learner's objects.
"""

from __future__ import annotations

import functools
import inspect
import types

_REGISTERED: list = []  # functions and classes marked so far, in this process
_listeners: list = []  # the watch's, once installed: told of each new mark


def harness(obj):
    """Mark a function or class as the checker's harness (see the module docstring)."""
    _REGISTERED.append(obj)
    for tell in _listeners:
        tell(codes_of(obj))
    return obj


def codes_of(obj) -> list[types.CodeType]:
    """The code objects of a harness function (and the functions and lambdas inside it) or of a
    class's methods."""
    targets = []
    if inspect.isclass(obj):
        for value in vars(obj).values():
            if isinstance(value, property):
                targets += [f for f in (value.fget, value.fset, value.fdel) if f is not None]
            elif isinstance(value, functools.cached_property):
                targets.append(value.func)
            else:
                fn = getattr(value, "__func__", value)
                if inspect.isfunction(fn):
                    targets.append(fn)
    else:
        targets.append(inspect.unwrap(obj))
    out = []
    for fn in targets:
        stack = [fn.__code__]
        while stack:
            code = stack.pop()
            out.append(code)
            stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return out


def listen(tell) -> None:
    """`tell(codes)` for every harness marked so far and from now on."""
    for obj in _REGISTERED:
        tell(codes_of(obj))
    _listeners.append(tell)


@harness
def learner_call(fn, *args, **kwargs):
    """Call the learner's `fn`: whatever `fn` is, it is judged as the learner's."""
    return fn(*args, **kwargs)
