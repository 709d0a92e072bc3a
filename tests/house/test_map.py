"""The README's map against the package: its picture draws the folders as their imports are (each
line imports only what is drawn below it), and it names every folder and top module, its table
every file of each folder. A new module, a move, or an import that points up fails here, naming
the line of the picture or the row of the table to change."""

import re

from tests.support.imports import FILES, PACKAGE, ROOT, graph, name_of

README = ROOT / "README.md"
UNIT_RE = re.compile(r"(?<![\w./`-])([a-z_]+(?:/|\.py))(?![\w/])")


def unit_of(module: str) -> str | None:
    """The folder (`sim/`) or top module (`trace.py`) a module belongs to; None for the package's
    own __init__, which every import loads first."""
    parts = module.split(".")[1:]
    if not parts:
        return None
    return parts[0] + "/" if (PACKAGE / parts[0]).is_dir() else parts[0] + ".py"


UNITS = {u for u in map(unit_of, map(name_of, FILES)) if u}


def picture(text: str) -> list[set[str]]:
    """The map's picture, line by line from the top: the package's folders and top modules each
    line names (lessons/ and the like, outside the package, are left out)."""
    section = text[text.index("## The map") :]
    block = section[section.index("```") + 3 :]
    block = block[: block.index("```")]
    return [found for line in block.splitlines() if (found := {u for u in UNIT_RE.findall(line) if u in UNITS})]


def unit_edges(inside: bool = True) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {u: set() for u in UNITS}
    for module, imported in graph(inside).items():
        here = unit_of(module)
        for target in imported:
            there = unit_of(target)
            if here and there and there != here:
                edges[here].add(there)
    return edges


def upward(lines: list[set[str]], edges: dict[str, set[str]]) -> list[str]:
    """Each import that does not point to a line below its own, in words."""
    line_of = {u: i for i, units in enumerate(lines) for u in units}
    return sorted(
        f"{a} (line {line_of[a] + 1}) imports {b} (line {line_of[b] + 1})"
        for a, targets in edges.items()
        for b in targets
        if a in line_of and b in line_of and line_of[b] <= line_of[a]
    )


def table_rows(text: str) -> list[tuple[str, str]]:
    section = text[text.index("## The map") :]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `minipipe/")]
    return [(head, body) for head, body in rows]


def unnamed(text: str) -> list[str]:
    """Each folder's file (and subfolder) and each top module that its row of the table does not name."""
    rows = table_rows(text)
    gone = []
    for path in sorted(PACKAGE.iterdir()):
        if path.name.startswith(("_", ".")) and path.name != "__main__.py" or path.suffix not in ("", ".py"):
            continue
        unit = path.name + "/" if path.is_dir() else path.name
        row = [body for head, body in rows if f"`minipipe/{unit}`" in head or f"`{unit}`" in head]
        if not row:
            gone.append(f"{unit} (no row)")
            continue
        inside = (
            sorted(
                p
                for p in path.iterdir()
                if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
            )
            if path.is_dir()
            else []
        )
        gone += [
            f"{unit}{p.name}" + ("/" if p.is_dir() else "")
            for p in inside
            if f"`{p.name}`" not in row[0] and f"`{p.name}/`" not in row[0]
        ]
    return gone


TEXT = README.read_text()


def test_the_map_is_read():
    lines = picture(TEXT)
    assert lines[0] == {"__main__.py"} and {"schedule/"} == lines[-2] and {"outputs.py", "fields.py"} == lines[-1]
    assert sum(map(len, lines)) == len(UNITS) >= 17
    assert "sim/" in UNITS and "trace.py" in UNITS and unit_of("minipipe.course.exercises.verdict") == "course/"
    assert "engine/" in unit_edges(inside=False)["serve/"]  # at load
    assert "compare.py" in unit_edges()["viz/"]  # only inside a function (RunExplorer)
    assert "compare.py" not in unit_edges(inside=False)["viz/"]
    assert len(table_rows(TEXT)) >= 12


def test_the_checks_can_fail():
    """The same picture with sim/ drawn beside engine/, cli.py beside bench/; a table
    row that lost a file, a top module with no row."""
    lines = picture(TEXT)
    swapped = [(u - {"sim/"}) | ({"sim/"} if "engine/" in u else set()) for u in lines]
    engine_up = [x for x in upward(swapped, unit_edges()) if x.startswith("engine/")]
    assert engine_up == ["engine/ (line 9) imports sim/ (line 9)"]
    assert upward([{"cli.py", "bench/"}], unit_edges()) == ["cli.py (line 1) imports bench/ (line 1)"]
    assert unnamed(TEXT.replace("`diagnosis.py`", "diagnosis")) == ["engine/diagnosis.py"]
    no_row = TEXT.replace("`minipipe/trace.py`, `traffic.py`, `outputs.py`", "`minipipe/trace.py`, `traffic.py`")
    assert unnamed(no_row) == ["outputs.py (no row)"]


def test_every_folder_and_top_module_is_drawn_once():
    lines = picture(TEXT)
    drawn = [u for units in lines for u in units]
    twice = sorted({u for u in drawn if drawn.count(u) > 1})
    assert twice == [], f"README.md's map draws {twice} on more than one line: keep one"
    missing = sorted(UNITS - set(drawn))
    assert missing == [], f"README.md's map does not draw {missing}: put each on the line above everything it imports"


def test_every_import_points_down_the_picture():
    """Module-level imports and those inside functions alike: a function's import runs as surely,
    only later."""
    up = upward(picture(TEXT), unit_edges())
    assert up == [], (
        "README.md's map draws these imports pointing up or sideways: "
        + "; ".join(up)
        + ". Redraw the line (or move the import down the layers)"
    )


def test_the_table_names_every_file():
    gone = unnamed(TEXT)
    assert gone == [], (
        f"README.md's table (## The map) does not name {gone}: add each to its folder's row, with what it holds"
    )
