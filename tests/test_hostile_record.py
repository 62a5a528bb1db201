"""Two `gpuobs record -f` into one folder: the second is refused while the first
runs (it held the folder's lock), so neither sets aside, restores or deletes the
other's recordings, nor takes the other's live folder for a killed run's."""

import subprocess
import time

import pytest

from .cli_helpers import fake_toolchain, gpuobs, gpuobs_cmd, repo_env


@pytest.fixture(scope="module")
def toolchain(tmp_path_factory):
    from gpuobs.record.native_build import sanitizer_dirs

    if not sanitizer_dirs():
        pytest.skip("no sanitizer headers (the test extra installs them)")
    return fake_toolchain(tmp_path_factory.mktemp("lock"))


def test_a_second_record_into_a_busy_folder_is_refused(toolchain, tmp_path, tmp_path_factory):
    env = {**repo_env(), **toolchain}
    (tmp_path / "a.gpuobs").write_bytes(b"earlier a")
    # The first run's program records until the test releases it (once the second run was
    # refused), not for a fixed time a busy machine can spend starting the second.
    release = tmp_path_factory.mktemp("release") / "go"
    program = f'while [ ! -e "{release}" ]; do sleep 0.05; done; echo new > "$GPUOBS_OUTPUT"'
    first = subprocess.Popen(
        gpuobs_cmd("record", "-f", "-o", str(tmp_path / "a.gpuobs"), "--", "sh", "-c", program),
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".gpuobs-earlier-*")):  # the first run is recording
            assert first.poll() is None and time.monotonic() < deadline, "the first run never started"
            time.sleep(0.05)
        second = gpuobs("record", "-f", "-o", tmp_path / "b.gpuobs", "--", "true", cwd=tmp_path, env=env)
        assert second.returncode == 2 and "another `gpuobs record` is writing into" in second.stderr, second.stderr
        assert "killed" not in second.stderr  # the live run's folder is not taken for a killed run's
        release.touch()
        _, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and "killed" not in stderr, stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"a.gpuobs": b"new\n"}
    third = gpuobs("record", "-f", "-o", tmp_path / "b.gpuobs", "--", "true", cwd=tmp_path, env=env)
    assert third.returncode == 0, third.stderr  # free again once the first ended
