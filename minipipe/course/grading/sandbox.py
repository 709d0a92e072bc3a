"""The sandbox: the one process where the learner's code runs, under the watch (watch.py).

It is forked from a clean process (the judge before it judges anything, or a zygote for the
tests) and serves its judge over a socket (channel.py):

    ("cell", label, learner, source)     run one notebook cell (a released given cell, or the learner's)
    ("payload", bytes)                   the learner's objects, sent by value from a notebook (cloudpickle)
    ("call", target, args, kwargs)       call the learner's function (a name, or "#0" for the first object)
    ("harness", module, name, targets, args, kwargs)   run a checker's harness function on learner objects
    ("bye",)

and answers with plain data only (plain.py). What the learner's code prints goes to the judge's
log, never into an answer. A refusal ends the process: see watch.py.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import json
import linecache
import os
import re
import sys
import threading
import traceback
import types

from ..i18n.messages import say as _
from . import channel, harness, plain
from . import domain as domains
from .words import words

REFUSED = 79  # the exit code of a sandbox that refused the learner's code
MAGIC = re.compile(r"^\s*[%!]", re.M)


def protected_paths() -> tuple[str, ...]:
    """What the learner's code may not open: minipipe's package (its source), the exercises'
    sources and solutions."""
    import minipipe

    package = os.path.realpath(os.path.dirname(minipipe.__file__))
    repo = os.path.dirname(package)
    return (
        package + os.sep,
        os.path.join(repo, "exercises", "source") + os.sep,
        os.path.join(repo, "exercises", "solutions") + os.sep,
    )


def prepare_lists(names: dict[str, tuple[str, ...]], dom: domains.Domain) -> dict[str, tuple[str, frozenset]]:
    """The watch's two lists (watch.py), from the exercise's names (run.allowlists), importing what
    they name (before the watch): "answer", while the check calls the learner's code, allows only
    what the exercise names; "cells", while the learner's cells run, refuses only the course's
    checkers and grader (but the helpers the exercise hands out)."""
    given = domains.allowed(names.get("given", ()))
    tops = domains.module_tops(names.get("given", ()))
    return {
        "answer": ("allow", domains.allowed(names["answer"])),
        "cells": ("deny", domains.checkers(dom) - given - tops),
    }


class Handlers:
    """What the sandbox does for each request, on the learner's objects in `namespace` (a fresh
    __main__) and `objects` (sent by value). The watch, when there is one, is `self.watch`."""

    def __init__(self, namespace: dict | None = None, watch=None):
        self.namespace = {} if namespace is None else namespace
        self.objects: list = []
        self.watch = watch

    def use(self, which: str) -> None:
        if self.watch is not None:
            self.watch.use(which)

    def do_cell(self, label: str, learner: bool, source: str):
        self.use("cells")
        if MAGIC.search(source):
            from IPython.core.inputtransformer2 import TransformerManager

            source = TransformerManager().transform_cell(source)
        try:
            code = compile(source, label, "exec", dont_inherit=True)
        except SyntaxError as e:
            return ["raised", _raised(e, label)]
        if not learner and self.watch is not None:
            self.watch.mark_given([code])
        linecache.cache[label] = (len(source), None, source.splitlines(True), label)  # the learner's own lines
        try:
            run_cell(code, self.namespace)
        except BaseException as e:  # the cell's own error: reported, the notebook goes on
            return ["raised", _raised(e, label)]
        return ["ok"]

    def do_payload(self, data: bytes):
        self.use("cells")
        try:
            self.objects = list(load_payload(data))
        except BaseException as e:
            return ["raised", _raised(e, "the objects sent from the notebook")]
        return ["ok", len(self.objects)]

    def lookup(self, target: str):
        if target.startswith("#"):
            return self.objects[int(target[1:])]
        if target not in self.namespace:
            raise LookupError(target)
        return self.namespace[target]

    def do_resolve(self, target: str):
        self.use("answer")
        try:
            obj = self.lookup(target)
        except (LookupError, IndexError):
            return ["missing", target]
        self.judge_object(obj, target)
        return ["object", describe(obj)]

    def do_call(self, target: str, args, kwargs):
        self.use("answer")
        fn = self.lookup(target)
        self.judge_object(fn, target)
        try:
            value = harness.learner_call(fn, *args, **kwargs)
            return ["value", encode_value(value)]
        except NotImplementedError:
            return ["unfinished"]
        except BaseException as e:
            return ["raised", _raised(e, None)]

    def do_harness(self, module: str, name: str, targets, args, kwargs):
        from ..exercises.verdict import Mistake, Unfinished

        self.use("answer")
        fn = getattr(importlib.import_module(module), name)
        objects = [self.lookup(t) for t in targets]
        for obj, target in zip(objects, targets):
            self.judge_object(obj, target)
        try:
            return ["value", encode_value(fn(*objects, *args, **kwargs))]
        except BaseException as e:
            self.refused_in_workers()  # a worker that refused the learner's code: that is the verdict
            if isinstance(e, Unfinished):
                return ["unfinished", e.name]
            if isinstance(e, Mistake):
                return ["mistake", str(e), None if e.raised is None else _raised(e.raised, None)]
            if isinstance(e, NotImplementedError):
                return ["unfinished", None]
            return ["raised", _raised(e, None)]

    def refused_in_workers(self) -> None:
        pass

    def judge_object(self, obj, target: str) -> None:
        pass


class Sandbox(Handlers):
    """The handlers, watched, serving a judge over `sock`."""

    def __init__(self, sock, dom: domains.Domain, names: dict[str, tuple[str, ...]], refusals: str):
        super().__init__(_fresh_main())
        self.sock, self.lock, self.refusals = sock, threading.Lock(), refusals
        lists = prepare_lists(names, dom)
        os.environ["MINIPIPE_WORKER_INIT"] = "minipipe.course.grading.sandbox:in_worker"
        os.environ["MINIPIPE_WATCH"] = json.dumps(
            {"names": {k: list(v) for k, v in names.items()}, "refusals": refusals}
        )
        os.environ["MINIPIPE_SANDBOX"] = "1"
        linecache.clearcache()
        from . import watch

        self.watch = watch.install(dom, lists, words, self.refuse, protected_paths(), "cells")
        harness.listen(self.watch.mark_harness)

    def send(self, tree) -> None:
        with self.lock:
            channel.reply(self.sock, tree)

    def refuse(self, text: str, where: str) -> None:
        """Report a refusal and end the process (any thread may call it; the first one wins)."""
        if self.lock.acquire(timeout=10):
            try:
                channel.reply(self.sock, ["refused", text, where])
            except OSError:
                pass
        os._exit(REFUSED)

    def serve(self) -> None:
        while True:
            try:
                req = channel.request(self.sock)
            except (channel.Closed, OSError):
                os._exit(0)
            kind, args = req[0], req[1:]
            if kind == "bye":
                os._exit(0)
            self.send(getattr(self, f"do_{kind}")(*args))

    def refused_in_workers(self) -> None:
        """A worker of a real run that refused the learner's code: its refusal is this sandbox's."""
        for name in sorted(os.listdir(self.refusals)):
            if name.endswith(".json"):
                with open(os.path.join(self.refusals, name)) as f:
                    text, where = json.load(f)
                self.refuse(text + " " + _("(in a worker process of the real run)"), where)

    def judge_object(self, obj, target: str) -> None:
        """The learner's object must be the learner's: not the engine's function or class (or a
        subclass, a partial, a bound method of it)."""
        for code, inherits in _codes_behind(obj):
            try:
                said = self.watch.judged(code)
                if said is None:
                    continue
                text = _("is {what}", what=said)
                if inherits:
                    text += ": " + _("{name} inherits {base}", name=inherits[0], base=inherits[1])
            except Exception:  # a wording the learner's cells broke: refused all the same
                from .watch import UNWORDED

                text = UNWORDED
            self.refuse(text, "")


def _fresh_main() -> dict:
    """The learner's cells run in a __main__ of their own, as in a kernel (cloudpickle then sends
    what they define to worker processes by value)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, get_ipython=_no_ipython, display=_display)
    sys.modules["__main__"] = main
    return main.__dict__


