"""Your own model in the pipeline. Besides the course's "mlp" and "gpt", `RunConfig(model=...)` takes

    model="mypackage.mymodule:make_net"   # a factory Python can import, by name
    model=MyNet                           # a function or class, also one defined in a notebook cell

The factory is called as `factory(batch_size=..., seed=..., **model_args)` and returns an object
with the course models' three methods:

    layers()              -> a list of nn.Module, run one after another; the pipeline cuts between them
    loss(output, target)  -> a one-element tensor: the mean over the batch
    batch(step)           -> (inputs, targets): the global batch of `step`, batch_size rows each

Every process builds the model itself, so weights and data must follow from the seed alone:
`layers()` runs with torch's random generator seeded by `seed`, `batch(step)` by (seed, step), so
plain `torch.randn` inside them gives the same numbers on every rank. A factory given as a function
or class (not a name) travels to the worker processes by value, with cloudpickle: the workers cannot
import what a notebook or a script's `__main__` defines.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import io
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .course import TASKS
from .task import Task, seeded

METHODS = ("layers", "loss", "batch")


class Sendable:
    """A factory with its cloudpickled bytes: a Plan holding it pickles (for the workers) as the bytes,
    which rebuild the factory there even if it was defined in a notebook."""

    def __init__(self, factory: Callable | None, payload: bytes | None = None, name: str | None = None):
        self._factory = factory
        self.name = name or qualified_name(factory)
        self.payload = payload if payload is not None else _payload(factory, self.name)

    @property
    def factory(self) -> Callable:
        """The function or class itself; in a worker, rebuilt from its bytes when first needed (not
        while the process starts), so that whatever the worker sets up first (a grader's watch over
        a learner's code) is in place when the code arrives."""
        if self._factory is None:
            self._factory = pickle.loads(self.payload)
        return self._factory

    def __reduce__(self):
        return _from_payload, (self.payload, self.name)

    def __call__(self, **kwargs):
        return self.factory(**kwargs)

    def __eq__(self, other):
        return isinstance(other, Sendable) and other.payload == self.payload

    def __hash__(self):
        return hash(self.payload)

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"<{self.name}, sent to the workers by value>"


def _from_payload(payload: bytes, name: str | None = None) -> Sendable:
    return Sendable(None, payload, name) if name else Sendable(pickle.loads(payload), payload)


def _payload(factory, name: str) -> bytes:
    try:
        payload = _by_value(factory)
        pickle.loads(payload)
    except Exception as e:  # TypeError, PicklingError, AttributeError... whatever the object raises
        raise ValueError(
            f"your model {name} cannot be sent to the worker processes ({type(e).__name__}: {e}). Each worker "
            f"rebuilds the model by calling your function, so everything the function uses travels with it, and "
            f"open files, locks, generators or connections cannot. Open or create them inside the function "
            f"(or inside batch()), and pass plain settings (numbers, strings) through model_args"
        ) from None
    return payload


def _by_value(obj) -> bytes:
    """cloudpickle's bytes of `obj`, refusing an open file: cloudpickle would copy a text file's
    contents into every worker, which then reads a snapshot, not the file, and cannot write it."""
    import cloudpickle

    def refuse(file):
        raise TypeError(f"it holds an open file, {getattr(file, 'name', file)!r}")

    class NoOpenFiles(cloudpickle.Pickler):
        dispatch_table = collections.ChainMap({io.TextIOWrapper: refuse}, cloudpickle.Pickler.dispatch_table)

    buffer = io.BytesIO()
    NoOpenFiles(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


def check_model_args(model_args) -> None:
    """model_args travel to every worker inside the plan (pickled): a dict of named settings that
    pickle can carry. Raises ValueError."""
    if not isinstance(model_args, dict):
        raise ValueError(
            f"model_args must be a dict of settings, such as {{'width': 64, 'depth': 8}}; got {_what(model_args)}"
        )
    for key, value in model_args.items():
        if not isinstance(key, str):
            raise ValueError(f"model_args' names must be strings (the model's parameter names), got {key!r}")
        try:
            pickle.loads(pickle.dumps(value))
        except Exception as e:  # TypeError, PicklingError, AttributeError... whatever the object raises
            raise ValueError(
                f"model_args' value of {key} ({_what(value)}) cannot be sent to the worker processes "
                f"({type(e).__name__}: {e}); pass plain settings (numbers, strings, lists of them) and "
                f"make files, locks or connections inside your model's function"
            ) from None


def qualified_name(obj) -> str:
    """'module.Name' of a function or class: how a checkpoint's metadata names a model."""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{getattr(obj, '__module__', None) or type(obj).__module__}.{name}"


def sendable(model):
    """The model as a Plan carries it to the workers: a name as it is, a function or class by value."""
    if isinstance(model, (str, Sendable)):
        return model
    _check_is_factory(model)
    return Sendable(model)


def describe_model(model, model_args: dict) -> dict:
    """The model and its settings as JSON can hold them (checkpoint metadata): a function or class by
    its qualified name, a setting JSON cannot hold by its repr."""
    return {"model": _name(model), "model_args": {str(k): v if _is_json(v) else repr(v) for k, v in model_args.items()}}


def _name(model) -> str:
    return model if isinstance(model, str) else model.name if isinstance(model, Sendable) else qualified_name(model)


def _is_json(value) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def custom_task(model, batch_size: int, seed: int, model_args: dict) -> CustomTask:
    """The task of a model given by "package.module:function" or as a function or class."""
    if isinstance(model, str):
        factory, name = _import(model), model
    else:
        _check_is_factory(model)
        factory, name = (model.factory if isinstance(model, Sendable) else model), _name(model)
    return CustomTask(name=name, batch_size=batch_size, seed=seed, factory=factory, model_args=dict(model_args))


@dataclass
class CustomTask(Task):
    """A learner's model behind the course's Task interface, with its answers checked."""

    factory: Callable = None
    model_args: dict = field(default_factory=dict)

    def __post_init__(self):
        _check_call(self.factory, self.name, self.call_text(), self.batch_size, self.seed, self.model_args)
        self.made = seeded(self.seed, self._make)
        missing = [m for m in METHODS if not callable(getattr(self.made, m, None))]
        if missing:
            raise ValueError(
                f"your model {self.name} returned an object of class {type(self.made).__name__}, which has no "
                f"{' or '.join(m + '()' for m in missing)}; a model for the pipeline needs layers() (a list of "
                f"nn.Module), loss(output, target) and batch(step) (inputs, targets), as minipipe.models' MLPTask has"
            )

    def call_text(self) -> str:
        args = ", ".join(
            f"{k}={v!r}" for k, v in {"batch_size": self.batch_size, "seed": self.seed, **self.model_args}.items()
        )
        return f"{self.name.rsplit('.', 1)[-1].rsplit(':', 1)[-1]}({args})"

    def _make(self):
        return self.factory(batch_size=self.batch_size, seed=self.seed, **self.model_args)

    @property
    def n_layers(self) -> int:
        return len(self.layers())

    def _build(self) -> list[nn.Module]:
        # a fresh object each time, so each call gives new modules, as the course models do
        return _check_layers(self._make().layers(), self.name)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        pair = seeded(self.seed * 1_000_003 + step + 1, lambda: self.made.batch(step))
        return _check_batch(pair, self.name, step, self.batch_size)

    def loss(self, output, target):
        value = self.made.loss(output, target)
        if not (torch.is_tensor(value) and value.numel() == 1):
            raise ValueError(
                f"your model {self.name}'s loss(output, target) returned "
                f"{_what(value)}; it must return a one-element tensor, the mean loss over the batch"
            )
        return value


# -- the checks, in the learner's terms -----------------------------------------------------
def _import(text: str):
    if ":" not in text:
        raise ValueError(
            f"unknown model {text!r}; choose one of {', '.join(TASKS)}, or give your own: "
            f"'package.module:function', or the function or class itself"
        )
    module_name, _, attr = text.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"model {text!r}: cannot import {module_name!r} ({e}). The part before ':' must be a "
            f"module Python can import: is its package installed, or its folder on sys.path?"
        ) from None
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(
                f"model {text!r}: module {module_name} has no {attr!r}; the part after ':' names "
                f"the function or class that builds your model"
            )
    return obj


def _check_is_factory(model) -> None:
    if isinstance(model, nn.Module) or (not callable(model) and all(hasattr(model, m) for m in METHODS)):
        raise ValueError(
            f"model= takes the function or class that builds your model, not a built one (a "
            f"{type(model).__name__}): pass {type(model).__name__} itself. Every rank builds its own "
            f"copy from the seed, so all copies start with the same weights"
        )
    if not callable(model):
        raise ValueError(
            f"model must be {', '.join(repr(k) for k in TASKS)}, 'package.module:function', or a "
            f"function or class that builds your model; got {_what(model)}"
        )


def _check_call(factory, name: str, call: str, batch_size, seed, model_args) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have none: let the call itself speak
        return
    try:
        signature.bind(batch_size=batch_size, seed=seed, **model_args)
    except TypeError as e:
        raise ValueError(
            f"your model is built as {call}, which does not fit {name}{signature} ({e}). Give it "
            f"batch_size and seed parameters (or **kwargs), and its own settings in model_args"
        ) from None


def _check_layers(layers, name: str) -> list[nn.Module]:
    if isinstance(layers, nn.Module) and not isinstance(layers, (nn.Sequential, nn.ModuleList)):
        raise ValueError(
            f"your model {name}'s layers() returned one {type(layers).__name__}; return a list of "
            f"the layers it runs one after another, so the pipeline can cut between them"
        )
    try:
        layers = list(layers)
    except TypeError:
        raise ValueError(
            f"your model {name}'s layers() returned {_what(layers)}; return a list of nn.Module, "
            f"e.g. [nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1)]"
        ) from None
    if not layers:
        raise ValueError(
            f"your model {name}'s layers() returned no layers; a pipeline needs at least one layer per stage"
        )
    for i, layer in enumerate(layers):
        if not isinstance(layer, nn.Module):
            raise ValueError(
                f"your model {name}'s layers()[{i}] is {_what(layer)}, not an nn.Module; every layer "
                f"must be one (wrap a plain function in a module: nn.GELU() for F.gelu)"
            )
    return layers


def _check_batch(pair, name: str, step: int, batch_size: int):
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(torch.is_tensor(t) for t in pair)):
        raise ValueError(
            f"your model {name}'s batch({step}) returned {_what(pair)}; it must return two tensors, (inputs, targets)"
        )
    for what, t in zip(("inputs", "targets"), pair):
        if t.dim() == 0 or t.shape[0] != batch_size:
            raise ValueError(
                f"your model {name}'s batch({step}) gave {what} of shape {tuple(t.shape)}; the first "
                f"dimension must be batch_size={batch_size} (the pipeline cuts it into micro-batches)"
            )
    return tuple(pair)


def _what(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}: ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}" if not isinstance(value, (int, float, str)) else f"{value!r}"
