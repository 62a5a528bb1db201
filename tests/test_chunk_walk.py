"""The chunk frames walked in C (recording_file/chunk_walk.c, runs of table chunks
decoded at once) read what the Python walk reads: the same tables, the same launch
windows, the same error or salvaged damage, on the samples, on recordings of many small
chunks (launches of one and of several GPUs among FLUSH chunks), and on truncations and
bit flips of them."""

import numpy as np
import pytest
from cli_helpers import DATA

from gpuobs.errors import RecordingError
from gpuobs.recording_file import chunk_walk, schema
from gpuobs.recording_file.fileformat import pack_chunk
from gpuobs.recording_file.reader import load
from gpuobs.recording_file.recording_writer import RecordingWriter
from gpuobs.recording_file.windows import open_windows

ChunkType = schema.ChunkType
TABLES = ("launches", "clock_samples", "flushes", "launch_counts", "devices", "modules", "api_calls", "launch_flushes")

pytestmark = pytest.mark.skipif(chunk_walk.library() is None, reason="no C compiler here: only the Python walk runs")


@pytest.fixture(autouse=True, params=[1, 8], ids=["runs-at-once", "short-runs-one-by-one"])
def run_at_once(request, monkeypatch):
    """Every run of table and text chunks decoded at once, or only runs of 8 or more."""
    from gpuobs.recording_file import reader

    monkeypatch.setattr(reader, "RUN_AT_ONCE", request.param)


