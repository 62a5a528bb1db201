"""The reader's overlap check measured a range of (device, SM) groups at a time (large
recordings) gives what it gives in one piece: the same depth and the same event."""

import numpy as np
import pytest

from gpuobs.recording_file import recording_checks as checks
from gpuobs.recording_file import schema


def _chunks(seed):
    rng = np.random.default_rng(seed)
    chunks, devices = [], []
    for device in (0, 0, 1):
        ev = np.zeros(3000, schema.EVENT_DTYPE)
        ev["kind"] = schema.EventKind.BLOCK
        ev["sm_id"] = rng.integers(0, 40, len(ev))
        ev["time_start"] = 10**12 + rng.integers(0, 200_000, len(ev))
        ev["time_end"] = ev["time_start"] + rng.integers(0, 20_000, len(ev))
        ev["flags"][rng.random(len(ev)) < 0.05] = schema.BLOCK_END_UNCONFIRMED
        ev["kind"][rng.random(len(ev)) < 0.1] = schema.EventKind.MEMORY
        chunks.append(ev)
        devices.append(device)
    return chunks, devices


@pytest.mark.parametrize("seed", range(4))
def test_batched_overlap_is_the_whole_one(seed, monkeypatch):
    chunks, devices = _chunks(seed)
    whole = checks.deepest_block_overlap(chunks, devices)
    monkeypatch.setattr(checks, "OVERLAP_BATCH", 700)  # ~13 ranges of whole groups
    assert checks.deepest_block_overlap(chunks, devices) == whole
    assert whole[0] > 5 and whole[1] >= 0
