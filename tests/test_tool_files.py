"""The host tool's recording file (tool/recording_file.cpp), compiled with the host
compiler: its per-process fallback name `<stem>.<pid>.gpuobs` is created
exclusively, like the main name, so a link planted there never redirects the
write, and an existing file there is never truncated."""

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("target", ["an existing file", "a missing file"])
def test_a_link_planted_at_the_fallback_name_is_not_followed(tmp_path, writer, target):
    out = tmp_path / "run.gpuobs"
    out.write_bytes(b"the main recording, owned by another process")  # so this process falls back
    victim = tmp_path / "victim.txt"
    if target == "an existing file":
        victim.write_text("precious")
    proc = subprocess.run([str(writer), str(out), str(victim)], capture_output=True, text=True)
    assert proc.returncode == 1 and "it exists (a file or link left there; it is not replaced)" in proc.stderr
    if target == "an existing file":
        assert victim.read_text() == "precious"  # before: truncated, then written through the link
    else:
        assert not victim.exists()
    assert out.read_bytes() == b"the main recording, owned by another process"
