"""The course's JupyterLab shows the course, not the teacher's tools.

nbgrader is a teacher's tool: exercises/build.py uses its ClearSolutions preprocessor to make the
learner's notebooks. Installed, it also adds an "Nbgrader" menu, a "Create Assignment" panel and
"Validate" buttons to JupyterLab, and four server extensions, which are not the course's checks
and would confuse a learner. `make setup` runs this module, which switches them off in the
environment's own Jupyter config (sys.prefix/etc/jupyter), leaving nbgrader importable:

    python -m minipipe.course.jupyter_setup          # hide them; prints what it wrote
    python -m minipipe.course.jupyter_setup --check  # exit 1, naming them, if any is still on
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

LAB_EXTENSIONS = ("@jupyter/nbgrader",)
SERVER_EXTENSIONS = tuple(f"nbgrader.server_extensions.{name}"
                          for name in ("formgrader", "validate_assignment", "assignment_list", "course_list"))
# read after nbgrader's own jupyter_server_config.d/nbgrader.json (the files are read in name order)
SERVER_FILE = "zz_minipipe_course.json"


def hide_teacher_tools(config_dir: Path | None = None) -> list[Path]:
    """Switch nbgrader's JupyterLab and server extensions off in `config_dir` (default: this
    environment's etc/jupyter); returns the files written."""
    config_dir = Path(config_dir or Path(sys.prefix) / "etc" / "jupyter")
    server = config_dir / "jupyter_server_config.d" / SERVER_FILE
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {name: False for name in SERVER_EXTENSIONS}}},
                                 indent=2) + "\n")
    page = config_dir / "labconfig" / "page_config.json"
    page.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(page.read_text()) if page.exists() and page.read_text().strip() else {}
    data.setdefault("disabledExtensions", {}).update({name: True for name in LAB_EXTENSIONS})
    page.write_text(json.dumps(data, indent=2) + "\n")
    return [server, page]


def teacher_tools_visible(config_dirs: list[str] | None = None) -> list[str]:
    """nbgrader's extensions that a JupyterLab started from these config dirs (default: Jupyter's
    own search path) would load, merged as jupyter_server and JupyterLab merge them."""
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager

    dirs = list(config_dirs) if config_dirs is not None else jupyter_config_path()
    server = ExtensionConfigManager(read_config_path=dirs).get_jpserver_extensions()   # later dirs win
    on = [name for name, enabled in server.items() if enabled and name.startswith("nbgrader")]
    disabled: dict = {}
    for d in reversed(dirs):                  # JupyterLab's page config: the first dir wins
        page = os.path.join(d, "labconfig", "page_config.json")
        if os.path.isfile(page) and os.path.getsize(page):
            found = json.loads(Path(page).read_text()).get("disabledExtensions", {})
            disabled.update({name: True for name in found} if isinstance(found, list) else found)
    installed = _installed_lab_extensions()
    on += [name for name in LAB_EXTENSIONS if name in installed and not disabled.get(name)]
    return sorted(on)


def _installed_lab_extensions() -> set[str]:
    from jupyter_core.paths import jupyter_path

    found = set()
    for root in jupyter_path("labextensions"):
        for package in Path(root).glob("**/package.json"):
            try:
                found.add(json.loads(package.read_text())["name"])
            except (ValueError, KeyError, OSError):
                continue
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a teacher's tool is still on")
    args = parser.parse_args(argv)
    if args.check:
        visible = teacher_tools_visible()
        if visible:
            print("the course's JupyterLab still loads: " + ", ".join(visible)
                  + "\n(run `python -m minipipe.course.jupyter_setup`, which `make setup` does)")
            return 1
        print("the course's JupyterLab loads none of nbgrader's extensions")
        return 0
    for path in hide_teacher_tools():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
