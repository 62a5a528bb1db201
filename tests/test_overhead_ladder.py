"""The ladder's table (benchmarks/overhead_ladder.py) from a run's log: ratios to
no tool and to the no-op rungs that pay for the same patch points, variants
against the same-variant no-op rung, and a run cut short still readable."""

import argparse
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ladder():
    spec = importlib.util.spec_from_file_location("overhead_ladder", ROOT / "benchmarks" / "overhead_ladder.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LOG = """\
round 0 none: {'w': 1.0}
round 0 block_noop: {'w': 2.0}
round 0 block_trace_noop: {'w': 4.0}
round 0 block_trace: {'w': 5.0}
round 0 block_noop+nographs: {'w': 1.5}
round 0 block_counter+nographs: {'w': 3.0}
round 1 block_counter+nographs: {'w': 3.0}
round 1 block_noop+nographs: {'w': 1.5}
round 1 block_trace: {'w': 7.0}
gpuobs: something else the run printed
"""


def test_table_from_a_log_cut_short(tmp_path):
    ladder = _ladder()
    log = tmp_path / "ladder.log"
    log.write_text(LOG)
    configs = ["none", "block_noop", "block_trace_noop", "block_trace", "block_noop+nographs", "block_counter+nographs"]
    samples, rounds = ladder.samples_from_log(log, configs)
    assert rounds == 2 and samples["block_trace"]["w"] == [5.0, 7.0] and samples["none"]["w"] == [1.0]
    args = argparse.Namespace(rounds=3, reps=10, from_log=[str(log)], across_rounds="median")
    text = ladder.table(samples, configs, rounds, args)
    row = next(line for line in text.splitlines() if line.startswith("| w |")).rstrip(" |").split(" | ")
    assert "(2 rounds done)" in text
    # block_trace: median 6.0 -> 6x none, 1.5x its own floor, 3x the entry-only rung
    assert row[4] == "6.000 (6.00x; 1.50x block_trace_noop; 3.00x block_noop)"
    # a +nographs rung is compared with the +nographs no-op rung
    assert row[6] == "3.000 (3.00x; 2.00x block_noop+nographs)"
    # each configuration's fastest process instead of the median of its rounds
    args.across_rounds = "min"
    text = ladder.table(samples, configs, rounds, args)
    row = next(line for line in text.splitlines() if line.startswith("| w |")).rstrip(" |").split(" | ")
    assert row[4] == "5.000 (5.00x; 1.25x block_trace_noop; 2.50x block_noop)" and "--across-rounds min" in text


def test_a_tool_variant_is_compared_with_its_own_noop_rung(tmp_path):
    """MODE@NAME (another build of the tool, --tool-variant) against NAME's no-op
    rung, and against the plain one when NAME has none."""
    ladder = _ladder()
    log = tmp_path / "ladder.log"
    log.write_text(
        "round 0 none: {'w': 1.0}\n"
        "round 0 block_noop: {'w': 2.0}\n"
        "round 0 block_noop@base: {'w': 2.5}\n"
        "round 0 block_starts: {'w': 3.0}\n"
        "round 0 block_starts@base: {'w': 5.0}\n"
        "round 0 block_counter@base: {'w': 4.0}\n"
    )
    configs = ["none", "block_noop", "block_noop@base", "block_starts", "block_starts@base", "block_counter@base"]
    samples, rounds = ladder.samples_from_log(log, configs)
    args = argparse.Namespace(rounds=1, reps=10, from_log=[str(log)], across_rounds="median")
    row = next(line for line in ladder.table(samples, configs, rounds, args).splitlines() if line.startswith("| w |"))
    cells = row.rstrip(" |").split(" | ")
    assert cells[4] == "3.000 (3.00x; 1.50x block_noop)"
    assert cells[5] == "5.000 (5.00x; 2.00x block_noop@base)"
    assert cells[6] == "4.000 (4.00x; 1.60x block_noop@base)"
    assert ladder.split_config("block_counter+nographs@base") == ("block_counter", ["nographs"], "base")


def test_a_tool_variant_folder_missing_its_files_is_refused(tmp_path):
    ladder = _ladder()
    (tmp_path / "libgpuobs_tool.so").write_bytes(b"")
    try:
        ladder.variant_builds([f"base={tmp_path}"])
    except SystemExit as e:
        assert "gpuobs_patches.fatbin, gpuobs_clock_probe.fatbin" in str(e)
    else:
        raise AssertionError("a folder without the patches was accepted")


def test_an_ab_pools_runs_and_shows_each_sides_spread(tmp_path):
    """MODE against MODE@NAME over two runs' logs pooled: each side's processes with
    their spread, the change of the medians and of the fastest processes."""
    ladder = _ladder()
    first, second = tmp_path / "one.log", tmp_path / "two.log"
    first.write_text(
        "round 0 none: {'w': 1.0}\nround 0 block_starts: {'w': 2.2}\nround 0 block_starts@before: {'w': 2.0}\n"
    )
    second.write_text(
        "round 0 none: {'w': 1.0}\n"
        "round 0 block_starts: {'w': 2.0}\n"
        "round 0 block_starts@before: {'w': 2.1}\n"
        "round 1 block_starts: {'w': 2.4}\n"
        "round 1 block_starts@before: {'w': 2.2}\n"
    )
    configs = ["none", "block_starts", "block_starts@before"]
    samples, rounds = ladder.samples_from_logs([first, second], configs)
    assert rounds == 3 and samples["block_starts"]["w"] == [2.2, 2.0, 2.4]
    args = argparse.Namespace(rounds=3, reps=10, from_log=[str(first), str(second)], across_rounds="median")
    text = ladder.table(samples, configs, rounds, args)
    line = next(line for line in text.splitlines() if line.startswith("- w, block_starts vs block_starts@before"))
    assert "2.200 [2.000-2.400] n=3 vs 2.100 [2.000-2.200] n=3: +4.8% median, +0.0% fastest" in line
