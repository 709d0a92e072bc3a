"""Opening the course in JupyterLab changes nothing and nothing covers it: JupyterLab + headless Chromium.

A lesson, the glossary, an exercise and a German lesson each open with their kernel started and count as unedited
(closing the tab asks to save nothing), because they are committed with the metadata a course
kernel reports (minipipe/course/kernel.py). A copy with the metadata the lessons had before
counts as edited at once: what the check sees is real. JupyterLab's "get notified about official
Jupyter news?" toast does not show: the course's config answers it (minipipe/course/jupyter_setup.py, which
`make setup` runs and tests/support/browser/jupyterlab.py runs for its server).

Skipped when /usr/bin/chromium is missing, unless MINIPIPE_REQUIRE_BROWSER=1 (CI), then it fails.
"""

import json
import shutil

import pytest

from tests.support.browser.chromium import launched, require_browser
from tests.support.browser.jupyterlab import DIRTY_ONCE_KERNEL_KNOWN, KERNEL_IDLE, REPO, jupyterlab

ARTIFACTS = REPO / "artifacts" / "browser"
# and a German lesson: its metadata says its language beside the kernel's (minipipe/course/i18n/build.py)
OPENED = [
    "lessons/00_start_here.ipynb",
    "lessons/glossary.ipynb",
    "exercises/01_scale_the_loss.ipynb",
    "course/de/lessons/00_start_here.ipynb",
]
BEFORE = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}  # how lessons 00-03 and the glossary were committed
NEWS = "Would you like to get notified about official Jupyter news?"
OPEN = """name => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(w && w.context && w.context.path === name && w.sessionContext);
}"""

pytestmark = pytest.mark.browser


@pytest.mark.timeout(300)
def test_notebooks_open_unedited_and_uncovered(tmp_path):
    require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "course"
    for rel in OPENED:  # the course's folders, so that relative links resolve as in the course
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    control = json.loads((REPO / OPENED[1]).read_text())
    control["metadata"] = BEFORE
    (root / "lessons" / "before.ipynb").write_text(json.dumps(control))
    with jupyterlab(root, tmp_path / "lab", ARTIFACTS / "jupyterlab_open.log") as lab, launched() as browser:
        edited = {}
        for rel in [*OPENED, "lessons/before.ipynb"]:
            page = browser.new_page(viewport=dict(width=1300, height=900))
            try:
                page.goto(lab.url(f"lab/tree/{rel}") + "&reset")  # a fresh workspace: only this notebook
                page.wait_for_function(OPEN, arg=rel, timeout=60_000)
                page.wait_for_function(KERNEL_IDLE, timeout=90_000)
                edited[rel] = page.evaluate(DIRTY_ONCE_KERNEL_KNOWN)
                assert page.get_by_text(NEWS).count() == 0, f"JupyterLab asks about Jupyter news over {rel}"
            except BaseException:
                page.screenshot(path=str(ARTIFACTS / "open_failure.png"))
                raise
            finally:
                page.close()
    assert edited.pop("lessons/before.ipynb") is True, "a notebook JupyterLab rewrites should count as edited"
    assert edited == {rel: False for rel in OPENED}, f"counted as edited the moment they opened: {edited}"
