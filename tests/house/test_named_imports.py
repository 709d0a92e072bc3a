"""Every minipipe import path the README, the lessons and the exercises name exists: a file moved
inside the package must take its readers' imports with it (no shims are left behind)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
STATEMENT = re.compile(r"^[ \t]*(?:from|import)[ \t]+minipipe\b.*$", re.M)
FILE = re.compile(r"`minipipe/([\w/]+)\.py`")  # a module named by its file in prose


def texts() -> dict[str, str]:
    """Each reader's text: the READMEs, the lessons' and exercises' code and prose."""
    out = {}
    for path in [
        *ROOT.glob("*.md"),
        *ROOT.glob("lessons/*.md"),
        *ROOT.glob("exercises/*.md"),
        *ROOT.glob("exercises/source/*.py"),
    ]:
        out[str(path.relative_to(ROOT))] = path.read_text()
    for path in [
        *ROOT.glob("lessons/*.ipynb"),
        *ROOT.glob("exercises/*.ipynb"),
        *ROOT.glob("exercises/solutions/*.ipynb"),
    ]:
        out[str(path.relative_to(ROOT))] = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    return out


def named(text: str) -> set[tuple[str, str | None]]:
    """(module, name) for each `from minipipe.sim import simulate`; (module, None) for each `import
    minipipe.trace` and each module named by its file (`minipipe/sim/pipeline.py`). Code is parsed whole
    (imports over several lines included); prose and Markdown line by line."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        trees = [ast.parse(code)]
    except SyntaxError:
        trees = []
        for line in STATEMENT.findall(text):
            try:
                trees.append(ast.parse(line.strip()))
            except SyntaxError:
                continue  # prose that starts like an import
    found = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minipipe":
            found |= {(node.module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "minipipe"}
    found |= {("minipipe." + f.replace("/", ".").removesuffix(".__init__"), None) for f in FILE.findall(text)}
    return found


NAMED = sorted(
    {(where, mod, name) for where, text in texts().items() for mod, name in named(text)},
    key=lambda t: (t[1], t[2] or "", t[0]),
)


def test_the_readers_name_some_paths():
    """The patterns find what they are for (otherwise every other case passes on nothing)."""
    assert named("from minipipe.sim.pipeline import (simulate,\n    Costs)\nimport minipipe.trace\n") == {
        ("minipipe.sim.pipeline", "simulate"),
        ("minipipe.sim.pipeline", "Costs"),
        ("minipipe.trace", None),
    }
    assert named("Run it:\n    from minipipe.sim import simulate\nsee `minipipe/viz/style.py`") == {
        ("minipipe.sim", "simulate"),
        ("minipipe.viz.style", None),
    }
    assert len({mod for _, mod, _ in NAMED}) > 30


@pytest.mark.parametrize("where, module, name", NAMED, ids=[f"{m}:{n or ''}@{w}" for w, m, n in NAMED])
def test_every_named_path_imports(where, module, name):
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if not e.name.startswith("minipipe"):
            pytest.skip(f"{module} needs {e.name}, an optional package")  # e.g. a framework's extra
        raise AssertionError(f"{where} names {module}, which does not exist") from None
    if name is not None and name != "*":
        assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}") is not None, (
            f"{where} imports {name} from {module}, which has no such name"
        )
