"""A clean process that forks sandboxes, for a judge that is not clean itself.

A sandbox is forked, not started afresh (importing torch takes seconds), and a process that has
computed with torch cannot fork safely (its thread pool hangs the child). The judge of a grading
forks its sandbox itself before it computes anything; a judge that has computed already (the
course's tests, which judge hundreds of answers in one process) asks a zygote: a process that
imported torch and the course, built the domain (domain.py), and does nothing but fork.

    zygote = Zygote()                                    # ~4 s, once
    client = Client.start(None, names, refusals, zygote) # each sandbox: a fork, ~0.1 s
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys

from . import channel


class Zygote:
    def __init__(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")]))
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minipipe.course.grading.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock = mine
        channel.recv_bytes(self.sock, None, lambda: self.proc.poll() is None)  # ready

    def fork(self, sock, out_fd: int, names: dict, refusals: str) -> int:
        """A sandbox forked for this judge; it speaks the judge's language now (the zygote's environment
        is that of when it started), its worker processes too."""
        from ..i18n import language

        socket.send_fds(self.sock, [pickle.dumps((names, refusals, language()))], [sock.fileno(), out_fd])
        return pickle.loads(channel.recv_bytes(self.sock, None, lambda: self.proc.poll() is None))

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _package_root() -> str:
    import minipipe

    return os.path.dirname(os.path.dirname(os.path.abspath(minipipe.__file__)))


def main(fd: int) -> None:
    import torch  # noqa: F401  (imported once, here, for every sandbox)

    from . import domain, procs
    from .judge import become_sandbox
    from .sandbox import Sandbox

    dom = domain.build()
    procs.become_subreaper()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # sandboxes that end are not kept as zombies
    ctl = socket.socket(fileno=fd)
    channel.send_bytes(ctl, b"ready")
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 2)
        except OSError:
            return
        if not data:
            return
        names, refusals, lang = pickle.loads(data)
        pid = os.fork()
        if pid == 0:
            try:
                os.environ["MINIPIPE_LANG"] = lang
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock = socket.socket(fileno=fds[0])
                ctl.close()
                become_sandbox(sock.fileno(), fds[1])
                Sandbox(sock, dom, names, refusals).serve()
            finally:
                os._exit(70)
        for f in fds:
            os.close(f)
        channel.send_bytes(ctl, pickle.dumps(pid))


if __name__ == "__main__":  # run as the module it is, not as __main__ (the watch trusts the module's code)
    from minipipe.course.grading import zygote

    zygote.main(int(sys.argv[1]))
