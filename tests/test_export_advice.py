"""A trace past what the Perfetto UI opens comfortably comes with advice: a window, trim, Parquet."""

import io

from cli_helpers import DATA

from gpuobs.perfetto_export import export as export_module
from gpuobs.recording_file.reader import load


def test_advice_past_the_comfortable_size_only(monkeypatch):
    rec = load(DATA / "decode_block_trace.gpuobs")
    summary = export_module.export([rec], io.BytesIO())
    assert export_module.ui_advice(summary, [rec]) == []  # the sample opens in seconds
    monkeypatch.setattr(export_module, "UI_COMFORTABLE_BYTES", summary.bytes - 1)
    (advice,) = export_module.ui_advice(summary, [rec])
    assert f"{summary.block_slices:,} block slices" in advice
    for hint in ("--time-window", "spans 0..87.123 ms", "gpuobs trim", "--format parquet"):
        assert hint in advice
