"""Which notebooks the course has, and which of them `make test` runs top to bottom.

- Every `lessons/*.ipynb` and every notebook under `exercises/` is committed clean
  (tests/course/test_notebooks.py).
- nbval (`pytest --nbval-lax --nbval-current-env`, in pyproject.toml's addopts) runs the
  notebooks that match the `*.ipynb` globs of pyproject.toml's `testpaths`, one place for the
  suite and for this file: `lessons/*.ipynb` and `exercises/solutions/*.ipynb`, the reference
  solutions, which must run as they are. A learner's notebook (`exercises/*.ipynb`) has check
  cells that fail until it is solved, so nbval does not run it; a test of its own checks that
  its checks reject the untouched stub. To have nbval run another folder, add its glob to
  `testpaths`. A glob that matches nothing yet is fine.
- nbval's run of each notebook is kept (tests/support/executed_notebooks.py): tests/course/test_browser_export.py
  exports each notebook nbval runs to HTML from that copy and looks at it offline, and
  tests/site/test_site.py builds the site from the lessons' copies, so each notebook runs once.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
TESTPATHS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
RUN = tuple(glob for glob in TESTPATHS if glob.endswith(".ipynb"))  # nbval runs these
CLEAN = ("lessons/*.ipynb", "exercises/**/*.ipynb", "decide/*.ipynb")  # committed without outputs
LESSON_FILES = "[0-9][0-9]*_*.ipynb"  # the lessons in lessons/: 00_start_here …, and 09b_… after 09


def find(patterns) -> list[Path]:
    found = {path for pattern in patterns for path in REPO.glob(pattern) if ".ipynb_checkpoints" not in path.parts}
    return sorted(found)


def ids(paths) -> list[str]:
    return [str(path.relative_to(REPO)) for path in paths]
