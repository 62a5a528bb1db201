"""START:END ranges and durations, shared by `export` and `trim`."""

import subprocess
import sys

import pytest

from gpuobs.ranges import RangeError, parse_duration, parse_range


def test_ranges_and_durations_as_typed():
    assert parse_range("3:", "--launches") == (3, None)
    assert parse_range(":7", "--launches") == (None, 7)
    assert parse_range("2.5us:1ms", "--time-window", parse_duration) == (2_500, 1_000_000)
    assert parse_duration(" 4 s ") == 4_000_000_000 and parse_duration("0") == 0
    with pytest.raises(RangeError, match="time '12' has no unit: write 12ns, 12us, 12ms or 12s"):
        parse_duration("12")  # a bare number is never silently nanoseconds
    with pytest.raises(RangeError, match="'1ms:2.5us' is empty: END must be after START"):
        parse_range("1ms:2.5us", "--time-window", parse_duration)


@pytest.mark.parametrize(
    "text,parse,message",
    [
        ("5", int, "--x '5' must look like START:END"),
        ("1:b", int, "--x '1:b': invalid literal"),
        ("1 parsec:", parse_duration, "time '1 parsec' is not a number with a unit"),
    ],
)
def test_bad_ranges_say_which_option_and_what(text, parse, message):
    with pytest.raises(RangeError, match=message):
        parse_range(text, "--x", parse)


def test_trim_names_a_bad_flush_range(tmp_path, block_recording):
    out = tmp_path / "part.gpuobs"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuobs", "trim", str(block_recording), str(out), "--flushes", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--flushes '2' must look like START:END" in proc.stderr and not out.exists()
