"""Docs that cannot drift: every file, folder and `minipipe.` name that a docstring, a README, the
teaching notes, a lesson or the build files (Makefile, pyproject.toml, .ci/run) name exists. A
moved or renamed module fails here, naming the text that still says the old name."""

import ast
import importlib
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "minipipe"

EXTENSIONS = "py|ipynb|md|toml|json|sh|yaml|yml|csv|css|txt|cfg"
# a file: words joined by / ending in a known extension, not part of a longer word or a URL
FILE_RE = re.compile(rf"(?<![\w./:-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:{EXTENSIONS}))(?![\w/(])")
FOLDER_RE = re.compile(r"`((?:[\w.-]+/)+)`")  # a folder, as the docs write one: `sim/`
NAME_RE = re.compile(r"(?<![\w./])(minipipe(?:\.[A-Za-z_]\w*)+)")

# named on purpose though not in this repository:
# their source files (scheduler/: sail-sg/zero-bubble-pipeline-parallelism's)
OTHER_PROJECTS = {"torch", "torchtitan", "deepspeed", "megatron", "jax", "DualPipe", "scheduler"}
MADE_BY_RUNS = {"room", "hub", "gradebook", "runs", "build", "artifacts", "ckpt"}  # folders a run writes
WRITTEN = {
    "16_beat_the_search.board.json",
    "trace.json",
    "meta.json",
    "my_model.toml",
    "my_gpu.json",
    "zb-h1.csv",
    "zb-v.csv",
    "interleaved.csv",
    "03_one_f_one_b-Copy1.ipynb",
    "data.txt",
    "index.md",
}  # files an example, a run or a build writes


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).exists()]


FILES = tracked()
BASENAMES = {p.name for p in FILES}
FOLDERS = {str(d.relative_to(ROOT)) for p in FILES for d in p.parents if d != ROOT and ROOT in d.parents}


def docstrings(path: Path):
    tree = ast.parse(path.read_text())
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def texts():
    """(where, text, strict): strict texts (docstrings, build files) must name a file by a path
    from their own folder, a folder above it, the package or the repository; prose may name a
    file by its name alone when one file of the repository has it."""
    for path in FILES:
        rel = path.relative_to(ROOT)
        if path.suffix == ".py" and rel.parts[0] in ("minipipe", "tests", "benchmarks", "site", "exercises"):
            yield path, "\n".join(docstrings(path)), True
        elif str(rel) in ("Makefile", "pyproject.toml", ".ci/run"):
            yield path, path.read_text(), True
        elif path.suffix == ".md" and (path.name == "README.md" or rel.parts[0] == "teaching"):
            yield path, path.read_text(), False
        elif path.suffix == ".ipynb" and rel.parts[0] == "lessons":
            cells = json.loads(path.read_text())["cells"]
            yield path, "\n".join("".join(c["source"]) for c in cells), False


def bases(path: Path) -> list[Path]:
    folders = [path.parent, *(p for p in path.parents if PACKAGE in p.parents or p in (PACKAGE, ROOT / "tests"))]
    return list(dict.fromkeys([*folders, PACKAGE, ROOT]))


def outside(ref: str) -> bool:
    first = ref.split("/")[0]
    return first in OTHER_PROJECTS or first in MADE_BY_RUNS or ref in WRITTEN or "NN" in ref


def missing_paths(path: Path, text: str, strict: bool) -> list[str]:
    found = [m.group(1) for m in FILE_RE.finditer(text)] + [m.group(1) for m in FOLDER_RE.finditer(text)]
    return sorted(
        {
            ref
            for ref in found
            if not outside(ref)
            and not any((b / ref).exists() for b in bases(path))
            and (strict or not known_elsewhere(ref))
        }
    )


def known_elsewhere(ref: str) -> bool:
    """Prose (a README's table row, a lesson) may name a file by its name alone, or a folder by its
    last names (the course row's grading folder), when exactly one in the repository has them."""
    if ref.endswith("/"):
        return sum(1 for f in FOLDERS if f == ref.rstrip("/") or f.endswith("/" + ref.rstrip("/"))) == 1
    return "/" not in ref and ref in BASENAMES


def resolves(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module = ".".join(parts[:k])
        where = ROOT.joinpath(*parts[:k])
        if not (where.with_suffix(".py").exists() or where.is_dir()):  # a folder: a package, or a namespace one
            continue
        try:
            obj = importlib.import_module(module)
        except ImportError as e:  # an optional extra (JupyterHub, DeepSpeed) is not installed here
            return not (e.name or "").startswith("minipipe")
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def missing_names(text: str) -> list[str]:
    return sorted({n for n in (m.group(1).rstrip(".") for m in NAME_RE.finditer(text)) if not resolves(n)})


TEXTS = list(texts())


def test_the_texts_are_found():
    where = {str(p.relative_to(ROOT)) for p, _, _ in TEXTS}
    assert {
        "README.md",
        "lessons/README.md",
        "exercises/README.md",
        "teaching/notes.md",
        "Makefile",
        "minipipe/schedule/validate.py",
        "lessons/05_interleaved.ipynb",
    } <= where
    assert len([p for p, _, strict in TEXTS if strict and p.suffix == ".py"]) > 250


def test_the_patterns_find_what_they_are_for():
    here = ROOT / "minipipe/schedule/validate.py"
    assert missing_paths(here, "the replay (replay.py) is the simulator (simulate.py)", True) == ["simulate.py"]
    assert missing_paths(here, "see sim/pipeline.py and `engine/`, and minipipe/trace.py", True) == []
    assert missing_paths(here, "the messages (ops.py's tables), and `serve/nowhere/`", True) == ["serve/nowhere/"]
    assert missing_paths(ROOT / "README.md", "`ops.py`, `nothing_of_that_name.py`, https://x.org/a.py", False) == [
        "nothing_of_that_name.py"
    ]
    prose = "`grading/`, `exercises/`, `nowhere/`, `__init__.py`"
    assert missing_paths(ROOT / "README.md", prose, False) == ["nowhere/"]
    assert missing_paths(here, "`grading/`", True) == ["grading/"]  # a docstring says where it is from here
    assert missing_paths(here, "torchtitan/distributed/pipeline_parallel.py writes runs/trace.json", True) == []
    assert missing_names(
        "`minipipe.sim.pipeline.simulate`, minipipe.OpType. minipipe.sim.nothing, minipipe.schedule.ops.Nowhere"
    ) == ["minipipe.schedule.ops.Nowhere", "minipipe.sim.nothing"]


@pytest.mark.parametrize("path,text,strict", TEXTS, ids=[str(p.relative_to(ROOT)) for p, _, _ in TEXTS])
def test_every_file_and_name_the_docs_name_exists(path, text, strict):
    where = path.relative_to(ROOT)
    gone = missing_paths(path, text, strict)
    assert gone == [], (
        f"{where} names {', '.join(gone)}, which is not there (from {where.parent}/, a folder above "
        f"it, minipipe/ or the repository's root): say where it is now"
    )
    unknown = missing_names(text)
    assert unknown == [], f"{where} names {', '.join(unknown)}, which minipipe does not have: say what it is called now"
