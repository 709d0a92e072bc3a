"""The package's shape, checked from its source: no module reaches for another's private names,
the benchmark's modules import one another without a cycle, and the run API keeps the process
machinery at arm's length."""

import ast
import pathlib

import pytest

from tests.support.imports import find_cycle

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "minipipe"


def imports(path: pathlib.Path):
    """(module imported from, names) of every `from ... import ...` in a file, at any depth."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ((node.module,) if node.module else ()))
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(PACKAGE)) for p in FILES])
def test_no_private_name_is_imported_from_another_module(path):
    private = [
        (module, name)
        for module, names in imports(path)
        if module.startswith("minipipe")
        for name in names
        if name.startswith("_")
    ]
    assert private == [], f"{path.name} imports private names {private}: give them a public name where they are shared"


def import_graph(folder: pathlib.Path, package: str) -> dict[str, set[str]]:
    """Which of a folder's modules each of them imports (at module level or inside a function)."""
    modules = {f"{package}.{p.stem}" for p in folder.glob("*.py")}
    return {
        f"{package}.{p.stem}": {
            m for module, names in imports(p) for m in [module] + [f"{module}.{n}" for n in names] if m in modules
        }
        for p in folder.glob("*.py")
    }


def test_the_benchmark_modules_import_one_another_without_a_cycle():
    graph = import_graph(PACKAGE / "bench", "minipipe.bench")
    assert "minipipe.bench.shipped" in graph["minipipe.bench.jobs"]  # the graph sees imports in functions
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_run_api_leaves_processes_to_workers():
    launch = (PACKAGE / "engine" / "launch.py").read_text()
    for word in ("multiprocessing", "TCPStore", "sched_setaffinity", "mallopt"):
        assert word not in launch, f"launch.py should leave {word} to workers.py"
    import minipipe
    from minipipe.engine import launch as launched
    from minipipe.engine.diagnosis import WorkerError

    # one name, one path: the error is diagnosis.py's (and the package's), the config config.py's
    assert minipipe.WorkerError is WorkerError
    assert not {"WorkerError", "RunConfig", "tell"} & set(launched.__all__)
    assert not hasattr(launched, "WorkerError")


TESTS = PACKAGE.parent / "tests"


def test_imports_among_the_tests(tests: pathlib.Path = TESTS):
    """The tests' helpers live in tests/support/ and are imported one way, as tests.support.*; no test
    file imports another (what two test files share is a helper)."""
    helpers = {p.stem for p in (tests / "support").glob("*.py")} | {"browser"}
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                parts = name.split(".")
                if (
                    parts[0] in helpers
                    or any(p.startswith("test_") for p in parts)
                    or (parts[0] == "tests" and parts[1:2] != ["support"])
                ):
                    wrong.append(f"{path.relative_to(tests.parent)}:{node.lineno} imports {name}")
    assert wrong == [], "import each helper as tests.support.<name> (and no test file): " + "; ".join(wrong)


def test_imports_among_the_tests_can_fail(tmp_path):
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "spawn.py").write_text("")
    (tmp_path / "test_a.py").write_text(
        "from spawn import run_ranks\nfrom tests.test_b import x\nimport tests.spawn\n"
        "from tests.support.spawn import run_ranks\n"
    )
    with pytest.raises(AssertionError) as caught:
        test_imports_among_the_tests(tmp_path)
    said = str(caught.value)
    assert "test_a.py:1 imports spawn" in said and "test_a.py:2 imports tests.test_b" in said
    assert "test_a.py:3 imports tests.spawn" in said and ":4 " not in said
