"""`gpuobs open` serves the one trace, by GET (and the CORS preflight), to a page
that asked for 127.0.0.1: no other file beside it, no listing, no HEAD, no
request naming another host (DNS rebinding); and a connection that sends nothing
holds neither the UI's fetch nor the server past its timeout."""

import http.client
import socket
import threading
import time

import pytest

from gpuobs.perfetto_export.open_trace import CONNECTION_TIMEOUT_S, serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path, request):
    """A trace with a secret beside it, served on a free port in a thread; yields
    (port, result holder, thread). It serves for 60 s, or the seconds a test gives it
    (parametrize "served" indirect): only tests of the timeout wait for it to end, so a
    busy machine cannot run a test's requests past it."""
    timeout_s = getattr(request, "param", 60)
    (tmp_path / "t.pftrace").write_bytes(b"trace bytes" * 1000)
    (tmp_path / "secret.txt").write_text("secret")
    (tmp_path / "sub").mkdir()
    port = _free_port()
    result = {}

    def run():
        began = time.monotonic()
        result["served"] = serve(
            tmp_path / "t.pftrace", port=port, open_browser=False, timeout_s=timeout_s, say=lambda _: None
        )
        result["took"] = time.monotonic() - began

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield port, result, thread
    thread.join(timeout=15)


def _ask(port, method, path, host=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    headers = {"Host": host} if host else {}
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), body


def test_only_get_of_the_trace_is_answered(served):
    port, result, thread = served
    for path in ("/secret.txt", "/", "/sub/", "/t.pftrace"):
        status, headers, _ = _ask(port, "HEAD", path)
        assert status == 405 and "Last-Modified" not in headers, (path, status)
    for path in ("/secret.txt", "/", "/sub/", "/../secret.txt", "/t.pftrace/"):
        status, _, body = _ask(port, "GET", path)
        assert status == 404 and b"secret" not in body, (path, status)
    status, headers, _ = _ask(port, "OPTIONS", "/t.pftrace")
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
    thread.join(0.5)
    assert thread.is_alive()  # none of that was the fetch
    status, _, body = _ask(port, "GET", "/t.pftrace")
    assert status == 200 and body == b"trace bytes" * 1000
    thread.join(timeout=10)
    assert result["served"].fetched


@pytest.mark.parametrize("served", [6], indirect=True, ids=["6s"])
def test_a_request_for_another_host_is_refused(served):
    port, result, thread = served
    status, _, body = _ask(port, "GET", "/t.pftrace", host="evil.example")
    assert status == 421 and b"trace bytes" not in body
    status, _, _ = _ask(port, "GET", "/t.pftrace", host=f"evil.example:{port}")
    assert status == 421
    thread.join(timeout=10)
    assert not result["served"].fetched  # the timeout ended it: nobody fetched


def test_an_idle_connection_holds_neither_the_fetch_nor_the_timeout(served):
    port, result, thread = served
    idle = socket.create_connection(("127.0.0.1", port))  # sends nothing, stays open
    try:
        began = time.monotonic()
        status, _, _ = _ask(port, "GET", "/t.pftrace")
        # held by the idle one, it would wait for that connection's 10 s deadline
        assert status == 200 and time.monotonic() - began < CONNECTION_TIMEOUT_S / 2
        thread.join(timeout=10)
        assert result["served"].fetched
    finally:
        idle.close()


@pytest.mark.parametrize("served", [4], indirect=True, ids=["4s"])
def test_an_idle_connection_cannot_keep_it_past_its_timeout(served):
    port, result, thread = served
    idle = socket.create_connection(("127.0.0.1", port))
    idle.sendall(b"GET /t.pftrace HTTP/1.1\r\n")  # a request begun and never finished
    try:
        thread.join(timeout=15)
        assert result["took"] < CONNECTION_TIMEOUT_S, result  # not held to the idle connection's deadline
        assert not result["served"].fetched
    finally:
        idle.close()
