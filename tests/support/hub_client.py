"""A participant of a JupyterHub, driven over HTTP as a browser would: log in with a password,
start the server, then run code in a kernel of it (Jupyter's kernel protocol over its websocket).

    me = Participant("http://127.0.0.1:8000", "ada", "k7mq-2xpa-9rtd")
    me.log_in(); me.start_server()
    kernel = me.kernel("lessons/00_start_here.ipynb")     # a notebook's session: its cwd is the lesson's folder
    out = kernel.run("print(1 + 1)")                     # what it printed; raises CellError if it raised
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import requests


class CellError(RuntimeError):
    pass


class Participant:
    def __init__(self, base: str, name: str, password: str):
        self.base, self.name, self.password = base.rstrip("/"), name, password
        self.http = requests.Session()
        self.token = None

    def _xsrf(self) -> dict:
        return {"X-XSRFToken": self.http.cookies.get("_xsrf", "")}

    def log_in(self) -> None:
        """The hub's login form, with its xsrf cookie; then a token for the API and the server."""
        self.http.get(f"{self.base}/hub/login", timeout=30).raise_for_status()
        r = self.http.post(
            f"{self.base}/hub/login",
            data={"username": self.name, "password": self.password, "_xsrf": self.http.cookies.get("_xsrf", "")},
            allow_redirects=False,
            timeout=60,
        )
        if r.status_code != 302 or "jupyterhub-session-id" not in self.http.cookies:
            raise RuntimeError(f"{self.name} could not log in: HTTP {r.status_code}")
        r = self.http.post(
            f"{self.base}/hub/api/users/{self.name}/tokens",
            headers=self._xsrf(),
            timeout=30,
            json={"note": "test", "expires_in": 1800},
        )
        r.raise_for_status()
        self.token = r.json()["token"]

    def api(self, method: str, path: str, **kw):
        r = self.http.request(
            method, f"{self.base}{path}", headers={"Authorization": f"token {self.token}"}, timeout=60, **kw
        )
        r.raise_for_status()
        return r.json() if r.content else None

    def start_server(self, timeout: float = 180.0) -> None:
        self.api("POST", f"/hub/api/users/{self.name}/server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.api("GET", f"/hub/api/users/{self.name}")["servers"].get("", {})
            if server.get("ready"):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}'s server was not ready within {timeout:g} s")

    def kernel(self, notebook: str) -> Kernel:
        session = self.api(
            "POST",
            f"/user/{self.name}/api/sessions",
            json={"path": notebook, "type": "notebook", "kernel": {"name": "python3"}},
        )
        ws = self.base.replace("http", "ws", 1) + f"/user/{self.name}/api/kernels/{session['kernel']['id']}/channels"
        return Kernel(ws, self.token, session["kernel"]["id"])


class Kernel:
    def __init__(self, url: str, token: str, kernel_id: str):
        self.url, self.token, self.id = url, token, kernel_id

    def run(self, code: str, timeout: float = 300.0) -> str:
        return asyncio.run(self._run(code, timeout))

    def run_all(self, cells: list[str], timeout: float = 300.0) -> list[str]:
        """Cells one after another on one connection: what each printed."""

        async def every():
            return [await self._run(c, timeout) for c in cells]

        return asyncio.run(every())

    async def _run(self, code: str, timeout: float) -> str:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        conn = await websocket_connect(HTTPRequest(self.url, headers={"Authorization": f"token {self.token}"}))
        msg_id = uuid.uuid4().hex
        conn.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "test",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": {
                        "code": code,
                        "silent": False,
                        "store_history": False,
                        "user_expressions": {},
                        "allow_stdin": False,
                        "stop_on_error": True,
                    },
                }
            )
        )
        printed, error, idle, replied = [], None, False, False
        deadline = time.monotonic() + timeout
        try:
            while not (idle and replied):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"a cell ran longer than {timeout:g} s:\n{code[:300]}")
                raw = await asyncio.wait_for(conn.read_message(), left)
                if raw is None:
                    raise CellError("the kernel's websocket closed")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "stream":
                    printed.append(msg["content"]["text"])
                elif kind == "error":
                    error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
                elif kind == "execute_reply":
                    replied = True
        finally:
            conn.close()
        if error:
            raise CellError(f"{error}\nin the cell:\n{code[:500]}\nprinted:\n{''.join(printed)[-1000:]}")
        return "".join(printed)
