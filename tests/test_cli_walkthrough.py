"""A walk through every command and every option on the shipped samples, as a user
would take it: no run may print a traceback, and no option may be a silent no-op.
An option acts when its run differs from the same run without it (exit status,
output, or the file written), or when it says why it cannot (a `gpuobs:` line).
The walk must name every option the CLI has: a new option fails this test until
it is walked. `record` runs `env` under a stand-in build (no GPU here): each of
its options must reach the tool's environment."""

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .cli_helpers import DATA, copy_as_process, fake_toolchain, gpuobs, repo_env

BLOCK = str(DATA / "decode_block_trace.gpuobs")
MEM = str(DATA / "decode_mem_sampled.gpuobs")
Q = "select count(*) as n from blocks"
SIDE = str(DATA / "side_by_side_api_trace.gpuobs")
PROFILER = str(DATA / "side_by_side_profiler.json")


# --open waits for a fetch: test_cli_export.test_export_open_serves_the_trace_to_the_ui_once walks it
# Options whose effect the walk cannot show from a fresh folder, each tested where named.
WALKED_APART = {
    "export --open",
    "query --refresh",  # a cache must exist first: test_query.py::test_refresh_exports_the_tables_again
}


@dataclass
class Case:
    args: list  # gpuobs ARGS; {dir} is the run's own folder, {trace} a ready trace
    baseline: list | None = None  # the same run without the option; None: `expect` proves the effect
    rc: int = 0
    expect: str = ""  # text the run must print (stdout or stderr)
    output: str | None = None  # the file the run writes (in {dir}), compared with the baseline's
    setup: dict = field(default_factory=dict)  # files to put in {dir} first: name -> source path or bytes
    env: dict = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(fake_browser: str) -> list:
    ex = ["export", BLOCK, "-o", "{dir}/t.pftrace"]
    st = ["stats", BLOCK]
    tr = ["trim", BLOCK, "-o", "{dir}/t.gpuobs"]
    rec = ["record", "-o", "{dir}/r.gpuobs"]

    def port():
        return str(_free_port())

    return [
        # top level
        Case(["--version"], expect="0.1.0"),
        Case(["-V"], expect="0.1.0"),
        Case(["version"], expect="0.1.0"),
        Case(["-h"], expect="Commands:"),
        *[
            Case([c, "-h"], expect="Usage: ")
            for c in ("record", "info", "stats", "export", "open", "plot", "trim", "build", "version")
        ],
        # info
        Case(["info", BLOCK], expect="device span     0..87.123 ms"),
        Case(["info", BLOCK, MEM], ["info", BLOCK], expect="mode            mem_sampled"),
        Case(["info", BLOCK, "--json"], ["info", BLOCK], expect='"device_span_ns": 87122752'),
        Case(["info", BLOCK, "--format", "json"], ["info", BLOCK], expect='"device_span_ns": 87122752'),
        Case(["info", BLOCK, "--format", "csv"], rc=2, expect="is not table or json"),
        Case(
            ["info", "{dir}/d.gpuobs", "--salvage"],
            ["info", "{dir}/d.gpuobs"],
            expect="damaged at byte",
            setup={"d.gpuobs": Path(BLOCK).read_bytes()[:-100]},
        ),
        Case(["info", "{dir}"], rc=2, expect="cannot read {dir}: a folder, not a regular file"),
        Case(["info", "{dir}/gone.gpuobs"], rc=2, expect="no recording at"),
        Case(["info", PROFILER], rc=2, expect="it looks like JSON"),
        # stats
        Case(st, expect="Kernel time summary"),
        Case(st + ["--report", "blocks"], st),
        Case(st + ["-r", "kernels"], st),
        Case(st + ["-r", "all"], st + ["-r", "kernels"]),
        Case(st + ["--sort", "max", "-r", "kernels"], st + ["-r", "kernels"]),
        Case(st + ["-s", "p99", "-r", "blocks"], st + ["-r", "blocks"]),
        Case(st + ["--sort", "p99"], st, expect="the first 30 by p99 shown"),  # both reports: the blocks' key
        Case(st + ["--sort", "p99", "-r", "kernels"], rc=2, expect="--sort 'p99' is not one of"),
        Case(st + ["--format", "csv"], st),
        Case(st + ["--format", "json"], st),
        Case(st + ["--json"], st),
        Case(st + ["--format", "xml"], rc=2, expect="is not table, csv or json"),
        Case(st + ["--top", "3"], st),
        Case(st + ["--top", "0"], rc=2, expect="give 1 or more rows"),
        Case(["stats", MEM, "-r", "kernels"], expect="Mode mem_sampled records no block start or end times"),
        Case(
            ["stats", "{dir}/d.gpuobs", "--salvage"],
            ["stats", "{dir}/d.gpuobs"],
            setup={"d.gpuobs": Path(BLOCK).read_bytes()[:-100]},
        ),
        Case(["stats", BLOCK, MEM, "--json"], st + ["--json"]),
        # export
        Case(ex, output="t.pftrace", expect="28,662 block slices"),
        Case(ex, rc=2, expect="exists; pass -f/--force", setup={"t.pftrace": b"old"}),
        Case(ex + ["-f"], ex, output="t.pftrace", setup={"t.pftrace": b"old"}),
        Case(ex + ["--force"], ex, output="t.pftrace", setup={"t.pftrace": b"old"}),
        Case(["export", BLOCK, "--output", "{dir}/t.pftrace"], expect="{dir}/t.pftrace: 2.2 MB"),
        Case(["export", BLOCK], expect="decode_block_trace.pftrace: 2.2 MB"),  # the default name, here
        Case(["export", "-i", BLOCK, "{dir}/t.pftrace"], expect="is deprecated"),
        Case(["export", "--input", BLOCK, "-o", "{dir}/t.pftrace"], expect="is deprecated"),
        Case(["export", BLOCK, MEM, "-o", "{dir}/t.pftrace"], ex, output="t.pftrace"),
        Case(ex + ["--kernels", "nvjet"], ex, output="t.pftrace"),
        Case(ex + ["--kernels", "nothing_matches"], rc=2, expect="selects none of the"),
        Case(ex + ["--launches", "1000:1100"], ex, output="t.pftrace"),
        Case(ex + ["--launches", "1:100"], rc=2, expect="launch ids 905..2386"),
        Case(ex + ["--time-window", "16ms:19ms"], ex, output="t.pftrace"),
        Case(ex + ["--time-window", "5s:"], rc=2, expect="excludes everything"),
        Case(ex + ["--time-window", "5:"], rc=2, expect="has no unit"),
        Case(ex + ["--clock", "device"], ex, output="t.pftrace"),
        Case(ex + ["--clock", "auto"], expect="clock: measured"),
        Case(ex + ["--clock", "host"], rc=2, expect="is not auto or device"),
        Case(ex + ["--samples"], expect="--samples: no memory samples to write"),
        Case(
            ["export", MEM, "-o", "{dir}/t.pftrace", "--samples"],
            ["export", MEM, "-o", "{dir}/t.pftrace"],
            output="t.pftrace",
        ),
        Case(ex + ["--no-block-args"], ex, output="t.pftrace"),
        Case(ex + ["--block-args"], expect="28,662 block"),
        Case(
            ["export", "{dir}/d.gpuobs", "-o", "{dir}/t.pftrace", "--salvage"],
            ["export", "{dir}/d.gpuobs", "-o", "{dir}/t.pftrace"],
            setup={"d.gpuobs": Path(BLOCK).read_bytes()[:-100]},
        ),
        Case(
            ["export", SIDE, "--host", PROFILER, "-o", "{dir}/t.pftrace"],
            ["export", SIDE, "-o", "{dir}/t.pftrace"],
            output="t.pftrace",
            expect="42 of 42 kernels matched",
        ),
        Case(
            ["export", SIDE, "--host", PROFILER, "--align", "kernels", "-o", "{dir}/t.pftrace"],
            ["export", SIDE, "--host", PROFILER, "-o", "{dir}/t.pftrace"],
            output="t.pftrace",
            expect="shifted",
        ),
        Case(ex + ["--align", "kernels"], rc=2, expect="pass --host FILE"),
        Case(["export", SIDE, "--host", PROFILER, "--archive"], expect="side_by_side_api_trace.zip: "),
        Case(
            ["export", SIDE, "--host", PROFILER, "--archive", "-o", "{dir}/t.pftrace"],
            rc=2,
            expect="--archive writes a ZIP",
        ),
        Case(ex + ["--archive"], rc=2, expect="pass at least one --host"),
        # open (the served file is never fetched here: test_open_trace has the real UI fetch it)
        Case(
            ["open", "{trace}", "--no-browser", "--timeout", "1", "--port", port()],
            rc=1,
            expect="did not fetch {trace} within 1 s",
        ),
        Case(["open", "{trace}", "--no-browser", "--timeout", "1", "--port", "PORT"], rc=1, expect="127.0.0.1:PORT/"),
        Case(
            [
                "open",
                "{trace}",
                "--no-browser",
                "--timeout",
                "1",
                "--port",
                port(),
                "--ui-url",
                "http://127.0.0.1:1/ui/index.html",
            ],
            rc=1,
            expect="http://127.0.0.1:1/ui/index.html#!/?url=",
        ),
        Case(
            ["open", "{trace}", "--browser", "--timeout", "1", "--port", port()],
            rc=1,
            expect="opened https://",
            env={"BROWSER": f"{fake_browser} %s"},
        ),
        Case(["open", "{trace}", "--port", "0"], rc=2, expect="--port 0 is outside"),
        Case(["open", BLOCK], rc=2, expect="is a recording: export it first"),
        # plot
        Case(["plot", BLOCK, "-o", "{dir}/p.png"], output="p.png", expect="wrote"),
        Case(["plot", BLOCK, "--output", "{dir}/p.svg"], expect="p.svg"),
        Case(
            ["plot", BLOCK, "-o", "{dir}/p.png", "--time", "10ms:20ms"],
            ["plot", BLOCK, "-o", "{dir}/p.png"],
            output="p.png",
        ),
        Case(["plot", BLOCK, "-o", "{dir}/p.png", "--time", "1s:2s"], rc=2, expect="keeps no block"),
        Case(  # blocks that start in the window, not whole launches running in it
            ["plot", BLOCK, "-o", "{dir}/p.png", "--time-window", "11ms:11.5ms"],
            ["plot", BLOCK, "-o", "{dir}/p.png", "--time", "11ms:11.5ms"],
            output="p.png",
        ),
        Case(
            ["plot", BLOCK, "-o", "{dir}/p.png", "--time", "1ms:2ms", "--time-window", "1ms:2ms"],
            rc=2,
            expect="two meanings of a window",
        ),
        Case(
            ["plot", BLOCK, "-o", "{dir}/p.png", "--kernels", "nvjet"],
            ["plot", BLOCK, "-o", "{dir}/p.png"],
            output="p.png",
        ),
        Case(["plot", BLOCK, "-o", "{dir}/p.png"], rc=2, expect="exists", setup={"p.png": b"old"}),
        Case(["plot", BLOCK, "-o", "{dir}/p.png", "-f"], expect="wrote", setup={"p.png": b"old"}),
        Case(["plot", BLOCK, "-o", "{dir}/p.png", "--force"], expect="wrote", setup={"p.png": b"old"}),
        Case(
            ["plot", "{dir}/d.gpuobs", "-o", "{dir}/p.png", "--salvage"],
            ["plot", "{dir}/d.gpuobs", "-o", "{dir}/p.png"],
            setup={"d.gpuobs": Path(BLOCK).read_bytes()[:-100]},
        ),
        Case(["plot", BLOCK, "-o", "{dir}/p.txt"], rc=2, expect="name it .png, .svg or .pdf"),
        Case(["plot", MEM, "-o", "{dir}/p.png"], rc=2, expect="holds no block records"),
        # trim
        Case(tr + ["--flushes", "1:2"], output="t.gpuobs", expect="296 launches"),
        Case(tr + ["--time", "16ms:19ms"], output="t.gpuobs", expect="296 launches"),
        Case(tr + ["--kernels", "nvjet"], output="t.gpuobs", expect="145 launches"),
        Case(tr + ["--flushes", "5:"], rc=2, expect="keeps nothing"),
        Case(tr, rc=2, expect="nothing to trim by"),
        Case(tr + ["--flushes", "0:1"], rc=2, expect="exists", setup={"t.gpuobs": b"old"}),
        Case(tr + ["--flushes", "0:1", "-f"], output="t.gpuobs", setup={"t.gpuobs": b"old"}, expect="298 launches"),
        Case(tr + ["--flushes", "0:1", "--force"], setup={"t.gpuobs": b"old"}, expect="298 launches"),
        Case(["trim", BLOCK, "--output", "{dir}/t.gpuobs", "--flushes", "0:1"], expect="298 launches"),
        Case(["trim", BLOCK, "{dir}/t.gpuobs", "--flushes", "0:1"], expect="is deprecated"),
        Case(
            ["trim", "{dir}/d.gpuobs", "-o", "{dir}/t.gpuobs", "--flushes", "0:1", "--salvage"],
            ["trim", "{dir}/d.gpuobs", "-o", "{dir}/t.gpuobs", "--flushes", "0:1"],
            setup={"d.gpuobs": Path(BLOCK).read_bytes()[:-100]},
        ),
        # record: each option reaches the tool (the program is `env`)
        Case(rec + ["--", "env"], expect="GPUOBS_MODE=block_trace\n"),
        Case(rec + ["--", "env"], expect="GPUOBS_GRAPH_NODES=learn\n"),
        Case(rec + ["--mode", "mem_sampled", "--", "env"], expect="GPUOBS_MODE=mem_sampled"),
        Case(rec + ["-m", "block_counter", "--", "env"], expect="GPUOBS_MODE=block_counter"),
        Case(rec + ["--mode", "warp", "--", "env"], rc=2, expect="is not one of"),
        Case(rec + ["--sample-shift", "4", "--", "env"], expect="GPUOBS_SAMPLE_SHIFT=4"),
        Case(rec + ["--capacity", "4096", "--", "env"], expect="GPUOBS_CAPACITY=4096"),
        Case(rec + ["--", "env"], expect="GPUOBS_CAPACITY=0\n"),
        Case(rec + ["--capacity", "100", "--", "env"], rc=2, expect="--capacity 100 is outside"),
        Case(rec + ["--device-memory", "1024", "--", "env"], expect="GPUOBS_DEVICE_MEMORY_MIB=1024"),
        Case(rec + ["--device-memory", "8", "--", "env"], rc=2, expect="--device-memory 8 MiB is outside"),
        Case(rec + ["--kernels", "nvjet", "--", "env"], expect="GPUOBS_KERNELS=nvjet"),
        Case(["record", "--output", "{dir}/other.gpuobs", "--", "env"], expect="other.gpuobs"),
        Case(rec + ["--scope", "launch", "--", "env"], expect="GPUOBS_CALLBACK_SCOPE=launch"),
        Case(rec + ["--api-trace", "--", "env"], expect="GPUOBS_API_TRACE=1"),
        Case(rec + ["--graph-nodes", "every", "--", "env"], expect="GPUOBS_GRAPH_NODES=every"),
        Case(rec + ["--graph-nodes", "none", "--", "env"], expect="GPUOBS_GRAPH_NODES=none"),
        Case(rec + ["--graph-nodes", "some", "--", "env"], rc=2, expect="is not learn, every or none"),
        Case(rec + ["--no-graph-nodes", "--", "env"], expect="--no-graph-nodes is deprecated"),
        Case(rec + ["--paused", "--", "env"], expect="GPUOBS_START_PAUSED=1"),
        Case(rec + ["--window-every", "4", "--", "env"], expect="GPUOBS_WINDOW_EVERY=4"),
        Case(rec + ["--lossless", "--", "env"], expect="GPUOBS_LOSSLESS=1"),
        Case(rec + ["--budget", "200", "--", "env"], expect="GPUOBS_BUDGET_MBPS=200"),
        Case(rec + ["--", "env"], expect="GPUOBS_PACK_METADATA=zlib\n"),
        Case(rec + ["--pack-metadata", "none", "--", "env"], expect="GPUOBS_PACK_METADATA=none"),
        Case(rec + ["--pack-metadata", "lz4", "--", "env"], rc=2, expect="is not zlib or none"),
        Case(rec + ["--budget", "-1", "--", "env"], rc=2, expect="--budget"),
        Case(rec + ["--duty", "50ms/5s", "--", "env"], expect="GPUOBS_DUTY=50000000/5000000000"),
        Case(rec + ["--duty", "50ms", "--", "env"], rc=2, expect="--duty 50ms is not ON/PERIOD"),
        Case(rec + ["--duty", "50ms/5s", "--window-every", "4", "--", "env"], rc=2, expect="two ways to turn"),
        Case(rec + ["--", "env"], rc=2, expect="exist(s) from an earlier run", setup={"r.gpuobs": b"old"}),
        Case(rec + ["-f", "--", "env"], expect="GPUOBS_OUTPUT=", setup={"r.gpuobs": b"old"}),
        Case(rec + ["--force", "--", "env"], expect="GPUOBS_OUTPUT=", setup={"r.gpuobs": b"old"}),
        Case(rec + ["--", "no-such-program-here"], rc=127, expect="no-such-program-here: command not found"),
        # export --format parquet, diff, metrics, query (issue 35)
        Case(["query", "{dir}/r.gpuobs", Q], expect="28662", setup={"r.gpuobs": BLOCK}),
        Case(
            ["query", "{dir}/r.gpuobs", Q, "--format", "csv"], ["query", "{dir}/r.gpuobs", Q], setup={"r.gpuobs": BLOCK}
        ),
        Case(["query", "{dir}/r.gpuobs", Q, "--format", "json"], expect='"n": 28662', setup={"r.gpuobs": BLOCK}),
        Case(
            ["query", "{dir}/r.gpuobs", Q, "--format", "xml"],
            rc=2,
            expect="is not table, csv or json",
            setup={"r.gpuobs": BLOCK},
        ),
        Case(["query", "{dir}/r.gpuobs", Q, "--cache", "{dir}/c"], expect="to {dir}/c/", setup={"r.gpuobs": BLOCK}),
        Case(["export", BLOCK, "--format", "parquet", "-o", "{dir}/t.parquet"], expect="28,662 blocks"),
        Case(["export", BLOCK, "--format", "xml", "-o", "{dir}/t.parquet"], rc=2, expect="is not perfetto or parquet"),
        Case(["diff", BLOCK, BLOCK], expect="1.00x"),
        Case(["diff", BLOCK, MEM, "--format", "csv"], ["diff", BLOCK, MEM]),
        Case(["diff", BLOCK, MEM, "--json"], ["diff", BLOCK, MEM]),
        Case(["diff", BLOCK, MEM, "--top", "2"], ["diff", BLOCK, MEM]),
        Case(["diff", BLOCK, BLOCK, "--salvage"], expect="1.00x"),
        Case(["metrics", BLOCK, "--once"], expect="gpuobs_kernel_launches_total"),
        Case(["metrics", BLOCK, "--once", "--top", "2"], ["metrics", BLOCK, "--once"]),
        Case(["metrics", BLOCK, "--port", "PORT", "--interval", "0"], rc=2, expect="give a time above 0"),
        Case(["metrics", BLOCK, "--address", "256.0.0.1", "--port", "PORT"], rc=2, expect="cannot serve on 256.0.0.1"),
        # build (the stand-in toolchain compiles in no time)
        Case(["build", "-f"], expect="compiling the host tool"),
        Case(["build", "--force"], expect="compiling the device patches"),
    ]


