"""Notices and API names kept as columns (recording_file/text_tables.py), and launch
names looked up once per function (Recording.launch_names), read what the objects
they replace read: every text decoded as bytes.decode(errors="replace") decodes it,
a later API name of an id replacing the earlier in the first one's place, each
launch named by its own function."""

import json

import numpy as np
import pytest
from cli_helpers import DATA, gpuobs

from gpuobs.recording_file import schema
from gpuobs.recording_file.fileformat import pack_chunk
from gpuobs.recording_file.reader import load
from gpuobs.recording_file.recording_writer import RecordingWriter
from gpuobs.recording_file.text_tables import (
    API_NAME_COLUMNS,
    NOTICE_COLUMNS,
    ApiNames,
    Notice,
    Notices,
    TextColumns,
    Texts,
    copy_ranges,
)

TEXTS = {
    "empty": [b""] * 5,
    "ascii": [b"a", b"", b"bc", b"note 4", b"x" * 300],
    "utf8 and damage": [b"\xc3\xbc", b"", b"ok", b"\xff\xfe", b"cut \xe2\x82"],
}


def _texts(raw: list) -> Texts:
    return Texts(b"".join(raw), np.cumsum([len(t) for t in raw]).astype(np.int64))


@pytest.mark.parametrize("kind", TEXTS)
def test_texts_decode_as_each_text_alone(kind):
    raw = TEXTS[kind]
    texts = _texts(raw)
    expected = [t.decode(errors="replace") for t in raw]
    assert texts.decoded() == list(texts) == expected
    assert [texts[i] for i in range(len(raw))] == expected and texts[-1] == expected[-1]
    assert texts[1:3] == expected[1:3]
    with pytest.raises(IndexError):
        texts[len(raw)]


@pytest.mark.parametrize("length", [0, 1, 5, 31, 33, 4000])
def test_copied_ranges_are_the_bytes_of_each_range(length):
    data = np.frombuffer(bytes(range(256)) * 64, np.uint8)
    rng = np.random.default_rng(length)
    lengths = rng.integers(0, length + 1, 50)
    starts = rng.integers(0, len(data) - length, 50)
    joined = b"".join(data[a : a + n].tobytes() for a, n in zip(starts.tolist(), lengths.tolist()))
    assert copy_ranges(data, starts, lengths) == joined


def _notice_rows(rows: list) -> TextColumns:
    columns = TextColumns(NOTICE_COLUMNS)
    for device, code, ns, text in rows[:2]:  # one by one, as _notice adds them
        columns.add(text, device_index=device, code=code, monotonic_ns=ns)
    rest = rows[2:]  # a run at once, as _text_run adds them
    columns.extend(
        b"".join(r[3] for r in rest),
        np.array([len(r[3]) for r in rest]),
        device_index=np.array([r[0] for r in rest], np.uint32),
        code=np.array([r[1] for r in rest], np.uint32),
        monotonic_ns=np.array([r[2] for r in rest], np.uint64),
    )
    return columns


def test_notices_read_as_notice_records():
    known = schema.NoticeCode(1)
    rows = [(0, 1, 10, b"a"), (0xFFFFFFFF, 999, 2**63, b"\xff"), (1, 1, 0, b""), (2, 1, 5, b"last")]
    notices = Notices(_notice_rows(rows))
    expected = [
        Notice(0, known.name.lower(), 10, "a"),
        Notice(0xFFFFFFFF, "code999", 2**63, "\ufffd"),
        Notice(1, known.name.lower(), 0, ""),
        Notice(2, known.name.lower(), 5, "last"),
    ]
    assert list(notices) == expected and notices == expected and expected == notices
    assert notices[1] == expected[1] and notices[-1] == expected[-1] and notices[1:3] == expected[1:3]
    assert notices.texts() == ["a", "\ufffd", "", "last"]
    assert notices != expected[:3] and notices != expected[:3] + [Notice(2, "x", 5, "last")]
    assert len(Notices()) == 0 and not Notices() and Notices() == []
    assert "code999" in repr(notices) and "1 more" in repr(notices)


