"""Renders the README's screenshot: the shipped H200 sample exported and opened
in the real Perfetto UI (headless Chromium), through the same route as the
end-to-end tests.

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


def main():
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sample.pftrace"
        export([gpuobs.load(ROOT / "examples" / "data" / "decode_block_trace.gpuobs")], trace)
        with PerfettoUI(trace) as ui:
            time.sleep(6)  # let the UI's plugins finish
            ui.show("select min(ts) as a, max(ts + dur) as b from slice where name like '%nvjet%'")
            ui.screenshot(ROOT / "docs" / "perfetto-sample.png")
    print(ROOT / "docs" / "perfetto-sample.png")


if __name__ == "__main__":
    main()
