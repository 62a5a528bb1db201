"""`gpuobs record`: run a program with the tool injected, exit code unchanged."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import tempfile
from dataclasses import field, make_dataclass
from pathlib import Path

from ..errors import GpuobsError
from ..recording_file import schema
from ..recording_file.fileformat import NotARecording, recording_pid
from .native_build import NativeBuild
from .options import OPTIONS

DEFAULT_OUTPUT = OPTIONS["output"].fallback

# A field per record option (schemas/gpuobs_record_options.h: name, type and default),
# and the variables to set beside them (extra_env).
RecordOptions = make_dataclass(
    "RecordOptions",
    [(o.name, o.python_type, field(default=o.default)) for o in OPTIONS.values()]
    + [("extra_env", dict, field(default_factory=dict))],
)
RecordOptions.__module__ = __name__


def tool_environment(build: NativeBuild, opts: RecordOptions, base: dict | None = None) -> dict:
    """The environment that makes a process record itself."""
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{build.tool}:{preload}" if preload else str(build.tool)
    # A second way in, for children whose environment loses LD_PRELOAD (frameworks set
    # their own): the driver loads this library at cuInit and the tool starts there,
    # once per process however it came in. One set already (another injected tool) stays.
    env.setdefault("CUDA_INJECTION64_PATH", str(build.tool))
    env.update({o.env: o.env_text(getattr(opts, o.name)) for o in OPTIONS.values()})
    env.update(
        {
            "GPUOBS_PATCHES": str(build.patches),
            "GPUOBS_PROBE": str(build.probe),
            "GPUOBS_SANITIZER_LIB": str(build.sanitizer_lib),
        }
    )
    env.update(opts.extra_env)
    return env


def child_recordings(output: Path) -> list[Path]:
    """`<stem>.<pid><suffix>` files beside the output that child processes of a run
    wrote: told by content, not by name. A child's file holds its own pid, the one in
    its name, which is not the main recording's; a trimmed copy named `gpuobs.2.gpuobs`
    holds the pid of the run it was cut from, and is not a child's."""
    output = Path(output)
    try:
        parent = recording_pid(output) if os.path.lexists(output) else None
    except NotARecording:
        parent = None
    found = []
    for p in sorted(output.parent.glob(f"{output.stem}.*{output.suffix}")):
        middle = p.name[len(output.stem) + 1 : len(p.name) - len(output.suffix)]
        if not (middle.isdigit() and middle.isascii()):
            continue
        try:
            pid = recording_pid(p)
        except NotARecording:
            continue  # not a recording: nothing a run wrote
        if pid is None or (pid == int(middle) and pid != parent):  # None: the child ended before its RUN chunk
            found.append(p)
    return found


def outputs_of_run(output: Path, since: float) -> list[Path]:
    """The main recording and those of child processes (`<stem>.<pid>.gpuobs`)."""
    output = Path(output)
    found = [output] if output.exists() else []
    return found + [p for p in child_recordings(output) if p.stat().st_mtime >= since - 1]


class FolderBusy(GpuobsError):
    pass