@pytest.fixture(scope="module")
def walk_env(tmp_path_factory):
    """A stand-in nvcc and C++ compiler on PATH, a build cache, a fake browser, a ready trace."""
    from gpuobs.record.native_build import sanitizer_dirs

    if not sanitizer_dirs():
        pytest.skip("no sanitizer headers (the test extra installs them)")
    root = tmp_path_factory.mktemp("walk")
    browser = root / "browser.sh"
    browser.write_text("#!/bin/sh\nexit 0\n")
    browser.chmod(0o755)
    env = {**fake_toolchain(root), "DISPLAY": "", "WAYLAND_DISPLAY": "", "BROWSER": ""}
    trace = root / "ready.pftrace"
    assert gpuobs("export", BLOCK, "-o", trace).returncode == 0
    return env, str(browser), str(trace), root


def _run(case_args, folder: Path, env: dict, setup: dict, trace: str):
    folder.mkdir()
    for name, content in setup.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else Path(content).read_bytes())
    port = str(_free_port())
    args = [a.replace("{dir}", str(folder)).replace("{trace}", trace).replace("PORT", port) for a in case_args]
    r = gpuobs(*args, cwd=folder, env={**repo_env(), **env}, timeout=300)
    said = (r.stdout + r.stderr).replace(str(folder), "{dir}").replace(trace, "{trace}").replace(port, "PORT")
    return r.returncode, said, r.stdout.replace(str(folder), "{dir}"), r.stderr


