"""The judge's side of a sandbox: starting it, asking it, and what a checker holds of the learner.

A checker never holds the learner's function itself: it holds a `Learner`, a name in the sandbox.
`Learner.call(args)` asks the sandbox to call it there and gets back plain data (plain.py);
`harness(fn, learners, args)` asks it to run a checker's harness function there (harness.py).
What comes back is only data: every verdict is computed here, in the judge, from it.

    client = Client.start(names, refusals)         # the sandbox, forked from this clean process
    client.cell("cell 3 (yours)", True, source)    # the learner's cells, one by one
    check_gpipe(Learner(client, "gpipe"))

A sandbox that takes longer than the time left (`Client.deadline`) is stopped, and TimedOut says
what it was doing; one that ends (os._exit, a crash, memory) is Died, with what it printed last.
Both are BaseExceptions, so that no checker's `except` turns them into a wrong answer. A refusal
(watch.py) is a Mistake that names the call, and the sandbox is gone after it.
"""

from __future__ import annotations

import builtins
import collections
import os
import threading
import time

from ..i18n import language
from ..i18n.messages import say as _
from . import channel, plain, procs

# a lookup that missed: what an answer tabled beforehand for the cases a notebook shows does on the others
TABLE_ERRORS = ("KeyError", "IndexError")


def table_hint(error: str) -> str:
    """What a KeyError or IndexError out of the learner's function most likely means."""
    if error not in TABLE_ERRORS:
        return ""
    return ". " + _(
        "If it looks answers up in a table made beforehand: the check draws its cases afresh at every run, "
        "from far more than a table would hold; compute the answer from the arguments"
    )


class TimedOut(BaseException):
    def __init__(self, what: str, seconds: float, output: str):
        super().__init__(what)
        self.what, self.seconds, self.output = what, seconds, output


class Died(BaseException):
    def __init__(self, what: str, output: str, code: int | None):
        super().__init__(what)
        self.what, self.output, self.code = what, output, code


class Output:
    """The last few thousand characters the sandbox printed, read by a thread of the judge."""

    def __init__(self, fd: int, keep: int = 8000):
        self.chunks: collections.deque = collections.deque()
        self.size, self.keep = 0, keep
        self.thread = threading.Thread(target=self._read, args=(fd,), daemon=True, name="sandbox-output")
        self.thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as f:
            while True:
                chunk = f.read(4096)
                if not chunk:
                    return
                self.chunks.append(chunk)
                self.size += len(chunk)
                while self.size - len(self.chunks[0]) > self.keep:
                    self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")[-self.keep :]


