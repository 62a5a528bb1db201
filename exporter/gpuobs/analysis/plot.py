"""`gpuobs plot`: an SM x time occupancy heatmap and per-kernel block-duration
histograms, because people would rather look than read. Needs matplotlib
(pip install 'gpuobs[plot]')."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import GpuobsError, SelectionError
from ..outputs import write_atomically
from ..recording_file import schema
from ..recording_file.recording import Recording
from . import block_ends, launches
from .kernel_names import slice_names


class PlotUnavailable(GpuobsError):
    """matplotlib is not installed."""


class NoBlockChosen(SelectionError):
    """The options chose no block record; the message names them."""


def occupancy(rec: Recording, device: int, bins: int = 400, keep: np.ndarray | None = None):
    """Busy fraction per (SM, time bin): summed block time in the bin over the bin width
    (above 1 when several blocks share the SM). `keep`: the events to draw (a selection's)."""
    ev = rec.events
    blocks = (ev["kind"] == schema.EventKind.BLOCK) & (rec.event_devices == device)
    if keep is not None:
        blocks &= keep
    start = ev["time_start"][blocks].astype(np.int64)
    end = np.maximum(ev["time_end"][blocks].astype(np.int64), start)
    if block_ends.is_block_starts(rec):  # no end recorded: to each end's upper bound (occupancy over-counted)
        bounds = block_ends.block_end_bounds(rec)
        end = bounds.end_bound_ns[bounds.at(np.flatnonzero(blocks))].astype(np.int64)
    sm = ev["sm_id"][blocks].astype(np.int64)
    if len(start) == 0:
        return None, 0, 0
    t0, t1 = int(start.min()), int(end.max()) + 1
    width = max(1, (t1 - t0) // bins)
    grid = np.zeros((int(sm.max()) + 1, bins + 1))
    first, last = (start - t0) // width, (end - t0) // width
    # each block adds its overlap with every bin it touches; blocks span few bins
    for k in range(int((last - first).max()) + 1):
        b = first + k
        live = b <= last
        lo = np.maximum(start[live], t0 + b[live] * width)
        hi = np.minimum(end[live], t0 + (b[live] + 1) * width)
        np.add.at(grid, (sm[live], np.minimum(b[live], bins)), np.maximum(hi - lo, 0) / width)
    return grid, t0, width


def blocks_chosen(rec: Recording, kernels=None, time=None, time_window=None) -> np.ndarray | None:
    """Per event: a block record to draw (None: all). The options' text, each with the one
    meaning its name has in every command (gpuobs.selection): --time, launches running in
    the window, whole (trim's); --time-window, blocks that start in it (export's).
    SelectionError for a bad option, NoBlockChosen when nothing is left."""
    from ..selection import Criteria, TimeMeaning, select

    if time and time_window:
        raise SelectionError("--time and --time-window are two meanings of a window: give one")
    if not (kernels or time or time_window):
        return None
    overlaps = bool(time)
    criteria = Criteria.parse(
        kernels=kernels,
        time=time or time_window,
        time_meaning=TimeMeaning.OVERLAPS if overlaps else TimeMeaning.STARTS_IN,
        time_option="--time" if overlaps else "--time-window",
    )
    keep = select(rec, criteria).events & (rec.events["kind"] == schema.EventKind.BLOCK)
    if not keep.any():
        raise NoBlockChosen(f"{criteria.describe()} keeps no block")
    return keep


def plot_paths(rec: Recording, out: Path) -> dict:
    """{device: image path} of the GPUs with block records: `out` itself for one GPU,
    `STEM.gpuN.SUFFIX` beside it for several."""
    ev = rec.events
    devices = sorted(set(rec.event_devices[ev["kind"] == schema.EventKind.BLOCK].tolist()))
    if len(devices) == 1:
        return {devices[0]: out}
    return {d: out.with_name(f"{out.stem}.gpu{d}{out.suffix}") for d in devices}


# A title placed at a fixed height: matplotlib otherwise measures every tick label of
# the axes at each draw to lift the title over them (there are none above these axes).
TITLE_Y = 1.0


def time_unit(span_ns: float) -> tuple:
    """(name, ns per unit) to show a span of this length in: ms from 2 ms on, else us."""
    return ("ms", 1e6) if span_ns >= 2e6 else ("us", 1e3)


def plot(
    rec: Recording, targets: dict, top: int = 6, inputs=(), force: bool = False, keep: np.ndarray | None = None
) -> list[Path]:
    """Draws each GPU of `targets` (plot_paths) into its file through gpuobs.outputs;
    `keep`: the events to draw (a selection's, gpuobs.selection), None for all."""
    try:
        # A Figure of its own, not pyplot: no backend switching and no global figure state
        # to import or to close again (benchmarks/plot_speed.py times the import).
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError as exc:
        raise PlotUnavailable("gpuobs plot needs matplotlib: pip install 'gpuobs[plot]'") from exc
    written = []
    of = launches.launch_index_of_events(rec)
    table = launches.launch_table(rec, of)
    stats = launches.kernel_stats(rec, of, table)  # one matching of events to launches, not two
    names = np.array(table.name, dtype=object)
    origin = int(rec.events["time_start"].min()) if len(rec.events) else 0  # as --time and `gpuobs info` count
    for device, path in targets.items():
        grid, t0, width = occupancy(rec, device, keep=keep)
        if grid is None:
            continue
        unit, per = time_unit(grid.shape[1] * width)
        fig = Figure(figsize=(16, 6))
        # Fixed margins, not tight_layout, which lays every text out once more to measure it
        # (0.2 s of the 2.5 s plot of the sample took); the labels fit these.
        fig.subplots_adjust(left=0.045, right=0.99, bottom=0.09, top=0.93, wspace=0.12)
        ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        im = ax1.imshow(
            grid,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            cmap="viridis",
            extent=((t0 - origin) / per, (t0 - origin + grid.shape[1] * width) / per, -0.5, grid.shape[0] - 0.5),
        )
        ax1.set_xlabel(f"device time since the recording's first event ({unit})")
        ax1.set_ylabel("SM")
        starts_only = block_ends.is_block_starts(rec)
        ax1.set_title(
            f"GPU {device} ({rec.device_name(device)}): resident blocks per SM"
            + (" (to upper bounds of block ends)" if starts_only else ""),
            y=TITLE_Y,
        )
        fig.colorbar(im, ax=ax1, label="blocks resident (time-averaged)")
        ev = rec.events
        ok = (of >= 0) & (ev["kind"] == schema.EventKind.BLOCK) & (rec.event_devices == device)
        if keep is not None:
            ok &= keep
        shown = [r for r in stats if r["device"] == device and r["block_ns_p50"]]
        if keep is not None:  # the busiest kernels of what is drawn
            drawn = set(names_of_events(names, of)[ok].tolist())
            shown = [r for r in shown if r["kernel"] in drawn]
        shown = shown[:top]
        for row, label in zip(shown, slice_names([r["kernel"] for r in shown], 56)):  # unique legend names
            mine = ok.copy()
            mine[ok] = names[of[ok]] == row["kernel"]
            dur = (ev["time_end"][mine].astype(np.int64) - ev["time_start"][mine].astype(np.int64)) / 1e3
            ax2.hist(dur, bins=60, histtype="step", label=f"{label} ({len(dur):,})")
        ax2.set_xlabel("block duration (us)")
        ax2.set_ylabel("blocks")
        ax2.set_yscale("log")
        # 1, 10, 1,000 rather than the log axis's 10^n, which matplotlib typesets with its
        # mathtext parser (about 0.1 s on the sample, for three labels).
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax2.set_title(
            "block durations, busiest kernels" + (": none (block_starts records no end)" if starts_only else ""),
            y=TITLE_Y,
        )
        if ax2.get_legend_handles_labels()[0]:
            ax2.legend(fontsize=7)
        with write_atomically(path, inputs, force) as fh:
            fig.savefig(fh, dpi=110, format=path.suffix.lstrip(".").lower())
        written.append(path)
    return written


def names_of_events(names: np.ndarray, of: np.ndarray) -> np.ndarray:
    """Each event's kernel name (None where it belongs to no launch)."""
    out = np.full(len(of), None, dtype=object)
    out[of >= 0] = names[of[of >= 0]]
    return out
