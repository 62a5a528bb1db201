"""The two slice encoders (compiled C and numpy) must write the same bytes."""

import pytest

from gpuobs.perfetto_export.export import ExportOptions, export

OPTION_SETS = (ExportOptions(), ExportOptions(block_args=False), ExportOptions(clock="device"))


def assert_both_encoders_identical(rec, tmp_path, monkeypatch) -> None:
    """Exports rec with each encoder under each option set; skips without a C compiler."""
    from gpuobs.perfetto_export import native_encoder

    if native_encoder.encoder() is None:
        pytest.skip("no C compiler: only the numpy encoder exists here")
    for opts in OPTION_SETS:
        export([rec], tmp_path / "native.pftrace", opts)
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
        export([rec], tmp_path / "numpy.pftrace", opts)
        monkeypatch.undo()
        assert (tmp_path / "native.pftrace").read_bytes() == (tmp_path / "numpy.pftrace").read_bytes()
