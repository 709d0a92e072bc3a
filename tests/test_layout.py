"""The package's shape, checked from its source: no module reaches for another's private names,
the benchmark's modules import one another without a cycle, and the run API keeps the process
machinery at arm's length."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "minipipe"


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
    private = [(module, name) for module, names in imports(path) if module.startswith("minipipe")
               for name in names if name.startswith("_")]
    assert private == [], f"{path.name} imports private names {private}: give them a public name where they are shared"


def import_graph(folder: pathlib.Path, package: str) -> dict[str, set[str]]:
    """Which of a folder's modules each of them imports (at module level or inside a function)."""
    modules = {f"{package}.{p.stem}" for p in folder.glob("*.py")}
    return {f"{package}.{p.stem}": {m for module, names in imports(p)
                                    for m in [module] + [f"{module}.{n}" for n in names] if m in modules}
            for p in folder.glob("*.py")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    def walk(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            found = walk(nxt, path + [nxt])
            if found:
                return found
        return None

    return next((c for c in (walk(start, [start]) for start in sorted(graph)) if c), None)


def test_the_benchmark_modules_import_one_another_without_a_cycle():
    graph = import_graph(PACKAGE / "bench", "minipipe.bench")
    assert "minipipe.bench.shipped" in graph["minipipe.bench.jobs"]        # the graph sees imports in functions
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
