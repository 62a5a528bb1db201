"""What part of a recording a command works on: launches of some kernels (--kernels
REGEX), launch ids (--launches A:B), a time window (export's --time-window, trim's
--time) and flush windows (trim's --flushes). `Criteria` is what the user asked
for, read once from the options; `select()` turns it into a `Selection` of one
recording (masks over its launches, events and flush windows) that every writer
consumes: the Perfetto export, the Parquet export and trim.

A time window has two meanings, named apart because each command needs its own, and
each name has one meaning wherever it is taken (plot takes both):

* TimeMeaning.STARTS_IN (--time-window: export, plot): what starts in the window. A
  block or sample is kept when it starts in the window, a launch (its kernel slice,
  its row) when its first block does: a trace of the window, cut at its edges.
* TimeMeaning.OVERLAPS (--time: trim, plot): whole launches whose span overlaps the
  window, with all their events, so that the part written is a recording whose
  launches are complete.

Times are relative to the recording's first device event (as `gpuobs info` shows
them); END is excluded everywhere."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .analysis import launches as analysis
from .errors import SelectionError
from .ranges import RangeError, format_span, parse_duration, parse_index, parse_range
from .recording_file.recording import Recording

Range = Optional[tuple]  # (START or None, END or None), END excluded


class TimeMeaning(enum.Enum):
    STARTS_IN = "starts_in"
    OVERLAPS = "overlaps"


@dataclass(frozen=True)
class Criteria:
    """What the user asked to keep; None: no restriction. Build it with `parse`."""

    kernels: Optional[str] = None  # regex on a kernel's name or mangled name
    launches: Range = None  # launch ids
    time: Range = None  # ns from the recording's first event
    flushes: Range = None  # flush window indices, as `gpuobs info` lists them
    time_meaning: TimeMeaning = TimeMeaning.STARTS_IN
    time_option: str = "--time-window"  # how the user spelled the time option, for messages
    text: tuple = ()  # the options as the user typed them, (flag, value) pairs, for messages

    @classmethod
    def parse(
        cls,
        kernels: Optional[str] = None,
        launches: Optional[str] = None,
        time: Optional[str] = None,
        flushes: Optional[str] = None,
        time_meaning: TimeMeaning = TimeMeaning.STARTS_IN,
        time_option: str = "--time-window",
    ) -> "Criteria":
        """From the options' text (`--launches 10:`, `--time-window 1ms:5ms`); SelectionError names a bad one."""
        try:
            if kernels:
                re.compile(kernels)
            return cls(
                kernels=kernels or None,
                launches=parse_range(launches, "--launches", parse_index) if launches else None,
                time=parse_range(time, time_option, parse_duration) if time else None,
                flushes=parse_range(flushes, "--flushes", parse_index) if flushes else None,
                time_meaning=time_meaning,
                time_option=time_option,
                text=tuple(
                    (flag, value)
                    for flag, value in (("--kernels", kernels), ("--launches", launches), (time_option, time))
                    + (("--flushes", flushes),)
                    if value
                ),
            )
        except RangeError as exc:
            raise SelectionError(str(exc)) from None
        except re.error as exc:
            raise SelectionError(f"--kernels {kernels!r} is not a valid regular expression: {exc}") from None

    @property
    def by_launch(self) -> bool:
        """Launches are chosen by what they are (kernel, id): events of no launch are left out."""
        return self.kernels is not None or self.launches is not None

    @property
    def restricts(self) -> bool:
        return self.by_launch or self.time is not None or self.flushes is not None

    def describe(self) -> str:
        if self.text:
            return " and ".join(f"{flag} {value if flag != '--kernels' else repr(value)}" for flag, value in self.text)
        parts = []
        if self.kernels is not None:
            parts.append(f"--kernels {self.kernels!r}")
        if self.launches is not None:
            parts.append(f"--launches {_range_text(self.launches)}")
        if self.time is not None:
            parts.append(f"{self.time_option} {_range_text(self.time, 'ns')}")
        if self.flushes is not None:
            parts.append(f"--flushes {_range_text(self.flushes)}")
        return " and ".join(parts) or "everything"


def _range_text(r: tuple, unit: str = "") -> str:
    return ":".join("" if v is None else f"{v}{unit}" for v in r)


