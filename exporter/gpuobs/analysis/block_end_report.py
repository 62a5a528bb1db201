"""What `gpuobs stats` and `gpuobs info` say about block ends in a block_starts
recording: how each kernel's block ends are bounded (block_ends.py), what the
bounds are worth, and the warp-arrival accounting behind the slot bounds."""

from __future__ import annotations

import numpy as np

from ..recording_file.recording import Recording
from .block_ends import LABELS, SLOTS_INCOMPLETE, BlockEnds, EndBound, counts_by_launch

MEANING = (
    "block_starts records no block end: each block's end is an upper bound, the tightest of the next "
    "block starts in the hardware warp slots its warps held (slot), the first block of the next kernel "
    "on its stream (stream) and its flush window's quiet point (quiet); blocks with none (none) are "
    "drawn zero-length. Slot bounds measured on an H200 (kernels timing themselves, 3.6M warps): "
    "bound - true end p50 160 ns, p95 1.0 us, 98% within 2 us on a full-occupancy elementwise kernel; "
    "224 ns with one block per SM; p50 11 us where block durations are uneven (slots are reused late). "
    "See docs/benchmarks.md. Weak: bounds that may include host time (made by work the host enqueued after "
    "the block started, or a quiet point: a wait the tool made, a flush, an idle device); kernel spans "
    "that end at one are left out of the time summary."
)
QUALITIES = [EndBound.SLOT, EndBound.STREAM, EndBound.QUIET, EndBound.NONE]


def kernel_rows(rec: Recording, ends: BlockEnds, names: list) -> list[dict]:
    """Per kernel (device, name; names aligned with rec.launches): its block events,
    the share of them each bound gives the end of, and those flagged SLOTS_INCOMPLETE."""
    counts = counts_by_launch(rec, ends)
    groups: dict = {}
    for i, key in enumerate(zip(rec.launches["device_index"].tolist(), names)):
        groups.setdefault(key, []).append(i)
    rows = []
    for (device, name), members in groups.items():
        blocks = int(counts.blocks[members].sum())
        if blocks == 0:
            continue
        by_quality = counts.by_quality[members].sum(axis=0)
        row = {"device": device, "kernel": name, "blocks_bounded": blocks}
        for q in QUALITIES:
            row[f"{LABELS[q]}_pct"] = round(100.0 * int(by_quality[q]) / blocks, 1)
        row["weak_pct"] = round(100.0 * int(counts.weak[members].sum()) / blocks, 1)
        row["slots_incomplete"] = int(counts.slots_incomplete[members].sum())
        rows.append(row)
    rows.sort(key=lambda r: (-r["blocks_bounded"], r["kernel"]))
    return rows


def totals(rec: Recording, ends: BlockEnds) -> dict:
    """The recording's block ends by bound, and the warp-arrival accounting (block counts
    named blocks_*, as in every report: `weak` alone is the time summary's launches)."""
    t = rec.totals
    by_quality = np.bincount(ends.quality, minlength=len(EndBound))
    return {
        "blocks_bounded": int(len(ends.rows)),
        **{LABELS[q]: int(by_quality[q]) for q in QUALITIES},
        "blocks_weak": int(ends.weak.sum()) if ends.weak is not None else 0,
        "slots_incomplete": int(((rec.events["flags"][ends.rows] & SLOTS_INCOMPLETE) != 0).sum()),
        "warp_arrivals": t["warp_arrivals"],
        "warp_arrivals_dropped": t["warp_arrivals_dropped"],
        "unmatched_arrivals": t["unmatched_arrivals"],
        "meaning": MEANING,
    }


def bound_line(d: dict) -> str:
    """'N blocks: a% slot, b% stream, c% quiet, d% none; w% weak'."""
    n = d["blocks_bounded"] or 1
    shares = ", ".join(f"{100.0 * d[LABELS[q]] / n:.1f}% {LABELS[q]}" for q in QUALITIES)
    return f"{d['blocks_bounded']:,} blocks, ends bounded by: {shares}; {100.0 * d['blocks_weak'] / n:.1f}% weak"


def accounting_line(d: dict) -> str:
    return (
        f"warp arrivals {d['warp_arrivals']:,} attempted, {d['warp_arrivals_dropped']:,} dropped (buffer full), "
        f"{d['unmatched_arrivals']:,} unmatched (their block's record was not in the window); "
        f"{d['slots_incomplete']:,} blocks flagged SLOTS_INCOMPLETE (no slot bound)"
    )