def lock_output_folder(folder: Path) -> int | None:
    """Takes the folder's lock for this run (released when gpuobs exits, however it
    exits): two runs into one folder would set aside, restore or delete each other's
    recordings. Raises FolderBusy while another `gpuobs record` holds it; None where
    the folder cannot be opened (the caller's checks say why)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # not inherited: the program holds nothing
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderBusy(
            f"another `gpuobs record` is writing into {folder}; wait for it to finish, or record elsewhere with -o"
        ) from None
    except OSError:  # a file system without locks: nothing to coordinate with
        os.close(fd)
        return None
    return fd


class EarlierRecordings:
    """An earlier run's recordings, moved into a hidden folder beside them while a
    new run records, so that -f replaces them only with something: `keep()` puts
    them back (the new run wrote nothing), `discard()` deletes them. Moves are
    renames within one folder: a link moves as a link, never its target."""

    def __init__(self, paths: list[Path]):
        self.moved: list[tuple[Path, Path]] = []
        self.folder = Path(tempfile.mkdtemp(prefix=".gpuobs-earlier-", dir=paths[0].parent)) if paths else None
        try:
            for path in paths:
                aside = self.folder / path.name
                os.rename(path, aside)
                self.moved.append((path, aside))
        except OSError:
            self.keep()
            raise

    @staticmethod
    def left_by_killed_runs(folder: Path) -> list[Path]:
        """Folders of recordings that a run killed outright (SIGKILL) moved aside and never settled."""
        return sorted(p for p in Path(folder).glob(".gpuobs-earlier-*") if p.is_dir())

    def keep(self) -> list[Path]:
        """Puts the recordings back where nothing new took their name; returns those put back."""
        back = []
        for path, aside in self.moved:
            if not os.path.lexists(path):
                os.rename(aside, path)
                back.append(path)
        self._clear()
        return back

    def discard(self) -> None:
        self._clear()

    def _clear(self) -> None:
        for _, aside in self.moved:
            if os.path.lexists(aside):
                aside.unlink()
        self.moved = []
        if self.folder is not None:
            self.folder.rmdir()
            self.folder = None


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal or ssh went away


def run_recorded(cmd: list[str], env: dict, started=None) -> int:
    """Runs cmd; returns its exit code (128+N for signal N). `started()`, where given,
    is called once the program is spawned (threads start there, not before the fork).

    The program runs in a process group of its own, so each signal reaches it once:
    the terminal's keys (Ctrl-C, Ctrl-\\, Ctrl-Z) go to the foreground group, which is
    the program's while it runs, and gpuobs passes on only what was sent to gpuobs
    itself or to its group (kill PID, kill -- -PGID), which the program is no longer
    in. Sharing gpuobs's group, it got a group's signal directly and again from us.
    gpuobs itself outlives the signal and still settles the recording."""
    tty = _terminal()
    hand_over = tty is not None and _foreground(tty) == os.getpgrp()
    state = {"proc": None, "pending": [], "done": False, "foreground": hand_over}

    def forward(signum, _frame):
        if state["proc"] is None:
            state["pending"].append(signum)  # the program does not exist yet: sent once it does
        elif not state["done"] and not (signum == signal.SIGHUP and _kernel_hangs_up(tty, state["foreground"])):
            _signal_program(state["proc"], signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    proc = None
    try:
        # The child joins its own group (and takes the terminal) before exec, so the
        # program never runs where a terminal key or a group kill reaches it twice.
        proc = subprocess.Popen(cmd, env=env, preexec_fn=_own_group_and_terminal(tty if hand_over else None))
        state["proc"] = proc
        if started is not None:
            try:
                started()
            except Exception:  # what runs beside the program must not leave it unwaited
                pass
        for signum in state["pending"]:
            _signal_program(proc, signum)
        status = _wait(proc.pid, job_control=tty is not None, tty=tty, state=state)
        state["done"] = True
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        state["done"] = True
        if proc is not None and hand_over and _foreground(tty) == proc.pid:
            _give_terminal(tty, os.getpgrp())
        for sig, old in previous.items():
            signal.signal(sig, old)
    code = proc.returncode
    return 128 - code if code < 0 else code


def _terminal() -> int | None:
    """A descriptor of gpuobs's controlling terminal (stdin, stdout or stderr), if it has one."""
    for fd in (0, 1, 2):
        if os.isatty(fd) and _foreground(fd) is not None:
            return fd
    return None


def _foreground(fd: int) -> int | None:
    try:
        return os.tcgetpgrp(fd)
    except OSError:  # not our controlling terminal, or it hung up
        return None


def _kernel_hangs_up(tty: int | None, program_in_foreground: bool) -> bool:
    """Whether a SIGHUP is the hang-up of the terminal the program holds, which the
    kernel delivers to the program itself: it tells the session's leader (a shell,
    which passes it to its jobs: gpuobs's group) and, when that leader exits, the
    group that had the terminal's foreground, the program's. Passed on as well, it
    reached the program twice. Where gpuobs leads the session, it alone is told."""
    return tty is not None and program_in_foreground and _foreground(tty) is None and os.getsid(0) != os.getpid()


def _give_terminal(fd: int, pgrp: int) -> None:
    """Makes pgrp the terminal's foreground group; SIGTTOU, which a background caller
    would get for asking, is blocked meanwhile."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(fd, pgrp)
    except OSError:
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _own_group_and_terminal(tty: int | None):
    def in_child():
        os.setpgid(0, 0)
        if tty is not None:
            _give_terminal(tty, os.getpid())

    return in_child


def _signal_program(proc: subprocess.Popen, signum: int) -> None:
    """What a terminal would do: the signal to the program's group (its children too);
    to the program alone if it has left that group."""
    try:
        os.killpg(proc.pid, signum)
    except OSError:
        try:
            os.kill(proc.pid, signum)
        except OSError:
            pass  # already gone


def _wait(pid: int, job_control: bool, tty: int | None, state: dict) -> int:
    """The program's wait status. Under a terminal, a stop of the program (Ctrl-Z,
    or reading the terminal from the background) stops gpuobs's group too, so the
    shell sees its job stopped; `fg`/`bg` continue the program (state["foreground"]:
    whether it holds the terminal)."""
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED if job_control else 0)
        if not os.WIFSTOPPED(status):
            return status
        if tty is not None and _foreground(tty) == pid:
            _give_terminal(tty, os.getpgrp())
        state["foreground"] = False
        os.killpg(os.getpgrp(), signal.SIGTSTP)  # returns once the shell continues us
        if tty is not None and _foreground(tty) == os.getpgrp():
            _give_terminal(tty, pid)
            state["foreground"] = True
        try:
            os.killpg(pid, signal.SIGCONT)
        except OSError:
            os.kill(pid, signal.SIGCONT)


def mode_names() -> list[str]:
    return [m.name.lower() for m in schema.Mode]