@dataclass
class Selection:
    """The part of one recording that `Criteria` chose. Masks are aligned with the
    recording's arrays; `launch_of_event` and `table` are the per-launch facts every
    writer needs (analysis/launches.py), computed once here."""

    rec: Recording
    criteria: Criteria
    launch_of_event: np.ndarray  # index into rec.launches per event, -1 unresolved
    table: analysis.LaunchTable
    matched: np.ndarray  # per launch: passes --kernels, --launches and --flushes (before any time window)
    launches: np.ndarray  # per launch: kept (STARTS_IN: also its first block starts in the window)
    events: np.ndarray  # per event of rec.events: kept
    window: Optional[tuple] = None  # the time window on the device clock (first, end), or None
    _flushes: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def flushes(self) -> np.ndarray:
        """Per row of rec.flushes: kept. A window holding nothing chosen is left out
        whole, unless only --flushes chose (then exactly those)."""
        if self._flushes is None:
            self._flushes = _flush_mask(self)
        return self._flushes

    @property
    def empty(self) -> bool:
        return not self.launches.any() and not self.events.any()

    def describe(self) -> str:
        return (
            f"{int(self.flushes.sum())} flush windows, {int(self.launches.sum()):,} launches, "
            f"{int(self.events.sum()):,} events"
        )

    def nothing_kept(self) -> str:
        """The message for a selection that keeps nothing."""
        span = device_span(self.rec)
        where = f" (it spans {format_span(0, span[1] - span[0])})" if span and self.criteria.time else ""
        return f"the selection keeps nothing of {self.rec.path}{where}: no launch and no event; nothing was written"


def device_span(rec: Recording) -> Optional[tuple]:
    """(first, last) device ns of the recording's events; None without events."""
    ev = rec.events
    if len(ev) == 0:
        return None
    return int(ev["time_start"].min()), int(np.maximum(ev["time_end"], ev["time_start"]).max())


def window_keys(devices, flush_seqs) -> np.ndarray:
    """One integer per (device, flush window)."""
    return (np.asarray(devices, np.int64) << 32) | np.asarray(flush_seqs, np.int64)


def kernel_mask(rec: Recording, regex: Optional[str]) -> np.ndarray:
    """Per launch: its kernel's name or mangled name matches `regex` (None: every launch)."""
    if regex is None:
        return np.ones(len(rec.launches), bool)
    pattern = re.compile(regex)
    # one search per function, not per launch: a decode loop has millions of launches of tens of kernels
    keys, inverse = np.unique(
        rec.launches["device_index"].astype(np.int64) << 32 | rec.launches["function_slot"], return_inverse=True
    )
    hit = np.zeros(len(keys), bool)
    for i, key in enumerate(keys.tolist()):
        f = rec.function(key >> 32, key & 0xFFFFFFFF)
        hit[i] = bool(pattern.search(f.name) or pattern.search(f.mangled))
    return hit[inverse.ravel()] if len(keys) else np.zeros(0, bool)


def launch_id_mask(rec: Recording, ids: Range) -> np.ndarray:
    keep = np.ones(len(rec.launches), bool)
    if ids is None:
        return keep
    lo, hi = ids
    launch_ids = rec.launches["launch_id"].astype(np.int64)
    if lo is not None:
        keep &= launch_ids >= lo
    if hi is not None:
        keep &= launch_ids < hi
    return keep


def matched_launches(rec: Recording, criteria: Criteria) -> np.ndarray:
    """Per launch: passes --kernels and --launches (cheap: no event is read)."""
    return kernel_mask(rec, criteria.kernels) & launch_id_mask(rec, criteria.launches)


def select(
    rec: Recording,
    criteria: Criteria,
    launch_of_event: Optional[np.ndarray] = None,
    table: Optional[analysis.LaunchTable] = None,
) -> Selection:
    """The Selection of `rec`. Raises SelectionError where the criteria cannot apply
    (--flushes past the last window; OVERLAPS on a recording without device times)."""
    if launch_of_event is None:
        launch_of_event = analysis.launch_index_of_events(rec)
    if table is None:
        table = analysis.launch_table(rec, launch_of_event)
    matched = matched_launches(rec, criteria)
    in_flushes = None
    if criteria.flushes is not None:
        keys = chosen_window_keys(rec, criteria.flushes)
        matched &= np.isin(window_keys(rec.launches["device_index"], rec.launch_flushes), keys)
        in_flushes = np.isin(window_keys(rec.event_devices, rec.event_flushes), keys)
    window, launches = time_selection(rec, criteria, table, matched, device_span(rec))
    events = event_mask(criteria, rec.events, launch_of_event, window, owners(criteria, matched, launches), in_flushes)
    return Selection(rec, criteria, launch_of_event, table, matched, launches, events, window)


