"""`minipipe.run` from a notebook kernel: twice in one kernel, and a failing run reported in
the cell without killing the kernel (the worker code lives in the package, so spawn-style
workers can find it; nothing is defined in the notebook for them)."""

import nbformat
import pytest
from nbclient import NotebookClient

CELLS = [
    "from minipipe import run, RunConfig\n"
    "first = run(RunConfig(schedule='1f1b', p=2, m=4, steps=3, model_args={'width': 16, 'depth': 3}, batch_size=8))\n"
    "print('losses', len(first.losses), 'events', len(first.traces[-1].events))",
    "from minipipe import WorkerError\n"
    "try:\n"
    "    run(RunConfig(p=2, m=4, steps=3, batch_size=8, timeout=5, fault={'rank': 1, 'step': 1, 'action': '1F2'}))\n"
    "except WorkerError as e:\n"
    "    print('caught rank', e.rank, e.action)",
    "second = run(RunConfig(schedule='gpipe', p=2, m=4, steps=2, model_args={'width': 16, 'depth': 3}, batch_size=8))\n"
    "print('second', len(second.losses), second.peak_held)",
]


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_run_twice_and_fail_once_in_one_kernel(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream") for cell in nb.cells]
    assert "losses 3 events 16" in text[0]
    assert "caught rank 1 1F2" in text[1]
    assert "second 2 [4, 4]" in text[2]
