"""A dataclass that refuses an unknown field by name: `RunConfig(stepz=3)` says "did you mean
'steps'?" where Python alone says only "unexpected keyword argument"."""

from __future__ import annotations

import dataclasses
import difflib
import functools


class UnknownField(TypeError, ValueError):
    """A field the dataclass has not; a TypeError as Python's own, and a ValueError as every other
    bad input (the CLI's exit 2), naming the nearest field."""


def named_fields(cls):
    """Make `cls(...)` (and `dataclasses.replace`) refuse an unknown field with the nearest known one."""
    init, names = cls.__init__, [f.name for f in dataclasses.fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self, *args, **kw):
        for key in kw:
            if key not in names:
                near = difflib.get_close_matches(str(key), names, n=1)
                raise UnknownField(
                    f"{cls.__name__} has no field {str(key)[:80]!r}"
                    + (f" (did you mean {near[0]!r}?)" if near else "")
                    + f"; its fields: {', '.join(names)}"
                )
        init(self, *args, **kw)

    cls.__init__ = __init__
    return cls
