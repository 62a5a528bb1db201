"""`gpuobs trim`: by the flush-window index `info` shows, by time, by kernel; an
empty selection is refused; what is kept still adds up."""

import json

import gpuobs as g
from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .cli_helpers import DATA, gpuobs, write_recording
from .trace_decode import decode

BLOCK = DATA / "decode_block_trace.gpuobs"
MEM = DATA / "decode_mem_sampled.gpuobs"


def windows(path):
    return json.loads(gpuobs("info", path, "--json").stdout)["flush_windows"]


def test_info_lists_the_flush_windows_trim_takes(tmp_path):
    shown = windows(BLOCK)
    assert [w["index"] for w in shown] == list(range(6))
    assert [w["flush_seq"] for w in shown] == [2, 3, 4, 5, 6, 7]  # internal numbers, not what trim takes
    text = gpuobs("info", BLOCK).stdout
    assert "flush windows   6 (`gpuobs trim --flushes A:B` takes these indices)" in text
    assert "       1  GPU 0  16.873..18.343 ms          296 launches     5,732 events" in text
    out = tmp_path / "w1.gpuobs"
    r = gpuobs("trim", BLOCK, "--flushes", "1:2", "-o", out)
    assert r.returncode == 0 and r.stdout.strip() == f"{out}: 1 flush windows, 296 launches, 5,732 events"
    kept = g.load(out)
    assert len(kept.launches) == shown[1]["launches"] and len(kept.events) == shown[1]["events"]
    assert kept.flushes["flush_seq"].tolist() == [3]


def test_an_empty_selection_is_refused_and_nothing_written(tmp_path):
    out = tmp_path / "x.gpuobs"
    for args, said in (
        (["--flushes", "5:6"], "the selection keeps nothing"),
        (["--flushes", "9:"], "the recording has 6 flush windows, indices 0..5"),
        (["--flushes", "2:1"], "is empty: END must be after START"),
        (["--time", "1s:2s"], "keeps nothing of"),
        (["--kernels", "no_such_kernel"], "keeps nothing of"),
        ([], "nothing to trim by: give --flushes A:B, --time START:END or --kernels REGEX"),
    ):
        r = gpuobs("trim", BLOCK, "-o", out, *args)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert not out.exists()
    r = gpuobs("trim", MEM, "-o", out, "--time", "0:1ms")
    assert r.returncode == 0  # memory samples have times
    r = gpuobs("trim", BLOCK, "--flushes", "0:1")
    assert r.returncode == 2 and "name it with -o FILE" in r.stderr


def test_trim_by_time_keeps_whole_launches_running_in_the_window(tmp_path):
    out = tmp_path / "t.gpuobs"
    assert gpuobs("trim", BLOCK, "--time", "16ms:19ms", "-o", out).returncode == 0
    rec, kept = g.load(BLOCK), g.load(out)
    table = analysis.launch_table(rec)
    t0 = int(rec.events["time_start"].min())
    inside = (table.first_start < t0 + 19_000_000) & (table.last_end >= t0 + 16_000_000)
    assert len(kept.launches) == int(inside.sum()) == 296
    kept_table = analysis.launch_table(kept)
    assert (kept_table.blocks_recorded == kept_table.grid_blocks).all()  # no launch cut in half
    assert decode_ok(kept, tmp_path)


def test_trim_by_kernel_keeps_their_launches_and_accounts_for_the_rest(tmp_path):
    out = tmp_path / "k.gpuobs"
    assert gpuobs("trim", BLOCK, "--kernels", "^nvjet", "-o", out).returncode == 0
    kept = g.load(out)
    names = {kept.function(int(launch["device_index"]), int(launch["function_slot"])).name for launch in kept.launches}
    assert names and all(n.startswith("nvjet") for n in names)
    info = json.loads(gpuobs("info", out, "--json").stdout)
    assert info["counted"] == info["blocks_recorded"] == len(kept.events)  # counts of the kept launches only
    assert info["recorded"] - info["filtered"] == len(kept.events)  # left-out records count as filtered
    stats = json.loads(gpuobs("stats", out, "--json").stdout)["kernel_times"]["rows"]
    assert {r["kernel"] for r in stats} == names
    assert decode_ok(kept, tmp_path)
    combined = tmp_path / "c.gpuobs"
    r = gpuobs("trim", BLOCK, "--kernels", "^nvjet", "--flushes", "1:3", "-o", combined)
    assert r.stdout.strip().endswith("2 flush windows, 58 launches, 1,920 events")


def decode_ok(rec, tmp_path) -> bool:
    out = tmp_path / "trimmed.pftrace"
    r = gpuobs("export", rec.path, "-o", out, "-f")
    assert r.returncode == 0, r.stderr
    d = decode(out)
    return d.problems == [] and len([s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]) == len(rec.events)


def test_what_the_tool_could_not_record_stays_said(tmp_path):
    said = "module 7 could not be patched: its kernels ran unrecorded"
    rec = write_recording(tmp_path / "n.gpuobs", notices=[(schema.NoticeCode.MODULE_UNPATCHED, said)])
    assert f"notice          {said}" in gpuobs("info", rec).stdout
    out = tmp_path / "part.gpuobs"
    assert gpuobs("trim", rec, "--kernels", "silu", "-o", out).returncode == 0
    assert [n.text for n in g.load(out).notices] == [said]
    assert f"notice          {said}" in gpuobs("info", out).stdout
