"""minipipe's import graph, read from its source (nothing is imported): every `import` and
`from ... import` of a minipipe module, at module level and inside functions, but not those under
`if TYPE_CHECKING:` (for the type checker only, never run). The layering tests
(tests/house/test_boundaries.py, tests/house/test_map.py) read it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "minipipe"
FILES = sorted(PACKAGE.rglob("*.py"))


@dataclass(frozen=True)
class Import:
    target: str  # what is imported, as a dotted name: a module, or a name in one
    line: int
    inside: bool  # inside a function: it runs when the function does, not when the module loads


def name_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path) -> list[Import]:
    """Each import in `path`: for `from a import b`, both `a` and `a.b` (b may be a module)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts
    found: list[Import] = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for other in child.orelse:  # `else:` of `if TYPE_CHECKING:` runs
                    walk_one(other, inside)
                continue
            walk_one(child, inside)

    def walk_one(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(x for x in (base, node.module) if x)
            found.append(Import(module, node.lineno, inside))
            found.extend(Import(f"{module}.{alias.name}", node.lineno, inside) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, inside) for alias in node.names)
        else:
            walk(node, inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text()), False)
    return found


MODULES = {name_of(p) for p in FILES}


def graph(inside: bool = True) -> dict[str, set[str]]:
    """module -> the minipipe modules it imports (with `inside` False, only those it imports when it loads)."""
    return {
        name_of(p): {
            i.target for i in imports(p) if i.target in MODULES and i.target != name_of(p) and (inside or not i.inside)
        }
        for p in FILES
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `edges` (its first node repeated at the end), or None."""
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in done:
                found = walk(nxt, path + [nxt])
                if found:
                    return found
        done.add(node)
        return None

    return next((c for c in (walk(start, [start]) for start in sorted(edges)) if c), None)
