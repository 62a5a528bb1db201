"""info, stats and diff over a recording read window by window (analysis/streamed_facts.py,
a segment of events at a time) give what they give over the loaded recording, value for
value: on the samples and on synthetic recordings of many windows, of graph replays that
share grid ids (the slow path), with segments and spill thresholds small enough that
windows span segments and percentiles are narrowed from the spill file."""

import io

import numpy as np
import pytest
from cli_helpers import DATA, gpuobs
from test_export_streamed import _replays_recording

from gpuobs.analysis import diff as diff_module
from gpuobs.analysis import event_pass, grouped_values, recording_info, stats_report, streamed_facts
from gpuobs.analysis import launches as analysis
from gpuobs.errors import CorruptChunk
from gpuobs.recording_file import overlap_bound, schema, synthetic
from gpuobs.recording_file import windows as windows_module
from gpuobs.recording_file.reader import load
from gpuobs.recording_file.windows import open_windows

SAMPLES = ["decode_block_trace", "decode_mem_sampled", "side_by_side_api_trace"]


def _many_windows(path):
    return synthetic.write_many_flush_recording(path, flushes=300, launches_per_flush=3, blocks_per_launch=40)


def _memory_events(path):
    """A block_trace recording whose every 7th event is a memory sample (kind MEMORY)."""

    def some_memory(ev):
        ev["kind"][::7] = schema.EventKind.MEMORY

    return synthetic.write_block_trace_recording(path, n_launches=9, blocks_per_launch=700, edit_events=some_memory)


def _unattributed(path):
    """Events of grid ids no launch lists (graph replays recorded without node tables)."""

    def strangers(ev):
        ev["grid_id"][::11] = 999_999

    return synthetic.write_block_trace_recording(path, n_launches=6, blocks_per_launch=900, edit_events=strangers)


SHAPES = {
    "many windows": _many_windows,
    "graph replays": _replays_recording,
    "memory events": _memory_events,
    "unattributed": _unattributed,
}


@pytest.fixture(params=["defaults", "small"])
def small(request, monkeypatch):
    if request.param == "small":  # windows span segments; durations spill and are narrowed
        monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 333)
        monkeypatch.setattr(grouped_values, "BLOCK_VALUES", 1000)
        monkeypatch.setattr(grouped_values, "IN_MEMORY", 100)
        monkeypatch.setattr(grouped_values, "READ_VALUES", 250)
        monkeypatch.setattr(grouped_values, "BINS", 16)
    return request.param


def _paths(tmp_path):
    yield from (DATA / f"{name}.gpuobs" for name in SAMPLES)
    for name, make in SHAPES.items():
        yield make(tmp_path / f"{name.replace(' ', '_')}.gpuobs")


def _same_tables(a: analysis.LaunchTable, b: analysis.LaunchTable) -> None:
    for name in ("first_start", "last_end", "blocks_recorded", "events_kept", "sms_touched", "ends_unconfirmed"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.name == b.name


def test_info_stats_and_diff_are_the_same(tmp_path, small):
    for path in _paths(tmp_path):
        rec = load(path)
        with open_windows(path) as wr:
            assert streamed_facts.can_stream(wr)
            assert recording_info.describe(wr) == recording_info.describe(rec), path
            for report in ("all", "blocks", "kernels"):
                assert stats_report.build(wr, report, None, None, "json") == stats_report.build(
                    rec, report, None, None, "json"
                ), (path, report)
            facts = streamed_facts.gather(wr)
            _same_tables(facts.table, analysis.launch_table(rec))
            assert facts.event_counts == analysis.event_counts(rec)
            assert diff_module.per_kernel(wr) == diff_module.per_kernel(rec)


def test_launches_are_resolved_in_file_order(tmp_path, monkeypatch):
    """Every event once, in file order, with launch_index_of_events's launch: the slow
    path's answers handed out in order across segments and the window's two chunks."""
    monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 500)
    path = _replays_recording(tmp_path / "graph.gpuobs")
    rec = load(path)
    with open_windows(path) as wr:
        segments = list(event_pass.resolved_segments(wr))
    assert [s.order for s in segments] == sorted(s.order for s in segments)
    np.testing.assert_array_equal(np.concatenate([s.events for s in segments]), rec.events)
    expected = analysis.launch_index_of_events(rec)
    assert (expected >= 0).all()  # the replays all resolve, through the slow path
    np.testing.assert_array_equal(np.concatenate([s.launch for s in segments]), expected)


