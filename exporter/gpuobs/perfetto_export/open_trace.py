"""`gpuobs open TRACE` and `export --open`: hand a trace to the Perfetto UI the way
Perfetto's own tools/open_trace_in_ui does. The file is served once on
127.0.0.1:9001 (the one local port ui.perfetto.dev's content policy lets it fetch
from) with CORS headers for the UI's origin, and the UI is opened at
`#!/?url=http://127.0.0.1:9001/NAME`, with a startup command that expands the GPU
groups and their SMs (below). Serving stops when the UI has fetched the
whole file, at a timeout, or at Ctrl-C. Without a browser (an SSH session) the URL
is printed with the port-forward that makes it work from the user's own machine."""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import time
import urllib.parse
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import GpuobsError
from ..safe_text import readable

DEFAULT_UI = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001


class OpenError(GpuobsError):
    pass


@dataclass
class Served:
    url: str  # the UI address that loads the trace
    fetched: bool  # the UI fetched the whole file before the timeout
    browser: bool  # a browser was asked to open the URL


# The UI opens every track group collapsed, whatever the trace says: its TrackEvent plugin
# (v52 and today) makes each group node collapsed, no descriptor field changes that, and
# only a trace with a single top-level group gets it expanded (a measured export has two:
# the clock snapshots add the UI's "System"). So the address asks the UI to expand the GPU
# groups (`GPU 0 H200 (pid 609)`, export._gpu_group_name) and their "SMs" with one of its
# stable startup commands, run once the trace is loaded
# (perfetto.dev/docs/visualization/commands-automation-reference).
EXPAND_AT_OPEN = r"^(GPU \d+( .*)?|SMs)$"
STARTUP_COMMANDS = [{"id": "dev.perfetto.ExpandTracksByRegex", "args": [EXPAND_AT_OPEN]}]


def ui_address(ui_url: str, port: int, name: str) -> str:
    """The UI page (`https://ui.perfetto.dev`, or a page such as `.../index.html`) told to fetch
    the trace and to expand its SM tracks."""
    trace = f"http://127.0.0.1:{port}{url_path(name)}"
    page = ui_url if ui_url.endswith((".html", "/")) else ui_url + "/"
    commands = urllib.parse.quote(json.dumps(STARTUP_COMMANDS, separators=(",", ":")), safe="")
    return f"{page}#!/?url={trace}&referrer=gpuobs&startupCommands={commands}"


def url_path(name: str) -> str:
    """`/NAME` quoted from the file name's bytes (a name that is not UTF-8 included)."""
    return "/" + urllib.parse.quote(os.fsencode(name))


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


CONNECTION_TIMEOUT_S = 10.0  # a connection silent this long is closed; others are served meanwhile


class _OneFile(http.server.BaseHTTPRequestHandler):
    """Answers GET of the one trace path (and the CORS preflight, OPTIONS) and nothing
    else: no listing, no other file, no HEAD. A Host other than the address served
    (a page of another site that rebound its name to 127.0.0.1) is refused."""

    protocol_version = "HTTP/1.0"
    timeout = CONNECTION_TIMEOUT_S  # socket timeout per connection (StreamRequestHandler)

    def _allowed(self) -> bool:
        if self.headers.get("Host", "") not in self.server.hosts:
            self._refuse(421, "this server answers only to " + self.server.hosts[0])
            return False
        if urllib.parse.urlsplit(self.path).path != self.server.path:
            self._refuse(404, "not found")
            return False
        return True

    def _refuse(self, code: int, why: str) -> None:
        body = (why + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", self.server.allow_origin)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def do_GET(self):
        if not self._allowed():
            return
        try:
            f = open(self.server.trace, "rb")
        except OSError:
            self._refuse(404, "not found")
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            sent = 0
            while chunk := f.read(1 << 20):
                self.wfile.write(chunk)
                sent += len(chunk)
        self.wfile.flush()
        if sent == size:
            self.server.fetched = True  # reached only when the whole body was sent

    def do_OPTIONS(self):
        if not self._allowed():
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _not_allowed(self):
        self.send_response(405)
        self.send_header("Allow", "GET, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_CONNECT = do_TRACE = _not_allowed

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    """Each connection on a thread of its own, so one that sends nothing holds only
    itself (and ends at its own deadline), never the accept loop or the timeout."""

    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        pass  # a browser that closed the connection early, or one that timed out: it will fetch again


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
        shown = readable(str(trace))
        raise OpenError(f"no trace at {shown}" if not trace.exists() else f"{shown} is not a file")
    try:
        httpd = _Server(("127.0.0.1", port), _OneFile)
    except OSError as exc:
        raise OpenError(
            f"cannot serve on 127.0.0.1:{port}: {exc.strerror} (another `gpuobs open` or "
            "`trace_processor --httpd` may hold it; ui.perfetto.dev fetches only from port 9001)"
        ) from None
    with httpd:
        httpd.trace = trace
        httpd.path = url_path(trace.name)
        bound = httpd.server_address[1]
        httpd.hosts = (f"127.0.0.1:{bound}", f"localhost:{bound}")
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
            f"serving {readable(str(trace))} on 127.0.0.1:{port} until the UI has fetched it "
            f"(at most {timeout_s:.0f} s; Ctrl-C stops)"
        )
        deadline = time.monotonic() + timeout_s
        while not httpd.fetched and time.monotonic() < deadline:
            httpd.handle_request()
        return Served(url, httpd.fetched, use_browser)
