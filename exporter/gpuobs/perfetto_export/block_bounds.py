"""How a block_starts recording's bounded block ends (analysis/block_ends.py) look
in the trace: each block slice ends at its bound; an `end` argument says which
bound it is; slices whose bound is weaker than slot reuse carry the bound in their
name, so Perfetto colours them apart from the tight ones."""

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


def bounded_names(names: dict) -> tuple[dict, int]:
    """Kernel names (iid -> name) with a variant per weaker bound: variant k of iid i is
    i + k * stride, k = the bound's place in NAME_SUFFIXES. Returns (names, stride)."""
    stride = max(names, default=0) + 1
    out = {}
    for k, suffix in enumerate(NAME_SUFFIXES.values()):
        out.update({iid + k * stride: name + suffix for iid, name in names.items()})
    return out, stride


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