def test_every_command_and_option_acts_or_says_why_not(walk_env, tmp_path):
    env, browser, trace, _root = walk_env
    walk = cases(browser)
    for case in walk:
        case.env = {**env, **case.env}

    def one(item):
        i, case = item
        got = _run(case.args, tmp_path / f"case{i}", case.env, case.setup, trace)
        base = _run(case.baseline, tmp_path / f"base{i}", case.env, case.setup, trace) if case.baseline else None
        return i, case, got, base

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, enumerate(walk)))
    problems = []
    for i, case, (rc, said, stdout, stderr), base in results:
        where = f"gpuobs {' '.join(case.args)}"
        if "Traceback" in said or "internal error" in said:
            problems.append(f"{where}: a traceback:\n{said}")
            continue
        if rc != case.rc:
            problems.append(f"{where}: exit {rc}, expected {case.rc}:\n{said}")
        if case.expect and case.expect not in said:
            problems.append(f"{where}: does not say {case.expect!r}:\n{said}")
        if base is not None:
            written = (tmp_path / f"case{i}" / case.output) if case.output else None
            base_written = (tmp_path / f"base{i}" / case.output) if case.output else None
            same_file = written is None or (
                written.exists() and base_written.exists() and written.read_bytes() == base_written.read_bytes()
            )
            warned = "gpuobs: warning:" in stderr
            if rc == base[0] and stdout == base[2] and same_file and not warned:
                problems.append(f"{where}: a silent no-op (same exit, output and file as without the option)")
    assert not problems, "\n\n".join(problems)