@pytest.mark.parametrize("shape", ["uniform", "wide", "negative", "ties"])
def test_values_at_ranks_are_exact(shape, monkeypatch):
    monkeypatch.setattr(grouped_values, "BLOCK_VALUES", 700)
    monkeypatch.setattr(grouped_values, "IN_MEMORY", 50)
    monkeypatch.setattr(grouped_values, "READ_VALUES", 90)
    monkeypatch.setattr(grouped_values, "BINS", 8)
    rng = np.random.default_rng(7)
    n = 5000
    groups = rng.integers(0, 4, n)
    values = {
        "uniform": rng.integers(0, 10_000, n),
        "wide": rng.integers(0, 1 << 62, n),
        "negative": rng.integers(-(1 << 40), 1 << 40, n),
        "ties": rng.integers(0, 3, n) * 1_000_003,
    }[shape]
    gv = grouped_values.GroupedValues(5)  # group 4 has no value
    for lo in range(0, n, 333):
        gv.add(groups[lo : lo + 333], values[lo : lo + 333])
    assert gv.file is not None  # some went to the spill file
    for g in range(4):
        mine = np.sort(values[groups == g])
        ranks = np.array([0, 1, len(mine) // 2, len(mine) - 2, len(mine) - 1])
        np.testing.assert_array_equal(gv.at_ranks(g, ranks), mine[ranks])
    assert gv.count[4] == 0
    gv.close()


def _deep_overlap(path):
    def pile_up(ev):  # 1,100 blocks open at once on SM 3
        ev["sm_id"][:1100] = 3
        ev["time_start"][:1100] = ev["time_start"][0]
        ev["time_end"][:1100] = ev["time_start"][0] + 10_000

    return synthetic.write_block_trace_recording(path, n_launches=4, blocks_per_launch=600, edit_events=pile_up)


def test_blocks_open_at_once_is_load_s_error(tmp_path):
    path = _deep_overlap(tmp_path / "deep.gpuobs")
    with pytest.raises(CorruptChunk) as from_load:
        load(path)
    with open_windows(path) as wr, pytest.raises(CorruptChunk) as from_stream:
        streamed_facts.gather(wr)
    assert "1,100 blocks are open at once on SM 3" in str(from_load.value)
    assert str(from_stream.value) == str(from_load.value)
    r = gpuobs("info", path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "blocks are open at once on SM 3" in r.stderr
    assert "--salvage keeps" in r.stderr and "Traceback" not in r.stderr


def test_a_coarse_bound_falls_back_to_the_exact_check(tmp_path, monkeypatch):
    """With one time bin per SM every SM looks crowded: the exact check then finds that
    none is (blocks follow one another), and nothing is refused."""
    monkeypatch.setattr(overlap_bound, "CELLS", 1)
    measured = []
    original = overlap_bound.checks.deepest_block_overlap

    def exact(chunks, devices, only=None):
        if only is not None:
            measured.append(only)
        return original(chunks, devices, only)

    monkeypatch.setattr(overlap_bound.checks, "deepest_block_overlap", exact)
    # 1,164 blocks per SM, a few open at once
    path = synthetic.write_block_trace_recording(tmp_path / "ok.gpuobs", n_launches=150, blocks_per_launch=1024)
    with open_windows(path) as wr:
        streamed_facts.gather(wr)
    assert len(measured) == 1 and len(measured[0]) > 0  # the crowded-looking SMs, measured exactly
    with open_windows(_deep_overlap(tmp_path / "deep.gpuobs")) as wr, pytest.raises(CorruptChunk) as exc:
        streamed_facts.gather(wr)
    assert "blocks are open at once on SM 3" in str(exc.value)


@pytest.mark.parametrize("command", [["info"], ["info", "--json"], ["stats"], ["stats", "--format", "csv"]])
def test_cli_gives_what_the_loaded_recording_gives(tmp_path, command):
    """--salvage reads the recording whole (the in-memory path); without damage the
    output is the same."""
    path = _replays_recording(tmp_path / "graph.gpuobs")
    streamed, whole = gpuobs(*command, path), gpuobs(*command, path, "--salvage")
    assert streamed.returncode == whole.returncode == 0, streamed.stderr + whole.stderr
    assert streamed.stdout == whole.stdout and len(streamed.stdout) > 200


def test_cli_diff_gives_what_the_loaded_recordings_give(tmp_path):
    a = _replays_recording(tmp_path / "a.gpuobs")
    b = _memory_events(tmp_path / "b.gpuobs")
    streamed, whole = gpuobs("diff", a, b, "--json"), gpuobs("diff", a, b, "--json", "--salvage")
    assert streamed.returncode == whole.returncode == 0, streamed.stderr + whole.stderr
    assert streamed.stdout == whole.stdout and '"kernels"' in streamed.stdout


TRIMS = [
    {"time": (0, 2_000_000)},
    {"time": (1_000_000, None)},
    {"kernels": "nvjet|rms"},
    {"flushes": (1, 3)},
    {"flushes": (0, 2), "kernels": "silu"},
    {"time": (500_000, 30_000_000), "kernels": "rms"},
]


def _trimmed(source, **selection) -> bytes:
    """The trimmed recording's bytes, or trim's error."""
    from gpuobs.analysis import streamed_trim, trim
    from gpuobs.errors import TrimError
    from gpuobs.recording_file.recording_writer import copy_recording

    buf = io.BytesIO()
    try:
        if hasattr(source, "chunks"):
            sel = streamed_trim.select(source, **selection)
            try:
                copy_recording(source.rec, buf, sel.flushes, sel.launches, events=sel.events)
            finally:
                sel.close()
        else:
            sel = trim.select(source, **selection)
            copy_recording(source, buf, sel.flushes, sel.launches, sel.events)
    except TrimError as exc:
        return str(exc)
    return buf.getvalue() + sel.describe().encode()


@pytest.mark.parametrize("selection", TRIMS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_trim_writes_the_same_recording(tmp_path, small, selection):
    kept = 0
    for path in _paths(tmp_path):
        with open_windows(path) as wr:
            streamed = _trimmed(wr, **selection)
        whole = _trimmed(load(path), **selection)
        assert streamed == whole, (path, selection)
        kept += isinstance(whole, bytes)
    assert kept >= 2  # each selection keeps something of some recordings


def test_cli_trim_writes_the_same_recording(tmp_path):
    path = _replays_recording(tmp_path / "graph.gpuobs")
    a, b = tmp_path / "a.gpuobs", tmp_path / "b.gpuobs"
    streamed = gpuobs("trim", path, "--time", "10ms:12ms", "-o", a)
    whole = gpuobs("trim", path, "--time", "10ms:12ms", "-o", b, "--salvage")
    assert streamed.returncode == whole.returncode == 0, streamed.stderr + whole.stderr
    assert a.read_bytes() == b.read_bytes() and streamed.stdout.replace(str(a), str(b)) == whole.stdout
    assert "launches" in streamed.stdout and load(a).launches.size > 0


PARQUET_SELECTIONS = [{}, {"time": "1ms:3ms"}, {"kernels": "nvjet|rms"}, {"launches": "5:40"}, {"time": "9s:10s"}]


def _parquet(source, out, **selection) -> dict:
    """{file: bytes} of the Parquet export, or its error."""
    from gpuobs.columnar import parquet
    from gpuobs.errors import ExportError
    from gpuobs.selection import Criteria

    try:
        parquet.write_parquet([source], out, Criteria.parse(**selection))
    except ExportError as exc:
        return {"error": str(exc)}
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("selection", PARQUET_SELECTIONS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_parquet_export_writes_the_same_files(tmp_path, small, selection, monkeypatch):
    from gpuobs.columnar import parquet

    if small == "small":
        monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 500)  # row groups span segments of the reader
    for n, path in enumerate(_paths(tmp_path)):
        with open_windows(path) as wr:
            streamed = _parquet(wr, tmp_path / f"s{n}", **selection)
        whole = _parquet(load(path), tmp_path / f"w{n}", **selection)
        assert streamed.keys() == whole.keys(), path
        for name in whole:
            assert streamed[name] == whole[name], (path, name)
        assert "error" in whole or len(whole) > 8


def test_index_figures_of_the_c_pass_and_numpy_agree(tmp_path, monkeypatch):
    """event_index.c and windows.py's numpy code give each chunk the same figures
    (time ranges, slots, kinds, zones, limits), with blocks that cut zones."""
    from gpuobs.recording_file import event_index

    if event_index.library() is None:
        pytest.skip("no C compiler here: only the numpy pass runs")
    monkeypatch.setattr(windows_module, "CRC_BYTES", 64 * 1000)
    monkeypatch.setattr(windows_module, "ZONE_ROWS", 300)

    def figures(path):
        with open_windows(path) as wr:
            return [
                (c.min_start, c.max_start, c.max_end, c.slots.tolist(), c.kinds.tolist(), c.zones.tolist(), c._limits)
                for c in wr.chunks
            ]

    for path in _paths(tmp_path):
        native = figures(path)
        with monkeypatch.context() as m:
            m.setattr(event_index, "library", lambda: None)
            assert figures(path) == native, path
        if len(native) == 1:  # one chunk: its zones' time ranges are its events' own, 300 at a time
            start = load(path).events["time_start"]
            zones = [(int(z.min()), int(z.max())) for z in np.array_split(start, range(300, len(start), 300))]
            assert list(zip(native[0][5][0], native[0][5][1])) == zones and len(zones) > 10


def test_overlap_bins_of_the_c_pass_and_numpy_agree(tmp_path):
    from gpuobs.recording_file import event_index

    if event_index.library() is None:
        pytest.skip("no C compiler here: only the numpy pass runs")

    def late_and_memory(ev):  # ends a later replay may have stamped, and samples that are no blocks
        ev["flags"][::5] |= schema.BLOCK_END_UNCONFIRMED
        ev["kind"][::9] = schema.EventKind.MEMORY
        ev["time_end"][::13] = ev["time_start"][::13]  # blocks of no length

    paths = list(_paths(tmp_path))
    paths.append(
        synthetic.write_block_trace_recording(tmp_path / "late.gpuobs", n_launches=7, edit_events=late_and_memory)
    )
    for path in paths:
        with open_windows(path) as wr:
            native, numpy_only = overlap_bound.OverlapBound(wr), overlap_bound.OverlapBound(wr)
            numpy_only.lib = None
            for c in wr.chunks:
                for _, ev in wr.segments(c, 1000):
                    native.add(c, ev)
                    numpy_only.add(c, ev)
            np.testing.assert_array_equal(native.diff, numpy_only.diff, err_msg=str(path))
    assert native.diff.any()
