"""The line between the judge and its sandbox: length-prefixed messages over a Unix socket pair.

The judge sends requests with pickle (the sandbox trusts its judge); the sandbox answers with
plain data only (plain.py), which the judge reads with a weights-only unpickler. A read has a
deadline: the judge never waits longer than the time a cell or a call may take, and an ended
sandbox (its end of the socket closed) is noticed at once.
"""

from __future__ import annotations

import pickle
import select
import socket
import struct
import time

from . import plain

HEADER = struct.Struct("!Q")
LIMIT = 1 << 31  # bytes one message may have


class Closed(EOFError):
    """The other end is gone."""


class Late(TimeoutError):
    """Nothing came before the deadline."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def send_bytes(sock: socket.socket, data: bytes) -> None:
    sock.sendall(HEADER.pack(len(data)) + data)


def recv_bytes(sock: socket.socket, deadline: float | None = None, alive=None) -> bytes:
    """One message; Late after `deadline` (time.monotonic()), Closed at the end of the stream.
    `alive()`, when given, is asked between short waits: False ends the wait as Closed."""
    (size,) = HEADER.unpack(_exactly(sock, HEADER.size, deadline, alive))
    if size > LIMIT:
        raise Closed(f"a message of {size:,} bytes, more than {LIMIT:,}")
    return _exactly(sock, size, deadline, alive)


def _exactly(sock, n: int, deadline, alive) -> bytes:
    chunks, got = [], 0
    while got < n:
        wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
        if wait <= 0:
            raise Late()
        ready, _, _ = select.select([sock], [], [], wait)
        if not ready:
            if alive is not None and not alive():
                raise Closed("the process ended")
            continue
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise Closed("the other end closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- the judge's side: pickled requests, plain answers ---------------------------------------
def ask(sock: socket.socket, request) -> None:
    send_bytes(sock, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))


def answer(sock: socket.socket, deadline=None, alive=None):
    return plain.loads(recv_bytes(sock, deadline, alive))


# -- the sandbox's side -----------------------------------------------------------------------
def request(sock: socket.socket):
    return pickle.loads(recv_bytes(sock))


def reply(sock: socket.socket, tree) -> None:
    send_bytes(sock, plain.dumps(tree))
