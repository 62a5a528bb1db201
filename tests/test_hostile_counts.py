"""Counts that each pass the reader's checks (below 2^63) are summed exactly: two
launches' counts of 2^62 + 2^61 make 3 * 2^62 in `info` and `stats`, not a wrapped
negative number."""

import json

import numpy as np

from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

from .cli_helpers import gpuobs

EACH = 2**62 + 2**61


def _recording(path):
    _, launches = synthetic.block_trace_events(2, 4, sm_count=132)
    with RecordingWriter(path) as w:
        w.run(pid=1, mode=schema.Mode.BLOCK_TRACE, argv=["x"])
        w.device(sm_count=132)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(launches)
        counts = np.zeros(2, schema.dtype("gpuobs_launch_count"))
        counts["grid_id"] = launches["grid_id"]
        counts["count"] = EACH
        counts["launches_sharing"] = 1
        w.flush(attempted=0, recorded=0, dropped=0, launch_counts=counts)
        w.end(flushes=1, launches=2, events=0)
    return path


def test_large_counts_sum_exactly(tmp_path):
    rec = _recording(tmp_path / "r.gpuobs")
    r = gpuobs("info", rec, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counted"] == 2 * EACH
    r = gpuobs("stats", rec, "-r", "blocks", "--json")
    assert r.returncode == 0, r.stderr
    blocks = json.loads(r.stdout)["blocks"]
    assert blocks["counted_total"] == 2 * EACH and [row["counted"] for row in blocks["rows"]] == [EACH, EACH]


def test_empty_chunks_keep_nothing(tmp_path):
    """100,000 empty LAUNCHES, CLOCK and API_CALLS chunks (24 bytes each): each kept two
    numpy arrays and list entries (about 870 bytes a chunk: 1M took 868 MB)."""
    import tracemalloc

    from gpuobs.recording_file.fileformat import pack_chunk
    from gpuobs.recording_file.reader import load

    path = _recording(tmp_path / "r.gpuobs")
    body = path.read_bytes()
    empty = b"".join(pack_chunk(t, b"") for t in (schema.ChunkType.LAUNCHES, schema.ChunkType.CLOCK))
    path.write_bytes(body + empty * 50_000 + pack_chunk(schema.ChunkType.API_CALLS, b"") * 50_000)
    tracemalloc.start()
    try:
        rec = load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rec.launches) == 2 and len(rec.clock_samples) == 0
    assert peak < 8_000_000, f"{peak:,} bytes for 150,000 empty chunks"


def test_info_shows_the_first_notices_and_counts_the_rest(tmp_path):
    """A million notices were a million table lines (153 s); JSON still lists each."""
    from .cli_helpers import write_recording

    rec = write_recording(tmp_path / "r.gpuobs", notices=[(1, f"note {i}") for i in range(120)])
    r = gpuobs("info", rec)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("note ") == 50 and "... 70 more notices (`gpuobs info --json` lists every one)" in r.stdout
    assert len(json.loads(gpuobs("info", rec, "--json").stdout)["notices"]) == 120
