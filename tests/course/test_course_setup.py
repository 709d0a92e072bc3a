"""The course's JupyterLab config (minipipe/course/jupyter_setup.py, run by `make setup`) and kernel
(minipipe/course/kernel.py), without a server: what they write is what Jupyter reads. That a real
JupyterLab started on them shows no news prompt and opens notebooks unedited is
tests/course/test_browser_open.py's to check; the nbgrader part is tests/course/test_exercises.py's."""

import json
from types import SimpleNamespace

from minipipe.course import jupyter_setup
from minipipe.course.kernel import EXTENSION, LANGUAGE_INFO, load_ipython_extension


def test_the_news_prompt_is_answered_never_and_other_defaults_stay(tmp_path):
    assert jupyter_setup.news_prompted([str(tmp_path)])  # JupyterLab's own default: ask
    theirs = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    (tmp_path / "labconfig").mkdir()
    (tmp_path / "labconfig" / "default_setting_overrides.json").write_text(json.dumps(theirs))
    jupyter_setup.quiet_news(tmp_path)
    assert not jupyter_setup.news_prompted([str(tmp_path)])
    written = json.loads((tmp_path / "labconfig" / "default_setting_overrides.json").read_text())
    assert written == {**theirs, **jupyter_setup.QUIET}


def test_every_kernel_loads_the_course_extension_once_beside_others(tmp_path):
    assert jupyter_setup.kernels_report_a_version(tmp_path)
    (tmp_path / "ipython_kernel_config.json").write_text(
        json.dumps({"InteractiveShellApp": {"extensions": ["autoreload"], "exec_lines": ["x = 1"]}})
    )
    for _ in range(2):  # `make setup` run twice
        jupyter_setup.course_kernels(tmp_path)
    config = json.loads((tmp_path / "ipython_kernel_config.json").read_text())
    assert config == {"InteractiveShellApp": {"extensions": ["autoreload", EXTENSION], "exec_lines": ["x = 1"]}}
    assert not jupyter_setup.kernels_report_a_version(tmp_path)


def test_a_course_kernel_reports_what_the_notebooks_are_committed_with():
    from ipykernel.ipkernel import IPythonKernel

    kernel = SimpleNamespace(language_info=dict(IPythonKernel.language_info))
    assert "version" in kernel.language_info  # e.g. 3.11.7: no committed notebook can match it
    load_ipython_extension(SimpleNamespace(kernel=kernel))
    assert kernel.language_info == LANGUAGE_INFO, "ipykernel reports another language_info: update kernel.py"
    load_ipython_extension(SimpleNamespace())  # an IPython without a kernel: nothing to do
