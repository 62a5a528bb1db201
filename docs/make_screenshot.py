"""Renders the README's screenshot: the shipped H200 sample exported as `gpuobs export`
writes it and opened in the real Perfetto UI (v52, headless Chromium, 1600 px wide) at
the address `gpuobs open` gives the UI, served by the same code. The picture is the trace
as it opens: nothing is clicked, expanded, scrolled or zoomed by this script (the GPU
group and its SMs are expanded by the address's startup command, as for a user).

    python docs/make_screenshot.py
"""

import sys
import tempfile
import threading
from pathlib import Path

import gpuobs
from gpuobs.perfetto_export import open_trace
from gpuobs.perfetto_export.export import export

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the UI driver is test support (tests/perfetto_ui.py), not part of the package
from tests.perfetto_ui import PerfettoUI, _free_port  # noqa: E402


def main():
    target = ROOT / "docs" / "perfetto-sample.png"
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sample.pftrace"
        export([gpuobs.load(ROOT / "examples" / "data" / "decode_block_trace.gpuobs")], trace)
        ui_port, port = _free_port(), _free_port()
        ui_url = f"http://127.0.0.1:{ui_port}/ui/index.html"  # the bundled UI, served by PerfettoUI
        server = threading.Thread(
            target=open_trace.serve,
            kwargs=dict(trace=trace, port=port, ui_url=ui_url, open_browser=False, timeout_s=300, say=lambda _: None),
            daemon=True,
        )
        server.start()
        # PerfettoUI returns once the UI has loaded the trace and run the startup commands.
        with PerfettoUI(page_url=open_trace.ui_address(ui_url, port, trace.name), ui_port=ui_port) as ui:
            ui.wait_drawn()
            ui.screenshot(target)
    print(target)


if __name__ == "__main__":
    main()
