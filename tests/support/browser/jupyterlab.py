"""A JupyterLab server for one browser test, and the JavaScript that drives a notebook in it.

The server gets a free port, a random token, its own settings / workspace / runtime folders
(nothing from the user's Jupyter setup, nothing left behind) with the course's own config written
into them as `make setup` writes it into the environment (minipipe/course/jupyter_setup.py: no
news prompt, kernels that leave a notebook's metadata as committed), and serves a scratch folder:
the notebook's autosave writes outputs into the copy, never into the lesson. `jupyterlab()` always
stops it, also when the test fails: /api/shutdown first (which also stops its kernels), then
the process group it started, if anything is still alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from minipipe.course import jupyter_setup

REPO = Path(__file__).resolve().parents[3]

# Per-run JupyterLab settings for the tests alone: render every cell (no windowing: cells out of
# view would not be in the DOM). The news prompt is the course's own config's to turn off.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


@dataclass
class Lab:
    base: str
    token: str
    process: subprocess.Popen

    def url(self, path: str) -> str:
        return f"{self.base}/{path}?token={self.token}"

    def request(self, path: str, method: str = "GET", timeout: float = 5.0) -> int:
        req = urllib.request.Request(
            f"{self.base}/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, workdir: Path, log_path: Path, start_timeout: float = 90.0):
    """Run JupyterLab on `root` until the with-block ends; yields a `Lab`."""
    for name in ("settings", "workspaces", "runtime", "config", "data", "ipython"):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    for rel, values in SETTINGS.items():
        path = workdir / "settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    jupyter_setup.setup(workdir / "config", workdir / "ipython" / "profile_default")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(workdir / "config"),
        JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
        JUPYTER_DATA_DIR=str(workdir / "data"),
        IPYTHONDIR=str(workdir / "ipython"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={workdir / 'settings'}",
        f"--LabApp.workspaces_dir={workdir / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",
        "--ServerApp.terminals_enabled=False",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI runs as root; JupyterLab refuses that without this flag
    with open(log_path, "w") as log:  # the server writes to its own copy of the descriptor
        # its own session: if a polite shutdown fails, its whole process group can be stopped
        process = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(f"http://127.0.0.1:{port}", token, process)
    try:
        wait_until_ready(lab, start_timeout, log_path)
        yield lab
    finally:
        stop(lab)


def wait_until_ready(lab: Lab, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {lab.process.returncode}; its log:\n" + log_path.read_text()[-3000:]
            )
        with contextlib.suppress(OSError):
            if lab.request("api/status", timeout=2) == 200:
                return
        time.sleep(0.3)
    raise TimeoutError(
        f"JupyterLab did not answer on {lab.base} within {timeout:.0f} s; its log:\n" + log_path.read_text()[-3000:]
    )


def stop(lab: Lab) -> None:
    if lab.process.poll() is None:
        with contextlib.suppress(OSError, urllib.error.URLError):
            lab.request("api/shutdown", method="POST")
        with contextlib.suppress(subprocess.TimeoutExpired):
            lab.process.wait(timeout=15)
    for sig in (signal.SIGTERM, signal.SIGKILL):  # only the group this helper started
        if lab.process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lab.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            lab.process.wait(timeout=5)


# -- JavaScript run in the page (JupyterLab started with expose_app_in_browser) --------------
NOTEBOOK_OPEN = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(w && w.content && w.sessionContext);
}"""

# The toolbar says "idle" before any kernel exists: wait for the session's own kernel instead.
KERNEL_IDLE = """() => {
  const s = window.jupyterapp.shell.currentWidget.sessionContext;
  const k = s.session && s.session.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""

# Whether the open notebook counts as edited (closing its tab would ask to save it), once its kernel
# has told JupyterLab its name and language, which JupyterLab writes into the notebook's metadata.
DIRTY_ONCE_KERNEL_KNOWN = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session.kernel;
  await k.info;
  await k.spec;
  await new Promise(r => setTimeout(r, 500));
  return w.context.model.dirty;
}"""

RUN_ALL = "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"

ALL_EXECUTED = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  const k = nb.sessionContext.session.kernel;
  return cells.every(c => c.model.executionCount !== null) && k.status === 'idle';
}"""

ERRORS = """() => window.jupyterapp.shell.currentWidget.content.widgets
  .filter(c => c.model.type === 'code')
  .flatMap(c => c.model.outputs.toJSON())
  .filter(o => o.output_type === 'error')
  .map(o => o.ename + ': ' + o.evalue)"""

SET_THEME = "theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})"

# Bars plotly has drawn with a visible width (an animation frame draws the not-yet-started
# actions with zero width), in the plot under `root`.
DRAWN_BARS = """root => [...root.querySelectorAll('.barlayer g.point path')]
  .filter(p => p.getBBox().width > 0.5).length"""
