"""What the course's notebooks and kernels say about themselves, so that a notebook opens unchanged.

As soon as a notebook's kernel starts, JupyterLab writes the kernel's name and language into the
notebook's metadata (`kernelspec`, `language_info`), and a notebook whose metadata changed counts as
edited: closing its tab asks to save what the learner never touched. So the course's notebooks are
committed with exactly what a course kernel reports (NOTEBOOK_METADATA; exercises/build.py writes
it too), and a course kernel reports no Python version: ipykernel says "3.11.7" or "3.12.3",
whatever the machine has, which no committed notebook can match. `make setup` loads this module
into every kernel of the course's environment (jupyter_setup.py writes the kernels' config).
"""

from __future__ import annotations

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
NOTEBOOK_METADATA = {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
EXTENSION = __name__


def load_ipython_extension(shell) -> None:
    """IPython calls this as the kernel starts, before it answers JupyterLab's first request."""
    kernel = getattr(shell, "kernel", None)  # a plain IPython terminal has none
    if kernel is not None:
        kernel.language_info = {k: v for k, v in kernel.language_info.items() if k != "version"}
