"""The judge: `python -m minipipe.course.grading`, one per graded notebook (run.py starts it).

It reads its request as JSON on standard input,

    {"check": "check_gpipe", "targets": ["gpipe"], "timeout": 600,
     "cells": [[label, learner's, source], ...]}      or       "payload": "/tmp/answers.pickle"

forks the sandbox while it is still clean (nothing computed yet), runs the cells or loads the
answers there, calls the released checker on the learner's objects, and writes
{"status", "text", "cells"} as JSON on standard output, which it keeps to itself: everything else
it prints goes to standard error.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

from ..i18n.messages import say as _


def main() -> int:
    answer = os.fdopen(os.dup(1), "w")  # the result's line, held by this process alone
    os.dup2(2, 1)
    request = json.load(sys.stdin)
    try:
        result = judge(request)
    except Exception:
        result = {
            "status": "error",
            "text": "the grader itself failed:\n" + traceback.format_exc()[-3000:],
            "cells": [],
        }
    answer.write(json.dumps(result))
    answer.flush()
    return 0


def judge(request: dict) -> dict:
    from . import domain, procs
    from .judge import Client
    from .run import allowlists

    procs.become_subreaper()
    import torch  # noqa: F401  (before the fork: the sandbox inherits it imported)

    refusals = tempfile.mkdtemp(prefix="minipipe-refusals-")
    become = _become(request.get("become"), refusals)
    client = Client.start(domain.build(), allowlists(request["check"]), refusals, become=become)
    torch.set_num_threads(1)  # forked already: the checker's own timings as the sandbox's, one thread
    try:
        return judged(client, request, float(request["timeout"]))
    finally:
        client.stop()
        shutil.rmtree(refusals, ignore_errors=True)


def judged(client, request: dict, timeout: float, shown: list | None = None) -> dict:
    """The verdict on `request` (see the module docstring) from the sandbox `client` serves:
    the cells run (or the answers loaded) there, then the released check called here on what
    they define. `shown`: how the check names each target (default: its name)."""
    import importlib

    from ..exercises.verdict import NotDoneYet, WrongAnswer
    from .judge import Died, Learner, TimedOut
    from .run import checker_module

    cells: list[dict] = []
    stopped = _prepare(client, request, timeout, cells)
    if stopped is not None:
        return {**stopped, "cells": cells}
    check = getattr(importlib.import_module(checker_module(request["check"])), request["check"])
    shown = shown or [t if not t.startswith("#") else None for t in request["targets"]]
    learners = [Learner(client, t, s) for t, s in zip(request["targets"], shown)]
    client.deadline = time.monotonic() + timeout
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            check(*learners)
        status, text = "passed", said.getvalue().strip()
    except NotDoneYet as e:
        status, text = "not done yet", e.verdict
    except WrongAnswer as e:
        status, text = "wrong", e.verdict
    except TimedOut as e:
        status, text = "timed out", _timed_out(e, timeout)
    except Died as e:
        status, text = "died", _died(e)
    return {"status": status, "text": text, "cells": cells}


def _become(sent: str | None, refusals: str):
    """What the sandbox runs before anything else (run.judge_in_process): the function sent, then
    the participant's environment (their home, their user's name) where it makes them a user of
    their own, whose the refusals' folder then is."""
    if not sent:
        return None
    import base64
    import pickle

    fn = pickle.loads(base64.b64decode(sent))
    account = getattr(fn, "account", None)
    if account is not None:
        os.chown(refusals, account.uid, account.gid)

    def become() -> None:
        fn()
        if account is not None:
            os.environ.update(account.env({}))
            if not os.access(".", os.R_OK | os.X_OK):  # the teacher's folder: not theirs to enter
                os.chdir(account.home)

    return become


def _prepare(client, request, timeout, cells) -> dict | None:
    """Run the cells (or load the answers) in the sandbox; a result when one stopped it all."""
    from .judge import Died, TimedOut

    steps = [(label, ("cell", label, learner, source)) for label, learner, source in request.get("cells") or []]
    if request.get("payload"):
        with open(request["payload"], "rb") as f:
            steps.append(("your answer", ("payload", f.read())))
    for label, req in steps:
        client.deadline = time.monotonic() + timeout
        try:
            answer = client.request(req, label)
        except TimedOut as e:
            cells.append({"label": label, "status": "timed out", "text": _timed_out(e, timeout)})
            return {"status": "timed out", "text": f"{label}: " + _timed_out(e, timeout)}
        except Died as e:
            cells.append({"label": label, "status": "died", "text": _died(e)})
            return {"status": "died", "text": f"{label}: " + _died(e)}
        if answer[0] == "refused":
            _refused, text, where = answer
            said = f"{label} {text}" + (f" (at {where})" if where and not where.startswith(label) else "")
            cells.append({"label": label, "status": "refused", "text": said})
            return {
                "status": "wrong",
                "text": "✗ "
                + _(
                    "refused: {said}. Your cells may use minipipe to try things, but not "
                    "the course's checkers, threads or processes of their own, or the check's watch; remove that, "
                    "or keep such experiments in another notebook.",
                    said=said,
                ),
            }
        if answer[0] == "raised":
            info = answer[1]
            cells.append(
                {
                    "label": label,
                    "status": "raised",
                    "text": f"{info['type']}: {info['message']}" + (f" ({info['where']})" if info["where"] else ""),
                }
            )
    return None


def _timed_out(e, timeout: float) -> str:
    why = _(
        "timed out: {what} did not finish within {timeout:g} s, so it was stopped. Does it loop forever, or wait "
        "for something that never comes? (minipipe check --timeout SECONDS allows longer.)",
        what=e.what,
        timeout=timeout,
    )
    return why + _output_before(e)


def _output_before(e) -> str:
    if not e.output.strip():
        return ""
    return "\n" + _("its output before that:\n{output}", output=e.output.strip()[-600:])


def _died(e) -> str:
    if e.code is not None:
        why = _(
            "died: the process running your code ended while {what} ran (exit code {code}) (os._exit, exit(), a "
            "crash, or memory running out)",
            what=e.what,
            code=e.code,
        )
    else:
        why = _(
            "died: the process running your code ended while {what} ran (os._exit, exit(), a crash, or memory "
            "running out)",
            what=e.what,
        )
    return why + _output_before(e)


if __name__ == "__main__":
    sys.exit(main())
