"""`gpuobs open TRACE` and `export --open`: hand a trace to the Perfetto UI the way
Perfetto's own tools/open_trace_in_ui does. The file is served once on
127.0.0.1:9001 (the one local port ui.perfetto.dev's content policy lets it fetch
from) with CORS headers for the UI's origin, and the UI is opened at
`#!/?url=http://127.0.0.1:9001/NAME`. Serving stops when the UI has fetched the
whole file, at a timeout, or at Ctrl-C. Without a browser (an SSH session) the URL
is printed with the port-forward that makes it work from the user's own machine."""

from __future__ import annotations

import functools
import http.server
import os
import socket
import sys
import time
import urllib.parse
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEFAULT_UI = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001


class OpenError(Exception):
    pass


@dataclass
class Served:
    url: str  # the UI address that loads the trace
    fetched: bool  # the UI fetched the whole file before the timeout
    browser: bool  # a browser was asked to open the URL


def ui_address(ui_url: str, port: int, name: str) -> str:
    """The UI page (`https://ui.perfetto.dev`, or a page such as `.../index.html`) told to fetch the trace."""
    trace = f"http://127.0.0.1:{port}/{urllib.parse.quote(name)}"
    page = ui_url if ui_url.endswith((".html", "/")) else ui_url + "/"
    return f"{page}#!/?url={trace}&referrer=gpuobs"


def _origin(ui_url: str) -> str:
    parts = urllib.parse.urlsplit(ui_url)
    return f"{parts.scheme}://{parts.netloc}"


def browser_available() -> bool:
    """A graphical browser Python's webbrowser can start. On Linux without a display
    (an SSH session) only text-mode browsers would start, inside this terminal: no."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return bool(os.environ.get("BROWSER"))  # the user named one: trust it
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


class _OneFile(http.server.SimpleHTTPRequestHandler):
    """Serves the one trace file and nothing else, with the UI's CORS header."""

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", self.server.allow_origin)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def do_GET(self):
        if self.path != "/" + urllib.parse.quote(self.server.name):
            self.send_error(404, "File not found")
            return
        super().do_GET()
        self.server.fetched = True  # reached only when the whole body was sent

    def do_POST(self):
        self.send_error(404, "File not found")

    def log_message(self, *args):
        pass


class _Server(http.server.HTTPServer):
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a browser that closed the connection early: it will fetch again


def serve(
    trace: Path,
    port: int = DEFAULT_PORT,
    ui_url: str = DEFAULT_UI,
    open_browser: bool | None = None,
    timeout_s: float = 600.0,
    say: Callable[[str], None] = print,
) -> Served:
    """Serves `trace` until the UI fetched it (or timeout_s passed). `open_browser`:
    None decides by browser_available(). KeyboardInterrupt stops it (the caller reports)."""
    trace = Path(trace).resolve()
    if not trace.is_file():
        raise OpenError(f"no trace at {trace}" if not trace.exists() else f"{trace} is not a file")
    handler = functools.partial(_OneFile, directory=str(trace.parent))
    try:
        httpd = _Server(("127.0.0.1", port), handler)
    except OSError as exc:
        raise OpenError(
            f"cannot serve on 127.0.0.1:{port}: {exc.strerror} (another `gpuobs open` or "
            "`trace_processor --httpd` may hold it; ui.perfetto.dev fetches only from port 9001)"
        ) from None
    with httpd:
        httpd.name = trace.name
        httpd.allow_origin = _origin(ui_url)
        httpd.fetched = False
        httpd.timeout = 0.5
        url = ui_address(ui_url, port, trace.name)
        use_browser = browser_available() if open_browser is None else open_browser
        if use_browser and webbrowser.open_new_tab(url):
            say(f"opened {url}")
        else:
            use_browser = False
            say(f"open this address in a browser on this machine:\n  {url}")
            say(f"from another machine, forward the port first: ssh -L {port}:127.0.0.1:{port} {socket.gethostname()}")
        say(
            f"serving {trace} on 127.0.0.1:{port} until the UI has fetched it (at most {timeout_s:.0f} s; Ctrl-C stops)"
        )
        deadline = time.monotonic() + timeout_s
        while not httpd.fetched and time.monotonic() < deadline:
            httpd.handle_request()
        return Served(url, httpd.fetched, use_browser)
