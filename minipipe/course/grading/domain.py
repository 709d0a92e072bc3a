"""Whose code is it: the course's engine, the frameworks, the learner, or a library in between.

The *domain* is the code an exercise's answer must not come from: minipipe itself (its engine,
planner, frameworks adapters, and the checkers' own helpers), torch's pipelining, tensor-parallel,
FSDP and DistributedDataParallel, and DeepSpeed, Megatron, JAX, Optax. minipipe and torch's
pipelining are recognised by a *fingerprint* of each function's bytecode, names and constants
(`fingerprint`), computed from their source files: a copy of the engine's source, exec'd under
another file name or pasted into a cell, has the same fingerprint and is refused as the original
would be. (Local variable names are not part of bytecode, so renaming them changes nothing.)
Functions too short to say anything by their bytecode alone (`SHORT`), and comprehensions and lambdas
on their own, are recognised by their real file only: a one-line formula, or a list comprehension of
F's and B's, that a learner writes may well equal one of the engine's.

An exercise's allowlist names what of the domain the learner may call (modules, classes,
functions, by dotted name): `allowed(names)` turns it into fingerprints.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import marshal
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from pathlib import Path

SHORT = 200  # bytes of bytecode (its own and its inner functions') below which a function is known
# by its real file only

# torch's own parallelisms and the frameworks: refused by file, wherever reached from
FOREIGN = (
    "torch/distributed/pipelining/",
    "torch/distributed/tensor/parallel/",
    "torch/distributed/fsdp/",
    "torch/distributed/_composable/",
    "torch/nn/parallel/distributed.py",
    "torch/distributed/algorithms/ddp_comm",
    "torch/distributed/nn/",
    "deepspeed/",
    "megatron/",
    "jax/",
    "jaxlib/",
    "optax/",
    "flax/",
)
FINGERPRINTED_TORCH = ("torch.distributed.pipelining",)
# torch's answers in C, refused while the check calls the learner's code (watch.py): {dotted name: words}
BUCKETING = "torch.distributed._compute_bucket_assignment_by_size"
FOREIGN_C = {BUCKETING: f"torch's own bucketing ({BUCKETING}, DDP's reducer's)"}


def fingerprint(code: types.CodeType, known: dict | None = None) -> int:
    """The bytecode, the names it uses and its constants (nested functions by their own
    fingerprint): what a copy under another file name keeps. `known`: fingerprints already
    computed, by id of their code object (alive meanwhile)."""
    if known is not None and id(code) in known:
        return known[id(code)]
    consts = tuple(
        fingerprint(c, known) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c)) for c in code.co_consts
    )
    fp = hash((code.co_code, code.co_names, consts, code.co_argcount, code.co_kwonlyargcount))
    if known is not None:
        known[id(code)] = fp
    return fp


@dataclass(frozen=True)
class Origin:
    module: str
    qualname: str
    file: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname.split('.<locals>')[0]}"


@dataclass
class Domain:
    """Every function of the fingerprinted domain, and where the rest of the domain lives."""

    origins: dict[int, Origin] = field(default_factory=dict)  # fingerprint -> where it comes from
    by_file: dict[str, set[int]] = field(default_factory=dict)  # real file -> its fingerprints
    real_files: frozenset = frozenset()
    module_of: dict[str, str] = field(default_factory=dict)  # real file -> the module it is
    foreign: tuple[str, ...] = ()  # path pieces of the by-file domain
    neutral: tuple[str, ...] = ()  # where the standard library and packages live

    def origin(self, code: types.CodeType) -> Origin | None:
        """Where `code` comes from, if it is the domain's: by its real file, or, for a copy, by
        the fingerprint of a whole function (or module, or class body) long enough to be
        recognised (a comprehension, a lambda or a function defined inside another is not on its
        own: a learner may well write one as the engine did)."""
        real = code.co_filename in self.real_files
        if not real and (code.co_name.startswith("<") and code.co_name != "<module>" or _size(code) < SHORT):
            return None
        origin = self.origins.get(fingerprint(code))
        if origin is not None and real:  # where it really is (an equal function elsewhere may be listed)
            return Origin(self.module_of[code.co_filename], code.co_qualname, code.co_filename)
        if origin is not None and "<locals>" in origin.qualname:
            return None  # a copy is of a whole function: a helper inside one, a learner may write as the engine did
        return origin

    def is_foreign(self, filename: str) -> bool:
        return any(piece in filename for piece in self.foreign)

    def is_neutral(self, filename: str) -> bool:
        return filename.startswith(self.neutral) or filename.startswith(("<frozen ", "<string>"))


def _size(code: types.CodeType) -> int:
    return len(code.co_code) + sum(_size(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _walk(code: types.CodeType):
    stack = [code]
    while stack:
        c = stack.pop()
        yield c
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]


def _module_name(path: Path, root: Path, package: str) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [package, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def build() -> Domain:
    """The domain of this installation (~0.3 s: every source file of minipipe and of torch's
    pipelining compiled, not imported)."""
    import minipipe

    d = Domain()
    roots = [(Path(minipipe.__file__).resolve().parent, "minipipe")]
    for name in FINGERPRINTED_TORCH:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            roots.append((Path(spec.origin).resolve().parent, name))
    files = set()
    for root, package in roots:
        for path in sorted(root.rglob("*.py")):
            top = _code_of_file(path)
            if top is None:
                continue
            module = _module_name(path, root, package)
            d.module_of[str(path)] = module
            fps = d.by_file.setdefault(str(path), set())
            known: dict = {}
            for code in _walk(top):
                fp = fingerprint(code, known)
                d.origins.setdefault(fp, Origin(module, code.co_qualname, str(path)))
                fps.add(fp)
            files.add(str(path))
    for name in FINGERPRINTED_TORCH:  # imported later, it names its files by the path it was found on
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and Path(spec.origin).parent != Path(spec.origin).resolve().parent:
            found, real = Path(spec.origin).parent, Path(spec.origin).resolve().parent
            for path in list(d.module_of):
                if path.startswith(str(real) + "/"):
                    alias = str(found / Path(path).relative_to(real))
                    d.module_of[alias], d.by_file[alias] = d.module_of[path], d.by_file[path]
                    files.add(alias)
    d.real_files = frozenset(files) | _as_imported(d)
    paths = sysconfig.get_paths()
    d.neutral = tuple(
        sorted(
            {str(Path(paths[k]).resolve()) + "/" for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
            | {str(Path(paths[k])) + "/" for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
        )
    )
    d.foreign = FOREIGN
    return d


def _code_of_file(path: Path) -> types.CodeType | None:
    """A source file's code: from its up-to-date cached bytecode when there is one (several times
    faster than compiling), else compiled."""
    try:
        source = path.stat()
        data = Path(importlib.util.cache_from_source(str(path))).read_bytes()
        if (
            int.from_bytes(data[4:8], "little") == 0
            and int.from_bytes(data[8:12], "little") == int(source.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(data[12:16], "little") == source.st_size & 0xFFFFFFFF
            and data[:4] == importlib.util.MAGIC_NUMBER
        ):
            code = marshal.loads(data[16:])
            if code.co_filename == str(path):
                return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    try:
        return compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OSError):
        return None


def _as_imported(d: Domain) -> frozenset:
    """The same files under the names modules were imported by (a symlinked checkout)."""
    out = set()
    for name, module in list(sys.modules.items()):
        f = getattr(module, "__file__", None)
        if f and name.startswith(("minipipe", *FINGERPRINTED_TORCH)) and f not in d.module_of:
            real = str(Path(f).resolve())
            if real in d.module_of:
                out.add(f)
                d.module_of[f] = d.module_of[real]
    return frozenset(out)


# -- allowlists ---------------------------------------------------------------------------------
def resolve(dotted: str):
    """The module, class or function a dotted name stands for (importing its module)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no such module for {dotted!r}")