def chosen_window_keys(rec: Recording, flushes: tuple) -> np.ndarray:
    """window_keys of the flush windows --flushes chooses."""
    chosen = _chosen_flushes(rec, flushes)
    return window_keys(rec.flushes["device_index"], rec.flushes["flush_seq"])[chosen]


def time_selection(rec: Recording, criteria: Criteria, table, matched: np.ndarray, span: Optional[tuple]):
    """(the time window on the device clock or None, the launches kept): STARTS_IN, those
    whose first block starts in it; OVERLAPS, those whose span overlaps it. `span`: the
    recording's device_span."""
    if criteria.time is None:
        return None, matched
    check_time_applies(rec, criteria, span)
    window = time_window(criteria, span)
    if window is None:
        return None, matched
    lo, hi = window
    if criteria.time_meaning is TimeMeaning.OVERLAPS:
        first = table.first_start.astype(np.int64)
        last = np.maximum(table.last_end.astype(np.int64), first)
        return window, matched & (first > 0) & (first < hi) & (last >= lo)
    first = table.first_start
    return window, matched & (first >= lo) & (first < hi)


def time_window(criteria: Criteria, span: Optional[tuple]) -> Optional[tuple]:
    """The time window on the device clock, (first, end), or None (no --time, no events)."""
    if criteria.time is None or span is None:
        return None
    t0 = span[0]
    lo, hi = criteria.time
    if criteria.time_meaning is TimeMeaning.OVERLAPS:
        return t0 + (lo or 0), t0 + hi if hi is not None else np.iinfo(np.int64).max
    return t0 + lo if lo is not None else 0, t0 + hi if hi is not None else np.iinfo(np.uint64).max


def check_time_applies(rec: Recording, criteria: Criteria, span: Optional[tuple]) -> None:
    """SelectionError where OVERLAPS is asked of a recording without device times."""
    if criteria.time is not None and criteria.time_meaning is TimeMeaning.OVERLAPS and span is None:
        mode = rec.run.mode_name if rec.run else "unknown"
        raise SelectionError(
            f"{criteria.time_option}: {rec.path} has no device times (mode {mode} keeps none); "
            "select by --flushes or --kernels"
        )


def owners(criteria: Criteria, matched: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """Per launch: its events may be kept. STARTS_IN keeps the in-window events of a
    launch that started before the window."""
    return matched if criteria.time_meaning is TimeMeaning.STARTS_IN else launches


def event_mask(criteria: Criteria, ev, launch_of_event, window, owner, in_flushes=None) -> np.ndarray:
    """Per event of `ev` (all of a recording's, or a segment of them): kept. `owner`:
    owners(); `in_flushes`: per event (or one for all) whether its flush window is chosen."""
    events = np.ones(len(ev), bool)
    if in_flushes is not None:
        events &= in_flushes
    resolved = launch_of_event >= 0
    if criteria.by_launch:
        events &= resolved
    if criteria.time is not None and window is not None:
        lo, hi = window
        if criteria.time_meaning is TimeMeaning.OVERLAPS:
            starts = ev["time_start"].astype(np.int64)
            events &= np.where(
                resolved, analysis.of_launch(owner, launch_of_event, False), (starts >= lo) & (starts < hi)
            )
        else:
            starts = ev["time_start"]
            events &= (starts >= lo) & (starts < hi)
    if criteria.time is not None or criteria.by_launch:
        events &= ~resolved | analysis.of_launch(owner, launch_of_event, False)
    return events


def _chosen_flushes(rec: Recording, flushes: tuple) -> np.ndarray:
    n_flush = len(rec.flushes)
    lo, hi = flushes
    lo = 0 if lo is None else lo
    end = n_flush if hi is None else hi
    if lo >= n_flush:
        raise SelectionError(
            f"--flushes {lo}:{'' if hi is None else hi}: the recording has {n_flush} flush "
            f"windows, indices 0..{n_flush - 1} (`gpuobs info` lists them)"
        )
    keep = np.zeros(n_flush, bool)
    keep[lo:end] = True
    return keep


def _flush_mask(sel: Selection) -> np.ndarray:
    rec, criteria = sel.rec, sel.criteria
    keep = np.ones(len(rec.flushes), bool)
    if criteria.flushes is not None:
        keep &= _chosen_flushes(rec, criteria.flushes)
    if criteria.time is not None or criteria.by_launch:
        held = np.concatenate(
            [
                window_keys(rec.launches["device_index"], rec.launch_flushes)[sel.launches],
                window_keys(rec.event_devices, rec.event_flushes)[sel.events],
            ]
        )
        keep &= np.isin(window_keys(rec.flushes["device_index"], rec.flushes["flush_seq"]), held)
    return keep
