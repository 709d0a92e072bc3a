"""The planner's files (`minipipe plan --model FILE --gpu FILE`), read against a schema.

A typo must not fall back to a default in silence (`hbm_gbps` for `hbm_gbs`, `gpus_per_nodes`), and
a wrong type must not slip through as another (`"yes"` for a boolean, `true` for a memory size,
`Infinity` for a peak). Each key is known, with a type and a range; an unknown key is refused with
the nearest known one (difflib); a key given twice is refused (JSON keeps the last, silently); JSON's
non-standard `Infinity` and `NaN` are refused. Every value a message shows is cut to `SHOWN`
characters, so a file of any size gives a message of a few lines.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SHOWN = 80  # characters of a value a message repeats


def shown(value: object) -> str:
    """`repr(value)`, cut to SHOWN characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


# what each key holds: ("int", lowest), ("number", None: > 0 and finite), ("bool",), ("str", choices or None)
MODEL_KEYS = {
    "name": ("str", None),
    "layers": ("int", 1),
    "hidden": ("int", 1),
    "heads": ("int", 1),
    "vocab": ("int", 1),
    "seq": ("int", 1),
    "ffn": ("int", 1),
    "kv_heads": ("int", 1),
    "gated": ("bool",),
    "bias": ("bool",),
    "norm": ("str", ("layernorm", "rmsnorm")),
    "positions": ("str", ("learned", "rotary")),
    "tied_head": ("bool",),
    "head_bias": ("bool",),
    "dropout": ("bool",),
    "attention": ("str", ("materialized", "fused")),
    "batch": ("int", 1),
    "source": ("str", None),
}
MODEL_NEEDS = ("layers", "hidden", "heads", "vocab", "seq")
GPU_KEYS = {
    "name": ("str", None),
    "memory_gb": ("number",),
    "peak_tflops": ("number",),
    "nvlink_gbs": ("number",),
    "network_gbs": ("number",),
    "hbm_gbs": ("number",),
    "gpus_per_node": ("int", 1),
    "source": ("str", None),
}
GPU_NEEDS = ("memory_gb", "peak_tflops", "nvlink_gbs", "network_gbs")


def read(path: str) -> dict[str, Any]:
    """A .json or .toml file's one table of keys, or ValueError naming the file."""
    p = Path(path)
    if p.suffix not in (".json", ".toml"):
        raise ValueError(f"{path}: give a .toml or .json file")
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; give the path of a .toml or .json file, or a preset's name") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if p.suffix == ".json":
        try:
            raw = json.loads(text, object_pairs_hook=_no_repeats(path), parse_constant=_no_constant(path))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    else:
        try:
            import tomllib  # type: ignore[import-not-found,unused-ignore]  # Python 3.11+
        except ImportError:  # Python 3.10
            raise ValueError(f"reading {path} needs Python 3.11's tomllib; give a .json file instead") from None
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path} is not TOML: {e} (a key given twice is refused too)") from None
    if not isinstance(raw, dict):
        raise ValueError(
            f'{path} must hold one table of keys such as {{"layers": 32, ...}}, not a {type(raw).__name__}'
        )
    return raw


def _no_repeats(path: str) -> Callable[[Iterable[tuple[str, Any]]], dict[str, Any]]:
    def pairs(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise ValueError(f"{path}: key {shown(key)} is given twice; keep one")
            seen[key] = value
        return seen

    return pairs


def _no_constant(path: str) -> Callable[[str], Any]:
    def constant(name: str) -> Any:
        raise ValueError(
            f"{path}: {name} is not a number the planner can use (JSON allows only finite numbers); "
            f"give the figure itself"
        )

    return constant


def checked(raw: dict[str, Any], keys: dict[str, tuple[Any, ...]], needs: tuple[str, ...], path: str) -> dict[str, Any]:
    """`raw`'s keys, each known and of its type and range, with every needed one there."""
    for key in raw:
        if key not in keys:
            near = difflib.get_close_matches(str(key), keys, n=1)
            raise ValueError(
                f"{path}: unknown key {shown(key)}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; the keys are {', '.join(keys)}"
            )
    missing = [k for k in needs if k not in raw]
    if missing:
        raise ValueError(f"{path} needs {', '.join(missing)} too")
    for key, value in raw.items():
        problem = _wrong(value, keys[key])
        if problem:
            raise ValueError(f"{path}: {key} must be {problem}, got {shown(value)}")
    return dict(raw)


def _wrong(value: Any, rule: tuple[Any, ...]) -> str | None:
    kind = rule[0]
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < rule[1]):
        return f"a whole number >= {rule[1]}"
    if kind == "number" and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0)
    ):
        return "a finite number > 0"
    if kind == "bool" and not isinstance(value, bool):
        return "true or false"
    if kind == "str" and (not isinstance(value, str) or (rule[1] and value not in rule[1])):
        return f"one of {', '.join(rule[1])}" if rule[1] else "a string"
    return None