def test_api_names_read_as_a_dict_in_file_order():
    pairs = [(5, b"cuLaunchKernel"), (2, b"cuMemcpy"), (5, b"cuLaunchKernelEx"), (9, b"\xff")]
    columns = TextColumns(API_NAME_COLUMNS)
    columns.add(pairs[0][1], api_id=pairs[0][0])
    columns.extend(
        b"".join(p[1] for p in pairs[1:]),
        np.array([len(p[1]) for p in pairs[1:]]),
        api_id=np.array([p[0] for p in pairs[1:]], np.uint32),
    )
    names = ApiNames(columns)
    expected = {}
    for api_id, name in pairs:
        expected[api_id] = name.decode(errors="replace")
    assert list(names.items()) == list(expected.items()) and names == expected and len(names) == 3
    assert names[5] == "cuLaunchKernelEx" and names.get(7, "api#7") == "api#7" and 9 in names
    assert dict(ApiNames()) == {}


def test_a_recording_reads_back_its_notices_and_names(tmp_path):
    """A run of notices and API names (decoded at once) among single ones (one by one)."""
    path = tmp_path / "texts.gpuobs"
    said = [f"note {i} \u00fc" if i % 3 else "" for i in range(40)]
    with RecordingWriter(path) as w:
        w.run(pid=7, mode=schema.Mode.BLOCK_TRACE, argv=["texts"])
        w.device(sm_count=132)
        for i, text in enumerate(said):
            w.notice(code=1 + i % 2, text=text, device_index=i % 2, monotonic_ns=i)
            if i % 10 == 9:  # breaks the run: the next notices start a new one
                w.api_name(i, f"cuApi{i}")
        w._fh.write(pack_chunk(schema.ChunkType.API_NAMES, _api_name(9, b"cuApi9 again")))
        w.flush(attempted=0, recorded=0, dropped=0)
        w.end(flushes=1)
    rec = load(path)
    assert [n.text for n in rec.notices] == said == rec.notices.texts()
    assert [n.monotonic_ns for n in rec.notices] == list(range(40))
    assert [n.device_index for n in rec.notices] == [i % 2 for i in range(40)]
    assert dict(rec.api_names) == {9: "cuApi9 again", 19: "cuApi19", 29: "cuApi29", 39: "cuApi39"}
    r = gpuobs("info", path, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["notices"] == said


def _api_name(api_id: int, name: bytes) -> bytes:
    info = np.zeros(1, schema.dtype("gpuobs_api_name"))
    info["api_id"], info["name_len"] = api_id, len(name)
    return info.tobytes() + name


@pytest.mark.parametrize("sample", ["decode_block_trace", "decode_mem_sampled", "side_by_side_api_trace"])
def test_launch_names_are_each_launchs_function(sample):
    rec = load(DATA / f"{sample}.gpuobs")
    assert rec.launch_names() == [rec.launch_function(launch).name for launch in rec.launches]
    some = rec.launches[::7]
    assert rec.launch_names(some) == [rec.launch_function(launch).name for launch in some]


def test_launch_names_of_two_gpus_and_unknown_functions(tmp_path):
    path = tmp_path / "names.gpuobs"
    launches = np.zeros(6, schema.dtype("gpuobs_launch"))
    launches["launch_id"] = np.arange(1, 7)
    launches["grid_id"] = np.arange(1, 7)
    launches["grid"], launches["block"] = (1, 1, 1), (32, 1, 1)
    launches["device_index"] = [0, 1, 0, 1, 0, 1]
    launches["function_slot"] = [0, 0, 3, 1, 0, 65535]  # slot 3 of GPU 0 and 65535 of GPU 1: never named
    with RecordingWriter(path) as w:
        w.run(pid=7, mode=schema.Mode.BLOCK_TRACE, argv=["names"])
        for d in (0, 1):
            w.device(device_index=d, sm_count=132, context_id=d + 1)
        w.function(function_slot=0, mangled="_Z1av", demangled="a()")
        w.function(function_slot=0, mangled="_Z1bv", demangled="", device_index=1)
        w.function(function_slot=1, mangled="_Z1cv", demangled="c()", device_index=1)
        w.launches(launches)
        for d in (0, 1):
            w.flush(device_index=d, attempted=0, recorded=0, dropped=0)
        w.end(flushes=2)
    rec = load(path)
    assert rec.launch_names() == ["a()", "_Z1bv", "function#3", "c()", "a()", "function#65535"]
    assert rec.launch_names(rec.launches[:0]) == []