class Client:
    def __init__(self, sock, pid: int, output: Output, own_child: bool):
        self.sock, self.pid, self.output, self.own_child = sock, pid, output, own_child
        self.deadline: float | None = None
        self.refused: str | None = None
        self.ended: BaseException | None = None

    @classmethod
    def start(cls, dom, names: dict, refusals: str, zygote=None, become=None) -> Client:
        """A sandbox forked from this process, which must be clean (nothing computed with torch
        yet, no threads), or from `zygote` (zygote.py) when it is not. `become()`: run in the
        sandbox first of all (a participant's cgroup and user)."""
        from .sandbox import Sandbox

        mine, theirs = channel.pair()
        out_r, out_w = os.pipe()
        if zygote is not None:
            pid = zygote.fork(theirs, out_w, names, refusals)
            own = False
        else:
            lang = language()  # the judge's, pinned: the sandbox and its workers say what it would
            pid = os.fork()
            if pid == 0:  # the sandbox
                try:
                    os.environ["MINIPIPE_LANG"] = lang
                    mine.close()
                    os.close(out_r)
                    become_sandbox(theirs.fileno(), out_w)
                    if become is not None:
                        become()
                    Sandbox(theirs, dom, names, refusals).serve()
                finally:
                    os._exit(70)
            own = True
        theirs.close()
        os.close(out_w)
        return cls(mine, pid, Output(out_r), own)

    # -- asking --------------------------------------------------------------------------------
    def alive(self) -> bool:
        if self.own_child:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid:
                self.status = status
                return False
            return True
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def request(self, req: tuple, what: str):
        """Send `req` and wait for the answer, until the deadline."""
        if self.refused is not None:
            from ..exercises.verdict import Mistake

            raise Mistake(self.refused)
        if self.ended is not None:
            raise self.ended
        started = time.monotonic()
        try:
            channel.ask(self.sock, req)
            return channel.answer(self.sock, self.deadline, self.alive)
        except channel.Late:
            self.stop()
            self.ended = TimedOut(what, time.monotonic() - started, self.output.text())
        except (channel.Closed, OSError, EOFError):
            time.sleep(0.2)  # its last words reach the output reader
            code = self.exit_code()
            self.stop()
            self.ended = Died(what, self.output.text(), code)
        raise self.ended

    def exit_code(self) -> int | None:
        if not self.own_child:
            return None
        if not hasattr(self, "status"):
            try:
                pid, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                return None
        return os.waitstatus_to_exitcode(self.status)

    def stop(self) -> None:
        """End the sandbox and everything it started (its workers, anything that escaped)."""
        try:
            channel.ask(self.sock, ("bye",))
        except OSError:
            pass
        procs.end_all(self.pid)
        self.sock.close()

    # -- what the learner's code did -------------------------------------------------------------
    def reply(self, answer, name: str, advice: str = "", learner_name=None):
        """The value in a sandbox's answer, or the exception it stands for."""
        from ..exercises.verdict import Mistake, Unfinished

        kind = answer[0]
        if kind in ("value", "object", "ok"):
            return plain.decode(answer[1]) if kind == "value" else answer[1:]
        if kind == "unfinished":
            named = answer[1] if len(answer) > 1 and answer[1] else None
            raise Unfinished(named or (learner_name() if learner_name else name))
        if kind == "refused":
            _kind, text, where = answer
            at = " " + _("(at {where})", where=where) if where else ""
            self.refused = f"{name} {text}{at}" + (f"; {advice}" if advice else "")
            self.ended = Died(name, "", None)
            raise Mistake(self.refused)
        if kind == "mistake":
            raise Mistake(answer[1], raised=None if answer[2] is None else rebuilt(answer[2]))
        if kind == "raised":
            info = answer[1]
            raise Mistake(
                _("{name} raised {kind}: {error}", name=name, kind=info["type"], error=info["message"])
                + (f" ({info['where']})" if info["where"] else "")
                + table_hint(info["type"]),
                raised=rebuilt(info),
            )
        if kind == "missing":
            raise Mistake(
                _(
                    "{name}: there is no {target} in your notebook: is its cell there, and does it run?",
                    name=name,
                    target=repr(answer[1]),
                )
            )
        raise RuntimeError(f"the sandbox answered {kind!r}")


def rebuilt(info: dict) -> BaseException:
    """The learner's exception, as an instance of the same built-in type where it was one."""
    cls = getattr(builtins, info["type"], None) if info["builtin"] else None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls = type(info["type"], (Exception,), {})
    try:
        return cls(info["message"])
    except Exception:
        return Exception(info["message"])


def become_sandbox(keep_fd: int, out_fd: int) -> None:
    """In the forked child: nothing of the judge's left open (its line to whoever started it
    above all), the output into the judge's reader, orphans kept in this process's tree, and one
    thread for torch's operations (two threads that wait for each other on a busy machine make a
    learner's timings swing tenfold; the workers of a real run use one too)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd > 2 and fd != keep_fd:
            try:
                os.close(fd)
            except OSError:
                pass
    procs.become_subreaper()
    import torch

    torch.set_num_threads(1)


class Learner:
    """The learner's function or class, as a checker in the judge holds it."""

    def __init__(self, client: Client, target: str, shown: str | None = None):
        self.client, self.target = client, target
        self._shown, self._info = shown, None

    def info(self) -> dict:
        if self._info is None:
            name = self._shown or self.target
            self._info = self.client.reply(self.client.request(("resolve", self.target), name), name)[0]
        return self._info

    @property
    def __name__(self) -> str:
        if self._shown is None and self._info is None and (self.client.ended or self.client.refused):
            return self.target
        return self._shown or self.info()["name"]

    def __repr__(self) -> str:
        return f"<your {self.__name__}>"

    def call(self, args: tuple, kwargs: dict, name: str, advice: str = ""):
        """The learner's function called with `args` in the sandbox; `name` says how (the arguments
        are shown after it when it has no parentheses of its own)."""
        if "(" not in name:
            from ..exercises.verdict import short

            name += "(" + ", ".join([*map(short, args), *(f"{k}={short(v)}" for k, v in kwargs.items())]) + ")"
        answer = self.client.request(("call", self.target, args, kwargs), name)
        return self.client.reply(answer, name, advice, lambda: self.__name__)


def in_sandbox(fn, learners, *args, name: str, advice: str = "", **kwargs):
    """Run the checker's harness function `fn(*learner objects, *args, **kwargs)` in the
    learners' sandbox; its return value, as plain data."""
    client = learners[0].client
    answer = client.request(
        ("harness", fn.__module__, fn.__qualname__, [learner.target for learner in learners], args, kwargs), name
    )
    return client.reply(answer, name, advice, lambda: learners[0].__name__)