@harness.harness
def run_cell(code, namespace) -> None:
    exec(code, namespace)


@harness.harness
def load_payload(data: bytes):
    import cloudpickle

    return cloudpickle.loads(data)


@harness.harness
def encode_value(value):
    return plain.encode(value)


def _codes_behind(obj):
    """(code, inherits) of the functions an object of the learner's stands for: inherits is (the class's
    name, the base's dotted name) for a method a class of the learner's inherits, else None."""
    seen = 0
    while seen < 8:
        seen += 1
        if hasattr(obj, "func") and type(obj).__name__ == "partial":
            obj = obj.func
        elif inspect.ismethod(obj):
            obj = obj.__func__
        else:
            break
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            for value in vars(cls).values():
                fn = getattr(value, "__func__", value)
                if inspect.isfunction(fn):
                    yield fn.__code__, (obj.__name__, f"{cls.__module__}.{cls.__qualname__}")
    elif inspect.isfunction(obj):
        yield obj.__code__, None


def describe(obj) -> dict:
    import torch

    return {
        "name": getattr(obj, "__name__", None) or type(obj).__name__,
        "callable": callable(obj),
        "class": inspect.isclass(obj),
        "type": type(obj).__name__,
        "function": bool(inspect.isclass(obj) and issubclass(obj, torch.autograd.Function)),
    }


