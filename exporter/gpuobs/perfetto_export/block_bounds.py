"""How block ends that were not measured look in the trace. A block_starts
recording's bounded ends (analysis/block_ends.py): each block slice ends at its
bound; an `end` argument says which bound it is; slices whose bound is weaker than
slot reuse carry the bound in their name, so Perfetto colours them apart from the
tight ones. A block_trace end stamped by a later run of the block's grid id
(schema.BLOCK_END_UNCONFIRMED) is drawn the same way as an unknown one: a
zero-length slice at its start, its name marked, its `end` argument saying why."""

from __future__ import annotations

import numpy as np

from ..analysis.block_ends import LABELS, BlockEnds, EndBound

END_NOTES = {
    EndBound.SLOT: b"upper bound: slot reuse",
    EndBound.STREAM: b"upper bound: next kernel on the stream",
    EndBound.QUIET: b"upper bound: quiet point",
    EndBound.NONE: b"unknown",
}
NAME_SUFFIXES = {
    EndBound.SLOT: "",  # the kernel's own name, as block_trace draws blocks
    EndBound.STREAM: " (end: next kernel)",
    EndBound.QUIET: " (end: quiet point)",
    EndBound.NONE: " (end unknown)",
}
NOTE_CHOICES = [END_NOTES[q] for q in EndBound]  # indexed by EndBound value
SMS_DESCRIPTION = (
    "One track per SM, in SM order; blocks that overlap on an SM sit on lanes merged into its track. "
    "block_starts records no block end: a block runs from its leader's entry to an UPPER BOUND of its "
    "end (its `end` argument says which): the next block starts in the warp slots it held (slot reuse: "
    "named as the kernel), the first block of the next kernel on its stream (named '(end: next kernel)'), "
    "its flush window's quiet point ('(end: quiet point)'), or none ('(end unknown)': zero-length)."
)
KERNELS_DESCRIPTION = (
    "One slice per launch: its first block's start to the latest upper bound of its blocks' ends "
    "(block_starts records no block end; the `end` argument says which bound, 'unknown' where a block has none)."
)


# block_trace: an end a later run of the block's grid id stamped (tool/late_ends.h)
UNCONFIRMED_SUFFIX = " (end unconfirmed)"
UNCONFIRMED_NOTE = b"unconfirmed: stamped by a later run of its grid, not this block's; drawn at its start"
TRACE_SMS_DESCRIPTION = (
    "One track per SM, in SM order; blocks that overlap on an SM sit on lanes merged into its track. "
    "A block runs from its leader's entry to its last thread's exit. Graph replays and conditional-body runs "
    "of a kernel share one grid id, so a later run's exits can stamp a block's end: such a block, named "
    "'(end unconfirmed)', is a zero-length slice at its start (its real end is unknown; `gpuobs stats` "
    "counts it from its start alone too), and its `end` argument says so."
)


def bounded_names(names: dict) -> tuple[dict, int]:
    """Kernel names (iid -> name) with a variant per weaker bound: variant k of iid i is
    i + k * stride, k = the bound's place in NAME_SUFFIXES. Returns (names, stride)."""
    return name_variants(names, list(NAME_SUFFIXES.values()))


def unconfirmed_names(names: dict) -> tuple[dict, int]:
    """Kernel names with their '(end unconfirmed)' variant (variant 1, as bounded_names)."""
    return name_variants(names, ["", UNCONFIRMED_SUFFIX])


def name_variants(names: dict, suffixes: list) -> tuple[dict, int]:
    """Kernel names (iid -> name) with a variant per suffix: variant k of iid i is
    i + k * stride, named name + suffixes[k]. Returns (names, stride)."""
    stride = max(names, default=0) + 1
    out = {}
    for k, suffix in enumerate(suffixes):
        out.update({iid + k * stride: name + suffix for iid, name in names.items()})
    return out, stride


def unconfirmed_name_iids(name_iid: np.ndarray, unconfirmed: np.ndarray, stride: int) -> np.ndarray:
    """Each block's interned name: its kernel's, or its '(end unconfirmed)' variant."""
    return np.asarray(name_iid, np.uint64) + unconfirmed.astype(np.uint64) * np.uint64(stride)


def bounded_name_iids(name_iid: np.ndarray, quality: np.ndarray, stride: int) -> np.ndarray:
    """Each block's interned name: its kernel's, or that name's variant for its bound."""
    variant = np.zeros(len(EndBound), np.uint64)
    for k, q in enumerate(NAME_SUFFIXES):
        variant[q] = k
    return np.asarray(name_iid, np.uint64) + variant[quality] * np.uint64(stride)


def counts(ends: BlockEnds | None, rows: np.ndarray) -> dict:
    """Blocks of these rows of rec.events per bound label; {} outside block_starts."""
    if ends is None:
        return {}
    found = np.bincount(ends.quality[ends.at(rows)], minlength=len(EndBound))
    return {LABELS[q]: int(found[q]) for q in NAME_SUFFIXES}  # tightest kind first
