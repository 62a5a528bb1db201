"""selection.py: one reading of --kernels, --launches, a time window and --flushes for
every writer, with the time window's two meanings kept apart; and one error base class."""

import importlib
import inspect
import pkgutil
import re

import numpy as np
import pytest
from cli_helpers import DATA

import gpuobs
from gpuobs.errors import GpuobsError, SelectionError
from gpuobs.recording_file.reader import load
from gpuobs.recording_file.schema import EventKind
from gpuobs.selection import Criteria, TimeMeaning, device_span, kernel_mask, select

SAMPLE = DATA / "decode_block_trace.gpuobs"
# Defined in files other engineers own; they reparent them (one line each) and shrink this set.
NOT_YET_REPARENTED = set()
INTERNAL = {"BadValue"}  # the reader's value checks: always said as a CorruptChunk


@pytest.fixture(scope="module")
def rec():
    return load(SAMPLE)


def test_every_error_of_the_package_is_a_gpuobs_error():
    found = {}
    for info in pkgutil.walk_packages(gpuobs.__path__, "gpuobs."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Exception) and cls.__module__ == module.__name__ and not name.startswith("_"):
                found[name] = cls
    assert {"RecordingError", "ExportError", "TrimError", "SelectionError", "RangeError", "OutputError"} <= set(found)
    strays = {name for name, cls in found.items() if not issubclass(cls, GpuobsError)} - INTERNAL
    assert strays == NOT_YET_REPARENTED  # shrink the set as they are reparented


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kernels": "("}, "--kernels '(' is not a valid regular expression"),
        ({"launches": "9:3"}, "--launches '9:3' is empty"),
        ({"time": "5:"}, "has no unit"),
        ({"flushes": "x:"}, "--flushes 'x:'"),
    ],
)
def test_bad_options_are_selection_errors(kwargs, message):
    with pytest.raises(SelectionError, match=re.escape(message)):
        Criteria.parse(**kwargs)


def test_kernel_mask_is_a_search_of_each_launchs_names(rec):
    pattern = re.compile("elementwise|nvjet")
    expected = [
        bool(pattern.search(rec.launch_function(launch).name) or pattern.search(rec.launch_function(launch).mangled))
        for launch in rec.launches
    ]
    got = kernel_mask(rec, "elementwise|nvjet")
    assert got.tolist() == expected and 0 < got.sum() < len(rec.launches)


def test_the_two_meanings_of_a_time_window(rec):
    t0 = device_span(rec)[0]
    starts_in = select(rec, Criteria.parse(time="20ms:40ms"))
    overlaps = select(rec, Criteria.parse(time="20ms:40ms", time_meaning=TimeMeaning.OVERLAPS))
    lo, hi = t0 + 20_000_000, t0 + 40_000_000
    table = starts_in.table
    ev = rec.events
    # STARTS_IN: exactly the events and launches whose (first) start is in the window
    starts = ev["time_start"].astype(np.int64)
    assert np.array_equal(starts_in.events, (starts >= lo) & (starts < hi))
    first = table.first_start.astype(np.int64)
    assert np.array_equal(starts_in.launches, (first >= lo) & (first < hi))
    # OVERLAPS: whole launches whose span overlaps, with every event of theirs
    last = table.last_end.astype(np.int64)
    assert np.array_equal(overlaps.launches, (first > 0) & (first < hi) & (last >= lo))
    of = overlaps.launch_of_event
    assert np.array_equal(overlaps.events[of >= 0], overlaps.launches[of[of >= 0]])
    assert overlaps.launches.sum() >= starts_in.launches.sum() > 0  # launches cut by an edge are kept whole


def test_by_kernel_leaves_out_events_of_no_launch_and_flushes_holding_nothing(rec):
    sel = select(rec, Criteria.parse(kernels="nvjet"))
    of = sel.launch_of_event
    assert not sel.events[of < 0].any()
    assert np.array_equal(sel.events, (of >= 0) & sel.launches[np.maximum(of, 0)])
    kept_windows = set(zip(rec.launches["device_index"][sel.launches], rec.launch_flushes[sel.launches]))
    assert set(zip(rec.flushes["device_index"][sel.flushes], rec.flushes["flush_seq"][sel.flushes])) == kept_windows


def test_flushes_select_windows_and_past_the_last_is_said(rec):
    sel = select(rec, Criteria.parse(flushes="1:3"))
    assert sel.flushes.tolist() == [i in (1, 2) for i in range(len(rec.flushes))]
    keep = np.isin(rec.event_flushes, rec.flushes["flush_seq"][1:3])
    assert np.array_equal(sel.events, keep) and (ev_kind_blocks := (rec.events["kind"] == EventKind.BLOCK)).any()
    assert ev_kind_blocks[sel.events].all()
    with pytest.raises(SelectionError, match=r"--flushes 99:: the recording has \d+ flush windows"):
        select(rec, Criteria.parse(flushes="99:"))


def test_each_time_option_has_one_meaning_in_every_command():
    """--time is whole launches running in the window (trim's), --time-window the blocks
    that start in it (export's), in every command that takes them, as their help says."""
    import typer.main

    from gpuobs.cli import app

    said = {"--time": "running in this window", "--time-window": "start in this window"}
    taken = {}
    for name, command in typer.main.get_command(app).commands.items():
        for param in command.params:
            for option in set(param.opts) & set(said):
                taken.setdefault(option, []).append(name)
                assert said[option] in param.help.replace("starts in", "start in"), (name, option, param.help)
    assert sorted(taken["--time"]) == ["plot", "trim"] and sorted(taken["--time-window"]) == ["export", "plot"]


def test_plot_draws_what_trim_keeps_or_what_the_trace_shows(rec):
    from gpuobs.analysis import trim
    from gpuobs.analysis.plot import NoBlockChosen, blocks_chosen
    from gpuobs.ranges import parse_time_range

    blocks = rec.events["kind"] == EventKind.BLOCK
    window = "11ms:11.5ms"  # its first launch started before 11 ms
    running = blocks_chosen(rec, time=window)
    starting = blocks_chosen(rec, time_window=window)
    assert np.array_equal(running, trim.select(rec, time=parse_time_range(window, "--time")).events & blocks)
    assert np.array_equal(starting, select(rec, Criteria.parse(time=window)).events & blocks)
    starts = rec.events["time_start"].astype(np.int64) - int(rec.events["time_start"].min())
    assert (running & ~starting).any() and (starts[running & ~starting] < 11_000_000).all()
    assert not (starting & ~running).any()
    with pytest.raises(SelectionError, match="two meanings"):
        blocks_chosen(rec, time=window, time_window=window)
    with pytest.raises(NoBlockChosen, match="--time-window 900ms: keeps no block"):
        blocks_chosen(rec, time_window="900ms:")
