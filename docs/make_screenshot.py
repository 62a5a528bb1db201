"""Renders the README's screenshot: the shipped H200 sample exported as `gpuobs export`
writes it and opened in the real Perfetto UI (v52, headless Chromium, 1600 px wide),
through the same route as the end-to-end tests. The picture is the trace as it opens:
nothing is expanded, scrolled or zoomed first.

    python docs/make_screenshot.py
"""

import sys
import tempfile
import time
from pathlib import Path

import gpuobs
from gpuobs.perfetto_export.export import export

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the UI driver is test support (tests/perfetto_ui.py), not part of the package
from tests.perfetto_ui import PerfettoUI  # noqa: E402

SHOWN = "(() => app.trace.workspace.flatTracks.length)()"  # the timeline's tracks, once the plugins placed them


def main():
    target = ROOT / "docs" / "perfetto-sample.png"
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sample.pftrace"
        export([gpuobs.load(ROOT / "examples" / "data" / "decode_block_trace.gpuobs")], trace)
        with PerfettoUI(trace) as ui:
            seen = -1
            while ui.evaluate(SHOWN) != seen:  # until two readings a second apart agree
                seen = ui.evaluate(SHOWN)
                time.sleep(1)
            ui.screenshot(target)
    print(target)


if __name__ == "__main__":
    main()
