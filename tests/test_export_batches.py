"""A GPU's blocks past export.BATCH_BLOCKS are encoded a group of whole SMs at a time:
the trace holds exactly the slices, tracks and lanes of the export in one piece."""

from collections import Counter

from cli_helpers import DATA
from trace_decode import decode

from gpuobs.perfetto_export import export as export_module
from gpuobs.recording_file.reader import load


def _slices_by_track_name(path):
    d = decode(path)
    assert d.problems == []
    names = {}
    for uuid, t in d.tracks.items():
        parent = d.tracks.get(t.parent_uuid)
        names[uuid] = (parent.name if parent is not None else "", t.name)
    return Counter(
        (names.get(track), name, start, end, tuple(sorted(args.items()))) for track, name, start, end, args in d.slices
    ), sorted(names.values())


def test_batches_write_the_same_slices(tmp_path, monkeypatch):
    rec = load(DATA / "decode_block_trace.gpuobs")
    whole = export_module.export([rec], tmp_path / "whole.pftrace")
    monkeypatch.setattr(export_module, "BATCH_BLOCKS", 1500)  # 28,662 blocks on 132 SMs: ~14 SMs a batch
    batched = export_module.export([rec], tmp_path / "batched.pftrace")
    assert (batched.block_slices, batched.tracks) == (whole.block_slices, whole.tracks)
    assert [(g.sms, g.lanes) for g in batched.gpus] == [(g.sms, g.lanes) for g in whole.gpus]
    a, b = _slices_by_track_name(tmp_path / "whole.pftrace"), _slices_by_track_name(tmp_path / "batched.pftrace")
    assert sum(a[0].values()) > 28_662 and a == b
    assert (tmp_path / "whole.pftrace").read_bytes() != (tmp_path / "batched.pftrace").read_bytes()  # batched it was
