"""The course's JupyterLab: the course in view, nothing over it, and notebooks that open unchanged.

`make setup` runs this module, which writes three things into the environment's own config
(sys.prefix/etc/jupyter and sys.prefix/etc/ipython), so that `make course` and the workshop's
servers (which run this environment's JupyterLab) get them alike:

- nbgrader's extensions off. nbgrader is a teacher's tool: exercises/build.py uses its
  ClearSolutions preprocessor to make the learner's notebooks. Installed, it also adds an
  "Nbgrader" menu, a "Create Assignment" panel and "Validate" buttons to JupyterLab, and four
  server extensions, which are not the course's checks and would confuse a learner. nbgrader stays
  importable.
- No news prompt. JupyterLab asks "Would you like to get notified about official Jupyter news?"
  in a toast that covers the top of the first figure until it is answered; the course's answer
  is no (and no update checks either: the course pins its JupyterLab).
- Kernels that report no Python version (kernel.py), so that a committed notebook's metadata is
  what JupyterLab finds when the kernel starts, and opening a lesson changes nothing in it.

    python -m minipipe.course.jupyter_setup          # write them; prints what it wrote
    python -m minipipe.course.jupyter_setup --check  # exit 1, saying what is missing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .kernel import EXTENSION

LAB_EXTENSIONS = ("@jupyter/nbgrader",)
SERVER_EXTENSIONS = tuple(
    f"nbgrader.server_extensions.{name}"
    for name in ("formgrader", "validate_assignment", "assignment_list", "course_list")
)
# read after nbgrader's own jupyter_server_config.d/nbgrader.json (the files are read in name order)
SERVER_FILE = "zz_minipipe_course.json"
NOTIFICATIONS = "@jupyterlab/apputils-extension:notification"
QUIET = {NOTIFICATIONS: {"fetchNews": "false", "checkForUpdates": False}}
# JupyterLab's defaults from the config dirs (jupyterlab_server: labconfig/default_setting_overrides.json)
OVERRIDES = "default_setting_overrides"
KERNEL_CONFIG = "ipython_kernel_config.json"  # read by every IPython kernel (IPKernelApp)


def setup(config_dir: Path | None = None, ipython_dir: Path | None = None) -> list[Path]:
    """Everything the course's JupyterLab needs (see the module's docstring), in `config_dir`
    (default: this environment's etc/jupyter) and `ipython_dir` (default: its etc/ipython);
    returns the files written."""
    return [*hide_teacher_tools(config_dir), quiet_news(config_dir), course_kernels(ipython_dir)]


def hide_teacher_tools(config_dir: Path | None = None) -> list[Path]:
    """Switch nbgrader's JupyterLab and server extensions off in `config_dir` (default: this
    environment's etc/jupyter); returns the files written."""
    config_dir = Path(config_dir or Path(sys.prefix) / "etc" / "jupyter")
    server = config_dir / "jupyter_server_config.d" / SERVER_FILE
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {name: False for name in SERVER_EXTENSIONS}}}, indent=2) + "\n"
    )
    page = config_dir / "labconfig" / "page_config.json"
    page.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(page.read_text()) if page.exists() and page.read_text().strip() else {}
    data.setdefault("disabledExtensions", {}).update({name: True for name in LAB_EXTENSIONS})
    page.write_text(json.dumps(data, indent=2) + "\n")
    return [server, page]


def quiet_news(config_dir: Path | None = None) -> Path:
    """Answer JupyterLab's news prompt with "never" for every user of `config_dir` (default: this
    environment's etc/jupyter), keeping whatever other defaults the file holds."""
    return _merge(Path(config_dir or Path(sys.prefix) / "etc" / "jupyter") / "labconfig" / f"{OVERRIDES}.json", QUIET)


def course_kernels(ipython_dir: Path | None = None) -> Path:
    """Have every IPython kernel that reads `ipython_dir` (default: this environment's
    etc/ipython; a profile folder works too) load kernel.py, keeping the extensions listed."""
    path = Path(ipython_dir or Path(sys.prefix) / "etc" / "ipython") / KERNEL_CONFIG
    listed = _read(path).get("InteractiveShellApp", {}).get("extensions", [])
    return _merge(path, {"InteractiveShellApp": {"extensions": [*[e for e in listed if e != EXTENSION], EXTENSION]}})


def news_prompted(config_dirs: list[str] | None = None) -> bool:
    """Whether a JupyterLab started from these config dirs (default: Jupyter's own search path)
    would still ask about Jupyter news, with the config dirs' defaults merged as JupyterLab merges them."""
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.services.config.manager import ConfigManager

    dirs = list(config_dirs) if config_dirs is not None else jupyter_config_path()
    found = ConfigManager(read_config_path=[os.path.join(d, "labconfig") for d in dirs]).get(OVERRIDES)
    return found.get(NOTIFICATIONS, {}).get("fetchNews", "none") != "false"


def kernels_report_a_version(ipython_dir: Path | None = None) -> bool:
    """Whether this environment's kernels (their config in `ipython_dir`, default etc/ipython)
    would still write the Python version into every notebook they open."""
    path = Path(ipython_dir or Path(sys.prefix) / "etc" / "ipython") / KERNEL_CONFIG
    return EXTENSION not in _read(path).get("InteractiveShellApp", {}).get("extensions", [])


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}


def _merge(path: Path, values: dict) -> Path:
    """Write `values` into the JSON file at `path`, a section at a time, keeping the rest."""
    data = _read(path)
    for section, entries in values.items():
        data.setdefault(section, {}).update(entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def teacher_tools_visible(config_dirs: list[str] | None = None) -> list[str]:
    """nbgrader's extensions that a JupyterLab started from these config dirs (default: Jupyter's
    own search path) would load, merged as jupyter_server and JupyterLab merge them."""
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager

    dirs = list(config_dirs) if config_dirs is not None else jupyter_config_path()
    server = ExtensionConfigManager(read_config_path=dirs).get_jpserver_extensions()  # later dirs win
    on = [name for name, enabled in server.items() if enabled and name.startswith("nbgrader")]
    disabled: dict = {}
    for d in reversed(dirs):  # JupyterLab's page config: the first dir wins
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


def missing() -> list[str]:
    """What this environment's JupyterLab still lacks of the course's setup, in words (none: set up)."""
    visible = teacher_tools_visible()
    return (
        [f"nbgrader's extensions are still on ({', '.join(visible)})"] * bool(visible)
        + ["JupyterLab still asks about Jupyter news"] * news_prompted()
        + ["the kernels still write the Python version into every notebook they open"] * kernels_report_a_version()
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if something is still missing")
    args = parser.parse_args(argv)
    if args.check:
        lacking = missing()
        if lacking:
            print(
                "the course's JupyterLab is not set up: "
                + "; ".join(lacking)
                + "\n(run `python -m minipipe.course.jupyter_setup`, which `make setup` does)"
            )
            return 1
        print(
            "the course's JupyterLab loads none of nbgrader's extensions, asks about no news, and its kernels "
            "leave the notebooks' metadata as committed"
        )
        return 0
    for path in setup():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
