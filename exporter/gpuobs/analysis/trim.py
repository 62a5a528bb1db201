"""`gpuobs trim`: the part of a recording to share. Selects whole flush windows (by
the index `gpuobs info` shows), whole launches whose span overlaps a time window
(relative to the recording's start: selection.TimeMeaning.OVERLAPS), and launches
of kernels matching a regex; the selections combine. An empty selection is
refused, never written. The selecting itself is selection.py's, shared with export."""

from __future__ import annotations

from typing import Optional

from ..errors import SelectionError, TrimError
from ..recording_file.recording import Recording
from ..selection import Criteria, Selection, TimeMeaning
from ..selection import select as select_part

__all__ = ["Selection", "TrimError", "criteria", "select"]


def criteria(flushes: Optional[tuple] = None, time: Optional[tuple] = None, kernels: Optional[str] = None) -> Criteria:
    """trim's Criteria from parsed ranges: `flushes` (first, end) flush indices; `time`
    (start, end) ns from the recording's first event; `kernels` a regex."""
    try:
        Criteria.parse(kernels=kernels)  # checks the regex
    except SelectionError as exc:
        raise TrimError(str(exc)) from None
    return Criteria(
        kernels=kernels, time=time, flushes=flushes, time_meaning=TimeMeaning.OVERLAPS, time_option="--time"
    )


def select(
    rec: Recording, flushes: Optional[tuple] = None, time: Optional[tuple] = None, kernels: Optional[str] = None
) -> Selection:
    """What to copy; None: no restriction. END excluded. TrimError when nothing is kept."""
    try:
        selection = select_part(rec, criteria(flushes, time, kernels))
        selection.flushes  # noqa: B018 - computed now, so that a bad --flushes is said here
    except TrimError:
        raise
    except SelectionError as exc:
        raise TrimError(str(exc)) from None
    if selection.empty:
        raise TrimError(selection.nothing_kept())
    return selection
