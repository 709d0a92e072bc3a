"""The failures tests inject into a run (EngineConfig.fault, training's and serving's): a rank that
raises, exits, is killed or stops responding at a chosen action of a chosen step, while saving that
step's checkpoint, or before the ranks first talk; once per run if asked, across its restarts.
"""

from __future__ import annotations

import os
import signal
import time


def fault_hook(fault: dict | None, rank: int):
    """Tests inject failures here: raise, exit, or stop responding at a chosen action (or at
    "save": while writing the checkpoint of that step; at "start": before the ranks first talk)."""
    if not fault or fault.get("rank") != rank:
        return None

    def before(step, action):
        if step == fault.get("step", 0) and str(action) == fault.get("action", str(action)):
            if fault.get("once") and not _first_time(fault["once"]):
                return  # fired already, in an earlier attempt of this run
            kind = fault.get("kind", "raise")
            if kind == "raise":
                raise RuntimeError(f"injected fault at {action}")
            if kind == "exit":
                os._exit(3)
            if kind == "kill":  # as the OOM killer or a lost node would: no exit code, no cleanup
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "sleep":
                time.sleep(fault.get("seconds", 3600))

    return before


def _first_time(marker: str) -> bool:
    """Make `marker`; False if it was there already."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
