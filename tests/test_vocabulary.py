"""One vocabulary across `stats`, `diff` and `info`: the same JSON key for the same
value in every report (the kernel is `kernel`, the file `recording`), and one CSV
header per key, written as nsys writes its own ("Total Time (ns)", never total_ns),
holding exactly the JSON's value."""

import csv
import io
import json
import re

import pytest

from gpuobs.analysis.vocabulary import CSV_TITLES, compared_titles
from gpuobs.recording_file import synthetic

from .cli_helpers import DATA, gpuobs

BLOCK = DATA / "decode_block_trace.gpuobs"
MEM = DATA / "decode_mem_sampled.gpuobs"
REPORTS = {"kernel_times": "kernels", "blocks": "blocks", "block_ends": "block_ends"}  # JSON part -> CSV Report
NSYS_STYLE = re.compile(r"^[A-Z][A-Za-z0-9]*( [A-Za-z0-9]+)*( \((ns|%|B/A)\))?( [AB])?$")


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """The two samples and a block_starts recording (the only mode with a block_ends report)."""
    starts, _truth = synthetic.write_block_starts_recording(tmp_path_factory.mktemp("vocab") / "starts.gpuobs")
    return [BLOCK, MEM, starts]


def _out(*args) -> str:
    r = gpuobs(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _cell(value) -> str:
    return "" if value is None else str(value)  # as the csv module writes it


def test_json_keys_the_kernel_and_the_recording_alike_everywhere(recordings):
    for path in recordings:
        stats = json.loads(_out("stats", path, "--json"))
        info = json.loads(_out("info", path, "--json"))
        diff = json.loads(_out("diff", path, path, "--json"))
        assert stats["recording"] == info["recording"] == diff["a"]["recording"] == str(path)
        rows = [r for part in REPORTS if stats.get(part) for r in stats[part]["rows"]] + diff["kernels"]
        assert rows and all("kernel" in r and "name" not in r for r in rows), path


def test_every_stats_csv_column_is_a_json_key_under_its_one_header(recordings):
    for path in recordings:
        stats = json.loads(_out("stats", path, "--json"))
        table = list(csv.DictReader(io.StringIO(_out("stats", path, "--format", "csv"))))
        assert all(NSYS_STYLE.match(title) for title in table[0]), list(table[0])
        assert set(table[0]) <= set(CSV_TITLES.values()) | {"Report"}
        for part, report in REPORTS.items():
            rows = stats.get(part, {}).get("rows", []) if stats.get(part) else []
            lines = [line for line in table if line["Report"] == report]
            assert len(lines) == len(rows), (path, part)
            for row, line in zip(rows, lines):
                for key, value in row.items():
                    assert line[CSV_TITLES[key]] == _cell(value), (path, part, key)


def test_diff_csv_heads_each_number_as_stats_does_for_a_and_b(tmp_path):
    slower = synthetic.write_block_trace_recording(tmp_path / "b.gpuobs", dropped=50)
    for a, b in ((BLOCK, BLOCK), (MEM, MEM), (synthetic.write_block_trace_recording(tmp_path / "a.gpuobs"), slower)):
        kernels = json.loads(_out("diff", a, b, "--json"))["kernels"]
        table = list(csv.DictReader(io.StringIO(_out("diff", a, b, "--format", "csv"))))
        assert all(NSYS_STYLE.match(title) for title in table[0]), list(table[0])
        assert list(table[0])[-1] == CSV_TITLES["kernel"] and len(table) == len(kernels)
        for k, line in zip(kernels, table):
            assert line[CSV_TITLES["kernel"]] == k["kernel"] and line["Status"] == k["status"]
            compared = {key: v for key, v in k.items() if isinstance(v, dict)}
            assert compared
            for key, v in compared.items():
                title_a, title_b, title_ratio = compared_titles(key)
                assert (line[title_a], line[title_b], line[title_ratio]) == tuple(map(_cell, v.values())), key


def test_a_compared_value_is_headed_with_stats_own_title():
    assert compared_titles("total_ns") == ("Total Time (ns) A", "Total Time (ns) B", "Total Time (B/A)")
    assert compared_titles("blocks_recorded")[0] == CSV_TITLES["blocks_recorded"] + " A" == "Block Records A"
