"""`gpuobs stats`: led by the kernel time summary nsys and the PyTorch profiler
lead with; readable when piped; the same totals as every other command."""

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.kernel_names import short_name, short_names
from gpuobs.recording_file import schema

from .cli_helpers import DATA, write_recording
from .cli_helpers import gpuobs as run

BLOCK = DATA / "decode_block_trace.gpuobs"
MEM = DATA / "decode_mem_sampled.gpuobs"
SIDE = DATA / "side_by_side_api_trace.gpuobs"


def test_the_kernel_summary_leads_and_its_numbers_are_the_launch_spans():
    r = run("stats", BLOCK)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("Kernel time summary"))
    assert first_table < next(i for i, line in enumerate(lines) if line.startswith("Blocks per kernel"))
    assert "span = a launch's first block start to its last block end" in r.stdout
    header = lines[first_table + 1].split()
    assert header[:3] == ["Time", "%", "Total"] and header[-1] == "Name"
    rows = json.loads(run("stats", BLOCK, "--report", "kernels", "--format", "json").stdout)["kernel_times"]["rows"]
    rec = gpuobs.load(BLOCK)
    table = analysis.launch_table(rec)
    nvjet = [i for i, n in enumerate(table.name) if n == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"]
    spans = table.last_end[nvjet].astype(np.int64) - table.first_start[nvjet].astype(np.int64)
    row = next(r for r in rows if r["kernel"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT")
    assert row["instances"] == len(nvjet) == 120 and row["total_ns"] == spans.sum()
    assert row["min_ns"] == spans.min() and row["max_ns"] == spans.max() and row["med_ns"] == np.median(spans)
    assert row["stddev_ns"] == pytest.approx(spans.std(ddof=1), abs=0.1)
    assert sum(r["instances"] for r in rows) == len(rec.launches)
    assert sum(r["time_pct"] for r in rows) == pytest.approx(100, abs=0.1)
    assert [r["total_ns"] for r in rows] == sorted((r["total_ns"] for r in rows), reverse=True)


def test_sort_format_and_full_names():
    rows = json.loads(run("stats", BLOCK, "-r", "kernels", "--sort", "max", "--json").stdout)["kernel_times"]["rows"]
    assert [r["max_ns"] for r in rows] == sorted((r["max_ns"] for r in rows), reverse=True)
    text = run("stats", BLOCK, "--report", "cuda_gpu_kern_sum", "--format", "csv").stdout
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert len(parsed) == 31 and set(parsed[0]) >= {"Time (%)", "Total Time (ns)", "Instances", "StdDev (ns)", "Name"}
    assert any(
        p["Name"].startswith(
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast"
            "<at::native::BinaryFunctor<c10::BFloat16"
        )
        and len(p["Name"]) > 500
        for p in parsed
    )  # the full demangled name
    r = run("stats", BLOCK, "--sort", "bogus")
    assert r.returncode == 2 and "--sort 'bogus' is not one of" in r.stderr


def test_counting_modes_say_there_are_no_times(tmp_path):
    counter = write_recording(tmp_path / "c.gpuobs", mode=schema.Mode.BLOCK_COUNTER, events=False)
    r = run("stats", counter)
    assert r.returncode == 0
    assert "Kernel time summary: none. Mode block_counter records no block start or end times" in r.stdout
    assert "Blocks per kernel" in r.stdout
    r = run("stats", MEM, "--report", "kernels", "--json")
    assert json.loads(r.stdout)["kernel_times"]["timed"] is False and "records no block times" in r.stderr


KERNEL_ROW = r"^\s+\d+\.\d\s+[\d,]+\.\d\s+\d+\s"  # Time %, Total, Instances, ...


def test_the_table_is_whole_when_piped_and_says_what_it_leaves_out():
    r = run("stats", BLOCK)  # piped, no COLUMNS: nothing is cut or wrapped
    assert "\u2026" not in r.stdout  # no column collapsed to an ellipsis
    kernel_rows = [row for row in r.stdout.splitlines() if re.match(KERNEL_ROW, row)]
    assert len(kernel_rows) == 30 and all(len(row.split()) >= 9 for row in kernel_rows)
    assert "31 kernels, the first 30 by total shown (--top N for more)" in r.stdout
    rows = json.loads(run("stats", BLOCK, "--json", "--top", "5").stdout)
    assert len(rows["kernel_times"]["rows"]) == 5 and len(rows["blocks"]["rows"]) == 5  # --top applies to json
    assert len(json.loads(run("stats", BLOCK, "--json").stdout)["blocks"]["rows"]) == 31  # json: all by default
    mem = run("stats", MEM, "--report", "blocks").stdout
    assert "0/65,584" not in mem and "Recorded" not in mem and "Mem samples" in mem
    assert "Counted: exact accesses counted on the device" in mem


@pytest.mark.parametrize("columns", [80, 60])
def test_at_80_columns_every_row_keeps_its_kernel_name_and_numbers(columns):
    """COLUMNS is honoured piped too: nothing is wider, and a row that would be goes on two
    lines, its (folded) kernel name above all its numbers; nothing ends cut mid-number."""
    r = run("stats", BLOCK, COLUMNS=str(columns))
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and max(len(line) for line in lines) <= columns
    wide = run("stats", BLOCK, "--report", "kernels").stdout.splitlines()
    wide_rows = [row.split(None, 8) for row in wide if re.match(KERNEL_ROW, row)]
    at = [i for i, row in enumerate(lines) if re.match(KERNEL_ROW, row)][:30]
    assert len(at) == 30
    for i, wide_row in zip(at, wide_rows):
        assert lines[i].split() == wide_row[:8]  # every number, whole
        name = lines[i - 1].strip()  # the name, folded to fit: the kernel's own name is kept
        assert wide_row[8].startswith(name.split("<")[0].removesuffix("...")), (name, wide_row[8])


def test_every_command_reports_the_same_totals(tmp_path):
    for sample in (BLOCK, MEM, SIDE):
        info = json.loads(run("info", sample, "--json").stdout)["counted"]
        blocks = json.loads(run("stats", sample, "--report", "blocks", "--json").stdout)["blocks"]
        assert blocks["counted_total"] == info
        assert sum(r["counted"] for r in blocks["rows"]) + blocks["counted_unattributed"] == info
        out = run("export", sample, "-o", tmp_path / f"{sample.stem}.pftrace").stdout
        if sample == MEM:
            assert f"({info:,} accesses counted)" in out and info == 34_737_899
    # graph replays share counts: each count once, and in its kernel's row
    rows = json.loads(run("stats", SIDE, "--report", "blocks", "--json").stdout)["blocks"]["rows"]
    assert all(r["counted"] == r["blocks_recorded"] for r in rows)


def test_kernel_names_fold_templates_and_stay_distinct():
    name = (
        "void at::native::vectorized_elementwise_kernel<8, at::native::AbsFunctor<c10::BFloat16>, "
        "std::array<char*, 2ul> >(int, at::native::AbsFunctor<c10::BFloat16>, std::array<char*, 2ul>)"
    )
    assert short_name(name) == "at::native::vectorized_elementwise_kernel<8, AbsFunctor<BFloat16>, array<char*, 2ul>>"
    assert short_name(name, 75) == "at::native::vectorized_elementwise_kernel<8, AbsFunctor<...>, array<...>>"
    assert short_name(name, 60) == "at::native::vectorized_elementwise_kernel<...>"
    lam = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, float)"
    )
    assert short_name(lam) == "at::native::vectorized_elementwise_kernel<4, silu_kernel::lambda, array<char*, 2ul>>"
    assert short_name("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert short_name("kernel(float*, int)") == "kernel"
    assert short_names(["void k<A<int> >(int)", "void k<A<long> >(int)"], 8) == ["k<...> [1]", "k<...> [2]"]
    longest = max((f.name for f in gpuobs.load(SIDE).functions.values()), key=len)
    assert len(longest) > 5000 and len(short_name(longest)) <= 100


def test_the_readme_shows_the_summary_as_the_command_prints_it():
    from .cli_helpers import ROOT

    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- stats-sample")[1].split("```")[1].strip("\n").splitlines()
    command = block[0]
    assert command.startswith("$ gpuobs stats examples/data/")
    r = run(*command.split()[2:], cwd=ROOT)
    assert r.returncode == 0 and block[1:] == r.stdout.rstrip("\n").splitlines()


def test_csv_is_one_table_with_nsys_headers_whatever_the_reports_and_recordings(tmp_path):
    """Both reports of two recordings: one header (the time summary's columns as nsys's
    cuda_gpu_kern_sum names them), each row naming its recording and report, each report's
    own columns filled and the other's empty."""
    other = tmp_path / "other.gpuobs"
    other.write_bytes(BLOCK.read_bytes())
    text = run("stats", BLOCK, other, "--format", "csv").stdout
    lines = text.splitlines()
    assert lines[0].startswith(
        "Recording,Report,Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
    ) and lines[0].endswith(",Name")
    assert sum(line.startswith("Recording,") for line in lines) == 1 and "" not in lines
    rows = list(csv.DictReader(io.StringIO(text)))
    by = {(Path(r["Recording"]).name, r["Report"]) for r in rows}
    assert by == {(n, rep) for n in (BLOCK.name, "other.gpuobs") for rep in ("kernels", "blocks")}
    for r in rows:
        assert r["Name"] and None not in r and None not in r.values()  # as many fields as the header
        assert (r["Total Time (ns)"] != "") == (r["Report"] == "kernels")
        assert (r["Block Records"] != "") == (r["Report"] == "blocks")


def test_json_rows_name_their_kernel_alike_in_every_report():
    out = json.loads(run("stats", BLOCK, "--json").stdout)
    assert all("kernel" in r and "name" not in r for part in ("kernel_times", "blocks") for r in out[part]["rows"])


def test_csv_keeps_bounded_blocks_apart_from_launched_blocks(tmp_path):
    from gpuobs.recording_file import synthetic

    path = tmp_path / "bs.gpuobs"
    synthetic.write_block_starts_recording(path, devices=2)
    rows = list(csv.DictReader(io.StringIO(run("stats", path, "--format", "csv").stdout)))
    bounded = [r for r in rows if r["Report"] == "block_ends"]
    assert bounded and all(r["Blocks Bounded"] != "" and r["Blocks"] == "" for r in bounded)
    assert all(r["Blocks Bounded"] == "" for r in rows if r["Report"] != "block_ends")


def test_every_sort_key_is_valid_for_every_report():
    """--sort avg with the default report (both): the time summary sorts by it, the blocks
    report by its default, and each says by what; `launches` and `instances` are one key."""
    r = run("stats", BLOCK, "--sort", "avg", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kernel_times"]["sort"] == "avg" and out["blocks"]["sort"] == "blocks"
    avg = [row["avg_ns"] for row in out["kernel_times"]["rows"]]
    assert avg == sorted(avg, reverse=True)
    for key, report in (("instances", "blocks"), ("launches", "kernels"), ("p99", "all"), ("name", "blocks")):
        assert run("stats", BLOCK, "-r", report, "--sort", key, "--top", "2").returncode == 0, (key, report)
    assert "by launches shown" in run("stats", BLOCK, "-r", "blocks", "--sort", "instances").stdout


def test_memory_modes_sort_blocks_by_the_blocks_shown():
    out = json.loads(run("stats", MEM, "-r", "blocks", "--sort", "blocks", "--json").stdout)["blocks"]["rows"]
    blocks = [row["blocks"] for row in out]
    assert blocks == sorted(blocks, reverse=True) and blocks[0] == 65_584
