"""`gpuobs diff A B`: per-kernel ratios B / A of `stats`'s own numbers, the largest
regression first; a recording against itself is 1.00x everywhere."""

import csv
import io
import json
import re

import pytest
from cli_helpers import DATA, gpuobs, write_recording

from gpuobs.recording_file import synthetic
from gpuobs.recording_file.reader import load


def _slot_1_name(path):
    return load(path).function(0, 1).name


def _json(*args):
    r = gpuobs("diff", *args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _stats(path, report):
    r = gpuobs("stats", path, "--report", report, "--format", "json")
    assert r.returncode == 0, r.stderr
    part = json.loads(r.stdout)["kernel_times" if report == "kernels" else "blocks"]
    return {row["kernel"]: row for row in part["rows"]}  # every report keys its kernel "kernel"


@pytest.mark.parametrize("sample", ["decode_block_trace", "decode_mem_sampled"])
def test_a_recording_against_itself_is_all_one(sample):
    path = DATA / f"{sample}.gpuobs"
    d = _json(path, path)
    assert len(d["kernels"]) > 20
    for k in d["kernels"]:
        assert k["status"] == "both"
        for key, v in k.items():
            if isinstance(v, dict):
                assert v["a"] == v["b"]
                assert v["ratio"] == (None if v["a"] is None else 1.0), (k["kernel"], key)
    assert all(t["ratio"] == 1.0 for t in d["totals"].values())
    text = gpuobs("diff", path, path, "--top", "100").stdout
    ratios = re.findall(r"\d+\.\d\dx", text)
    assert ratios and set(ratios) == {"1.00x"}


@pytest.fixture(scope="module")
def slower(tmp_path_factory):
    """A and B of one program, B with one kernel's blocks running twice as long and some records dropped."""
    folder = tmp_path_factory.mktemp("diff")

    def twice_as_long_for_slot_1(ev):
        one = ev["function_slot"] == 1
        ev["time_end"][one] = ev["time_start"][one] + 2 * (ev["time_end"][one] - ev["time_start"][one])

    a = synthetic.write_block_trace_recording(folder / "a.gpuobs")
    b = synthetic.write_block_trace_recording(folder / "b.gpuobs", edit_events=twice_as_long_for_slot_1, dropped=100)
    return a, b


def test_ratios_are_stats_ratios_sorted_by_regression(slower):
    a, b = slower
    d = _json(a, b)
    ta, tb = _stats(a, "kernels"), _stats(b, "kernels")
    ba, bb = _stats(a, "blocks"), _stats(b, "blocks")
    slowed = _slot_1_name(a)
    assert d["kernels"][0]["kernel"] == slowed
    assert d["kernels"][0]["total_ns"]["ratio"] > 1.3
    for k in d["kernels"]:
        name = k["kernel"]
        for key in ("total_ns", "instances", "avg_ns", "max_ns"):
            assert k[key]["a"] == ta[name][key] and k[key]["b"] == tb[name][key]
            assert k[key]["ratio"] == round(tb[name][key] / ta[name][key], 4)
        for key in ("blocks_recorded", "sms", "blocks_dropped"):
            assert (k[key]["a"], k[key]["b"]) == (ba[name][key], bb[name][key])
    ratios = [k["total_ns"]["ratio"] for k in d["kernels"]]
    assert ratios == sorted(ratios, reverse=True)
    assert [k["total_ns"]["ratio"] for k in d["kernels"][1:]] == [1.0] * (len(d["kernels"]) - 1)
    assert d["totals"]["records_dropped"] == {"a": 0, "b": 100, "ratio": None}
    assert sum(k["blocks_dropped"]["b"] for k in d["kernels"]) == 100


def test_text_and_csv(slower):
    a, b = slower
    r = gpuobs("diff", a, b)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("Per kernel"))) + 1 :]
    assert "A (us)  B (us)  Total" in table[0] and table[0].rstrip().endswith("Name")
    assert table[1].rstrip().endswith(_slot_1_name(a)) and " 1.4" in table[1]  # the slowed kernel leads
    assert "records dropped 0 -> 100" in r.stdout
    r = gpuobs("diff", a, b, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 3 and rows[0]["Name"] == _slot_1_name(a) and list(rows[0])[-1] == "Name"
    assert float(rows[1]["Total Time (B/A)"]) == 1.0 and rows[0]["Total Time (ns) A"] and rows[0]["Total Time (ns) B"]


def test_kernels_in_one_recording_only(tmp_path):
    a = write_recording(tmp_path / "a.gpuobs", names=["old_kernel", "kept_kernel", "gone_kernel"])
    b = write_recording(tmp_path / "b.gpuobs", names=["new_kernel", "kept_kernel", "other_kernel"])
    d = _json(a, b)
    status = {k["kernel"]: k["status"] for k in d["kernels"]}
    assert status == {
        "old_kernel": "only in A",
        "gone_kernel": "only in A",
        "new_kernel": "only in B",
        "other_kernel": "only in B",
        "kept_kernel": "both",
    }
    order = [k["status"] for k in d["kernels"]]
    assert order == ["only in B", "only in B", "both", "only in A", "only in A"]
    only = next(k for k in d["kernels"] if k["kernel"] == "new_kernel")
    assert only["total_ns"]["a"] is None and only["total_ns"]["b"] > 0 and only["total_ns"]["ratio"] is None


def test_bad_input_is_one_line(tmp_path):
    r = gpuobs("diff", DATA / "decode_block_trace.gpuobs", tmp_path / "missing.gpuobs")
    assert r.returncode == 2 and r.stderr.startswith("gpuobs: ") and len(r.stderr.strip().splitlines()) == 1
    r = gpuobs("diff", DATA / "decode_block_trace.gpuobs", DATA / "decode_block_trace.gpuobs", "--format", "xml")
    assert r.returncode == 2 and "--format 'xml' is not table, csv or json" in r.stderr


def test_the_table_fits_80_columns_with_every_name_kept():
    """COLUMNS is honoured piped, as by stats: every line fits, each kernel's short name
    whole on its own line above its numbers; piped without COLUMNS nothing wraps."""
    from gpuobs.analysis.kernel_names import short_names

    for sample in ("decode_block_trace.gpuobs", "decode_mem_sampled.gpuobs"):
        r = gpuobs("diff", sample, sample, "--top", "8", cwd=DATA, COLUMNS="80")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert max(map(len, lines)) <= 80, max(lines, key=len)
        kernels = _json(DATA / sample, DATA / sample)["kernels"][:8]
        for name in short_names([k["kernel"] for k in kernels], 78):
            assert f"  {name}" in lines, name
        piped = gpuobs("diff", sample, sample, "--top", "8", cwd=DATA).stdout.splitlines()
        assert len(piped) < len(lines) and any(line.startswith("Totals: ") and len(line) > 80 for line in piped)