def test_the_walk_names_every_option(walk_env):
    import typer.main

    from gpuobs.cli import app

    group = typer.main.get_command(app)
    walk = cases(walk_env[1])
    missing = [opt for opt in group.params[0].opts if not any(c.args[:1] == [opt] for c in walk)]
    for name, command in group.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                for opt in param.opts + list(getattr(param, "secondary_opts", [])):
                    if not any(c.args[:1] == [name] and opt in c.args for c in walk):
                        missing.append(f"{name} {opt}")
    missing = [m for m in missing if m not in WALKED_APART]
    assert missing == [], f"options the walk never takes: {missing}"


def test_record_replaces_earlier_recordings_only_with_new_ones(walk_env, tmp_path):
    """-f moves an earlier run's recordings aside while the program runs: they come back
    when it writes none, and go when it writes one (here the program writes the file)."""
    env = {**repo_env(), **walk_env[0]}
    copy_as_process(DATA / "decode_block_trace.gpuobs", tmp_path / "r.77.gpuobs", 77)  # an earlier run's child
    old = {"r.gpuobs": b"old", "r.77.gpuobs": (tmp_path / "r.77.gpuobs").read_bytes()}
    for name, content in old.items():
        (tmp_path / name).write_bytes(content)
    r = gpuobs("record", "-o", tmp_path / "r.gpuobs", "-f", "--", "true", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "kept the earlier" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old  # nothing lost, no folder left
    r = gpuobs(
        "record",
        "-o",
        tmp_path / "r.gpuobs",
        "-f",
        "--",
        "sh",
        "-c",
        'echo new > "$GPUOBS_OUTPUT"',
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0 and "kept the earlier" not in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"r.gpuobs": b"new\n"}


def test_record_passes_everything_after_the_program_to_it(walk_env, tmp_path):
    env = {**repo_env(), **walk_env[0]}
    show_args = ["python3", "-c", "import sys; print(sys.argv[1:])"]
    r = gpuobs("record", "-o", tmp_path / "r.gpuobs", *show_args, "-f", "--output", "x", "-m", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "['-f', '--output', 'x', '-m']" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "x").exists()
    r = gpuobs("record", "--bogus", "--", "true", cwd=tmp_path, env=env)
    assert r.returncode == 2 and "no such option: --bogus" in r.stderr, r.stderr


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (Linux: SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_record_hung_up_puts_earlier_recordings_back(walk_env, tmp_path):
    """SIGHUP (the terminal or ssh went away) is forwarded to the program like SIGTERM,
    and the earlier recording moved aside by -f comes back when nothing new was written.
    A hang-up as a terminal gives it: `record` starts with SIGHUP's default action even
    when this test runs under nohup, and the signal is sent once the program runs and
    `record` forwards it (seen in /proc, not guessed from a sleep)."""
    import signal
    import subprocess

    from .cli_helpers import gpuobs_cmd

    if not Path("/proc/self/status").is_file():
        pytest.skip("needs /proc to see when record forwards SIGHUP")
    (tmp_path / "r.gpuobs").write_bytes(b"old")
    running = tmp_path / "running"
    program = ["sh", "-c", f'echo > "{running}"; exec sleep 60']
    proc = subprocess.Popen(
        gpuobs_cmd("record", "-o", str(tmp_path / "r.gpuobs"), "-f", "--", *program),
        cwd=tmp_path,
        env={**repo_env(), **walk_env[0]},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # nohup's SIG_IGN is inherited
    )
    try:
        while not (running.exists() and _catches(proc.pid, signal.SIGHUP)):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
        proc.send_signal(signal.SIGHUP)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP and "kept the earlier" in stderr, stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p != running} == {"r.gpuobs": b"old"}