def _small_chunks(path, n=300, bad_length_at=None, bad_text_at=None):
    """LAUNCHES chunks of one launch (devices 0 and 1, some chunks holding both), CLOCK
    chunks of one sample, empty chunks, NOTICE and API_NAMES chunks (runs of them, known
    and unknown codes, names given twice), FLUSH chunks between them; optionally a
    LAUNCHES chunk whose payload is no whole number of launches, or a NOTICE chunk whose
    text is not the length it says."""
    launch_dt = schema.dtype("gpuobs_launch")
    with RecordingWriter(path) as w:
        w.run(pid=7, mode=schema.Mode.BLOCK_TRACE, argv=["small"])
        for d in (0, 1):
            w.device(device_index=d, sm_count=132, context_id=d + 1)
        w.module(module_id=1)
        w.function(function_slot=0, mangled="_Z1kv", demangled="k()")
        fh = w._fh
        for i in range(n):
            rows = np.zeros(2 if i % 7 == 3 else 1, launch_dt)
            rows["launch_id"] = np.arange(len(rows)) + 2 * i + 1
            rows["grid_id"] = rows["launch_id"] + 100
            rows["grid"] = (1, 1, 1)
            rows["block"] = (32, 1, 1)
            rows["device_index"] = (np.arange(len(rows)) + i) % 2
            payload = rows.tobytes()
            if i == bad_length_at:
                payload = payload[:-3]
            fh.write(pack_chunk(ChunkType.LAUNCHES, payload))
            if i % 5 == 0:
                fh.write(pack_chunk(ChunkType.LAUNCHES, b""))
            sample = np.zeros(1, schema.dtype("gpuobs_clock_sample"))
            sample["method"], sample["device_ns"] = 1, 10**9 + i
            for clock in ("monotonic", "boottime", "realtime"):
                sample[f"{clock}_before"], sample[f"{clock}_after"] = 10**9 + i, 10**9 + i + 10
            fh.write(pack_chunk(ChunkType.CLOCK, sample.tobytes()))
            for k in range(i % 3):
                notice = np.zeros(1, schema.dtype("gpuobs_notice"))
                text = f"notice {i}.{k} \xff".encode("latin-1")
                notice["device_index"], notice["code"], notice["monotonic_ns"] = i % 2, (i + k) % 9, i * 10 + k
                notice["text_len"] = len(text) + (1 if i == bad_text_at and k == 1 else 0)
                fh.write(pack_chunk(ChunkType.NOTICE, notice.tobytes() + text))
            name = np.zeros(1, schema.dtype("gpuobs_api_name"))
            label = f"cuApi{i}".encode()
            name["api_id"], name["name_len"] = i % 50, len(label)
            fh.write(pack_chunk(ChunkType.API_NAMES, name.tobytes() + label))
            if i % 40 == 39:
                w.flush(device_index=(i // 40) % 2, flush_seq=i // 40, attempted=0, recorded=0, dropped=0)
        w.end(flushes=n // 40)
    return path


def _read(path, native: bool, monkeypatch, salvage=False, windowed=False):
    """The tables read (or the error), walking in C or in Python."""
    with monkeypatch.context() as m:
        if not native:
            m.setattr(chunk_walk, "library", lambda: None)
        try:
            if windowed:
                with open_windows(path) as wr:
                    rec = wr.rec
                    return {t: getattr(rec, t).tobytes() for t in TABLES}, [(c.offset, c.count) for c in wr.chunks]
            rec = load(path, salvage=salvage)
        except RecordingError as exc:
            return str(exc)
    tables = {t: getattr(rec, t).tobytes() for t in TABLES}
    damage = (rec.damage.offset, rec.damage.reason) if rec.damage else None
    return tables, len(rec.events), rec.unknown_chunks, rec.notices, rec.api_names, damage


def _same(path, monkeypatch, **kwargs):
    native, python = _read(path, True, monkeypatch, **kwargs), _read(path, False, monkeypatch, **kwargs)
    assert native == python, path
    return native


def test_samples_and_small_chunks_read_the_same(tmp_path, monkeypatch):
    paths = [DATA / f"{n}.gpuobs" for n in ("decode_block_trace", "decode_mem_sampled", "side_by_side_api_trace")]
    paths.append(_small_chunks(tmp_path / "small.gpuobs"))
    for path in paths:
        result = _same(path, monkeypatch)
        assert isinstance(result, tuple) and len(result[0]["launches"]) > 0
        _same(path, monkeypatch, windowed=True)
    tables, _, _, notices, api_names, _ = _same(paths[-1], monkeypatch)
    flushes = np.frombuffer(tables["launch_flushes"], np.uint32)
    assert len(set(flushes.tolist())) > 3  # launches of both GPUs assigned to their own windows
    assert len(notices) == 300 and notices[3].text == "notice 4.0 \ufffd" and len(api_names) == 50
    assert {n.code for n in notices} >= {"code8"}  # a code no NoticeCode names


@pytest.mark.parametrize("bad", ["launches", "notice"])
def test_a_bad_chunk_in_a_run_is_the_same_error(tmp_path, monkeypatch, bad):
    kwargs = {"bad_length_at": 123} if bad == "launches" else {"bad_text_at": 125}
    path = _small_chunks(tmp_path / "bad.gpuobs", **kwargs)
    says = "whole number" if bad == "launches" else "does not fill"
    error = _same(path, monkeypatch)
    assert isinstance(error, str) and f"{bad.upper()} chunk" in error and says in error
    salvaged = _same(path, monkeypatch, salvage=True)
    assert salvaged[-1] is not None and says in salvaged[-1][1]


@pytest.mark.parametrize("sample", ["small", "decode_block_trace"])
def test_truncations_and_bit_flips_give_the_same_errors(tmp_path, monkeypatch, sample):
    source = _small_chunks(tmp_path / "s.gpuobs", n=120) if sample == "small" else DATA / f"{sample}.gpuobs"
    data = source.read_bytes()
    rng = np.random.default_rng(3)
    path = tmp_path / "cut.gpuobs"
    for k in range(25):
        if k % 2:
            cut = bytearray(data)
            at = int(rng.integers(64, len(data)))
            cut[at] ^= 1 << int(rng.integers(0, 8))
        else:
            cut = data[: int(rng.integers(1, len(data)))]
        path.write_bytes(bytes(cut))
        _same(path, monkeypatch)
        _same(path, monkeypatch, salvage=True)