def _raised(e: BaseException, label: str | None) -> dict:
    """What the learner's code raised, for the judge: its type, its words, where in the learner's lines."""
    where = ""
    for frame, line in traceback.walk_tb(e.__traceback__):
        name = frame.f_code.co_filename
        if name.startswith("cell ") or name == label:
            text = linecache.getline(name, line).strip() if name in linecache.cache else ""
            where = f"{name}, line {line}" + (f": {text}" if text else "")
    builtin = type(e).__module__ == "builtins"
    return {
        "type": type(e).__name__,
        "builtin": builtin,
        "message": _text(e),
        "where": where,
        "syntax": isinstance(e, SyntaxError),
    }


def _text(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:
        text = "<its message could not be shown>"
    return text if len(text) <= 2000 else text[:1997] + "..."


@harness.harness  # what a cell calls in place of IPython's: not the grader's code to refuse
class _NoIPython:
    def __getattr__(self, name):
        raise RuntimeError(
            "the grader runs your cells as plain Python: IPython's magics (%...), shell commands (!...) "
            "and get_ipython() are not run there"
        )


@harness.harness
def _no_ipython():
    return _NoIPython()


@harness.harness
def _display(*objects, **kwargs):
    for obj in objects:
        print(repr(obj))


# -- in a worker process of a real run that the sandbox started -----------------------------
def in_worker() -> None:
    """The same watch in a worker (engine/workers.py calls it first, when the sandbox's
    environment names it): the learner's code it runs is judged by the exercise's list."""
    settings = json.loads(os.environ["MINIPIPE_WATCH"])
    names = {k: tuple(v) for k, v in settings["names"].items()}
    dom = domains.build()
    lists = prepare_lists(names, dom)
    from . import watch

    def refuse(text, where):
        path = os.path.join(settings["refusals"], f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump([text, where], f)
        os.replace(path + ".tmp", path)
        os._exit(REFUSED)

    w = watch.install(dom, lists, words, refuse, protected_paths(), "answer")
    harness.listen(w.mark_harness)