def codes_of(obj) -> list[types.CodeType]:
    """Every code object of a function (and the functions inside it), a class's methods and
    properties (its domain bases' too), or a module's file."""
    if isinstance(obj, types.ModuleType):
        out = []
        for path in _module_files(obj):
            out += list(_walk(compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)))
        return out
    if inspect.isclass(obj):
        out = []
        for cls in obj.__mro__:
            if cls.__module__.startswith("minipipe"):
                for value in vars(cls).values():
                    for target in _functions_in(value):
                        out += list(_walk(target.__code__))
        return out
    fn = inspect.unwrap(getattr(obj, "__func__", obj))
    return list(_walk(fn.__code__)) if hasattr(fn, "__code__") else []


def _functions_in(value):
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if isinstance(value, functools.cached_property):
        return [value.func]
    target = getattr(value, "__func__", value)
    return [target] if inspect.isfunction(target) else []


def _module_files(module: types.ModuleType) -> list[str]:
    f = getattr(module, "__file__", None)
    if f is None:
        return []
    path = Path(f).resolve()
    if path.name == "__init__.py":  # a package: all of it
        return [str(p) for p in sorted(path.parent.rglob("*.py"))]
    return [str(path)]


def allowed(names) -> frozenset:
    """The fingerprints of everything `names` (dotted names) allows."""
    return frozenset(fingerprint(code) for name in names for code in codes_of(resolve(name)))


def module_tops(names) -> frozenset:
    """The fingerprints of the module code of the modules that hold `names` (importing them)."""
    out = set()
    for name in names:
        obj = resolve(name)
        module = obj if isinstance(obj, types.ModuleType) else sys.modules.get(getattr(obj, "__module__", ""))
        for path in _module_files(module) if module is not None else []:
            out.add(fingerprint(compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)))
    return frozenset(out)


CHECKERS = ("minipipe/course/exercises/", "minipipe/course/grading/")


def checkers(d: Domain) -> frozenset:
    """The fingerprints of the course's own check code: the checkers (not the package's entry
    points, `check_gpipe` and the rest, which only hand the learner's objects to the grader) and
    the grader."""
    out = set()
    for path, fps in d.by_file.items():
        posix = Path(path).as_posix()
        if any(piece in posix for piece in CHECKERS) and not posix.endswith("minipipe/course/exercises/__init__.py"):
            out |= fps
    return frozenset(out)
