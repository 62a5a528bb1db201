"""The record options' one table (schemas/gpuobs_record_options.h): Python's reading of
it (gpuobs.record.options) against the tool's (tests/native/record_options_check.cpp,
compiled with tool/config.cpp by the host compiler), the tool's messages for bad
values as they were before the table, and the CLI, attach() and RecordOptions built
from the rows."""

import inspect
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuobs.record.options import OPTIONS, parse_table, said_list
from gpuobs.recording_file import schema

from .native_helpers import compile_check


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    return compile_check(
        tmp_path_factory.mktemp("options") / "record_options_check",
        "record_options_check.cpp",
        "config.cpp",
        "kernel_filter.cpp",
    )


def _tool_load(check, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOBS_", "GPU_OBSERVER_"))}
    proc = subprocess.run(
        [str(check), "load"], env={**clean, "GPUOBS_PATCHES": "p", **env}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_python_reads_the_rows_the_tool_reads(check):
    rows = json.loads(subprocess.run([str(check)], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [r["name"] for r in rows] == list(OPTIONS)
    for row in rows:
        o = OPTIONS[row["name"]]
        for field in ("env", "kind", "fallback", "lo", "hi", "flags", "choices", "aliases", "old_env", "cli"):
            assert getattr(o, field) == row[field], (o.name, field)
        for field in ("metavar", "unit", "help"):
            assert getattr(o, field) == row[field], (o.name, field)
        # The default as each side holds it: the tool's number or text, Python's value.
        if o.is_kind("WHOLE", "SWITCH"):
            assert o.default == row["default_number"], o.name
        elif o.is_kind("MODE", "CHOICE"):
            assert o.words.index(o.default) == row["default_number"], o.name
        elif o.is_kind("DUTY"):
            assert o.default == row["default_text"] == "" and row["default_number"] == 0, o.name  # off
        else:
            assert str(o.default) == row["default_text"], o.name


# What the tool said for each value before the table (tool/config.cpp at 45ae9fd), byte for byte.
BEFORE = [
    ({"GPUOBS_MODE": "warp"}, "GPUOBS_MODE='warp' is not one of " + ", ".join(schema.MODE_NAMES.values())),
    ({"GPUOBS_SAMPLE_SHIFT": "99"}, "GPUOBS_SAMPLE_SHIFT='99' is not a whole number in [0, 32]"),
    ({"GPUOBS_SAMPLE_SHIFT": "-1"}, "GPUOBS_SAMPLE_SHIFT='-1' is not a whole number in [0, 32]"),
    ({"GPUOBS_CAPACITY": "lots"}, "GPUOBS_CAPACITY='lots' is not a whole number in [1024, 268435456]"),
    ({"GPUOBS_CAPACITY": "100"}, "GPUOBS_CAPACITY='100' is not a whole number in [1024, 268435456]"),
    ({"GPUOBS_DEVICE_MEMORY_MIB": "8"}, "GPUOBS_DEVICE_MEMORY_MIB='8' is not a whole number in [64, 1048576]"),
    ({"GPUOBS_KERNELS": "(("}, "GPUOBS_KERNELS='((' is not a valid regular expression: unbalanced '(': no ')' "
     "closes it at character 2"),
    ({"GPUOBS_OUTPUT": ""}, "GPUOBS_OUTPUT is empty"),
    ({"GPUOBS_CALLBACK_SCOPE": "grid"}, "GPUOBS_CALLBACK_SCOPE='grid' is not function or launch "
     "(GPUOBS_CALLBACK_SCOPE wins over its old name GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE)"),
    ({"GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE": "grid"}, "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE='grid' is not "
     "function or launch (GPUOBS_CALLBACK_SCOPE wins over its old name GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE)"),
    ({"GPUOBS_API_TRACE": "2"}, "GPUOBS_API_TRACE='2' is not 0 or 1"),
    ({"GPUOBS_GRAPH_NODES": "some"}, "GPUOBS_GRAPH_NODES='some' is not learn, every or none"),
    ({"GPUOBS_START_PAUSED": "yes"}, "GPUOBS_START_PAUSED='yes' is not 0 or 1"),
    ({"GPUOBS_LOSSLESS": "true"}, "GPUOBS_LOSSLESS='true' is not 0 or 1"),
    ({"GPUOBS_WINDOW_EVERY": "1073741825"}, "GPUOBS_WINDOW_EVERY='1073741825' is not a whole number in "
     "[0, 1073741824]"),
    ({"GPUOBS_WINDOW_EVERY": "4", "GPUOBS_GRAPH_NODES": "0"}, "GPUOBS_WINDOW_EVERY needs graph replays listed "
     "(GPUOBS_GRAPH_NODES=learn or every): without them the tool cannot tell when a graph replay has finished"),
]  # fmt: skip

# The duty cycle's one variable (it was two, GPUOBS_DUTY_ON_NS and _PERIOD_NS, before it became a row).
DUTY_REFUSED = [
    ({"GPUOBS_DUTY": "50ms"}, "GPUOBS_DUTY='50ms' is not ON/PERIOD, two durations such as 50ms/5s"),
    ({"GPUOBS_DUTY": "50 ms/5s"}, "GPUOBS_DUTY='50 ms/5s' is not ON/PERIOD, two durations such as 50ms/5s"),
    ({"GPUOBS_DUTY": "1.5/5s"}, "GPUOBS_DUTY='1.5/5s' is not ON/PERIOD, two durations such as 50ms/5s"),
    ({"GPUOBS_DUTY": "1.0000000001s/5s"}, "GPUOBS_DUTY='1.0000000001s/5s' is not ON/PERIOD, two durations such "
     "as 50ms/5s"),
    ({"GPUOBS_DUTY": "99999999999999999999/5s"}, "GPUOBS_DUTY='99999999999999999999/5s' is not ON/PERIOD, two "
     "durations such as 50ms/5s"),
    ({"GPUOBS_DUTY": "10us/500us"}, "GPUOBS_DUTY='10us/500us': the period is not in [1000000, 86400000000000] ns"),
    ({"GPUOBS_DUTY": "5s/5s"}, "GPUOBS_DUTY='5s/5s': ON is not more than 0 and less than PERIOD"),
    ({"GPUOBS_DUTY": "0ms/5s"}, "GPUOBS_DUTY='0ms/5s': ON is not more than 0 and less than PERIOD"),
    ({"GPUOBS_DUTY": "50ms/5s", "GPUOBS_WINDOW_EVERY": "4"}, "GPUOBS_DUTY and GPUOBS_WINDOW_EVERY are two ways "
     "to turn windows: set one"),
    ({"GPUOBS_DUTY": "50ms/5s", "GPUOBS_START_PAUSED": "1"}, "GPUOBS_DUTY and GPUOBS_START_PAUSED are two ways "
     "to turn windows: set one"),
]  # fmt: skip


@pytest.mark.parametrize("env,message", DUTY_REFUSED, ids=[e["GPUOBS_DUTY"] for e, _ in DUTY_REFUSED])
def test_the_tool_refuses_a_duty_cycle_it_cannot_keep(check, env, message):
    assert _tool_load(check, **env) == {"error": message}


@pytest.mark.parametrize(
    "text,on,period",
    [("50ms/5s", 50_000_000, 5_000_000_000), ("1.5ms/1s", 1_500_000, 1_000_000_000), ("250us/2000000", 250_000,
     2_000_000), ("1ns/86400s", 1, 86_400_000_000_000)],
)  # fmt: skip
def test_the_tool_and_python_read_a_duty_cycle_alike(check, text, on, period):
    from gpuobs.record.options import parse_duty

    o = OPTIONS["duty"]
    assert o.problem(text, f"--duty {text}") is None and parse_duty(text) == (on, period)
    got = _tool_load(check, GPUOBS_DUTY=text)
    assert (got["duty_on_ns"], got["duty_period_ns"]) == (on, period)
    got = _tool_load(check, GPUOBS_DUTY=o.env_text(text))  # what record hands the tool: nanoseconds
    assert (got["duty_on_ns"], got["duty_period_ns"]) == (on, period)


def test_python_refuses_each_duty_cycle_the_tool_refuses(check):
    o = OPTIONS["duty"]
    for env, _ in DUTY_REFUSED:
        if len(env) == 1:
            assert o.problem(env["GPUOBS_DUTY"], "--duty x") is not None, env
    assert o.problem("10us/500us", "--duty 10us/500us") == "--duty 10us/500us: the period is outside 1ms..86400s"
    assert o.problem("", "--duty ''") is None and _tool_load(check, GPUOBS_DUTY="")["duty_period_ns"] == 0


@pytest.mark.parametrize("env,message", BEFORE, ids=[" ".join(f"{k}={v}" for k, v in e.items()) for e, _ in BEFORE])
def test_the_tool_refuses_what_it_refused_before_in_the_same_words(check, env, message):
    assert _tool_load(check, **env) == {"error": message}


def test_the_tool_takes_what_it_took_before(check):
    assert _tool_load(check) == {
        "mode": 3,
        "sample_shift": 10,
        "capacity": 0,
        "device_memory_mib": 512,
        "kernels": "",
        "output": "gpuobs.gpuobs",
        "launch_scope": 0,
        "clock_probe": 1,
        "api_trace": 0,
        "graph_nodes": "learn",
        "start_paused": 0,
        "window_every": 0,
        "lossless": 0,
        "duty_on_ns": 0,
        "duty_period_ns": 0,
    }
    got = _tool_load(
        check,
        GPUOBS_MODE="mem_full",
        GPUOBS_SAMPLE_SHIFT="4",  # every access: the shift is 0
        GPUOBS_CAPACITY="0",
        GPUOBS_CLOCK_PROBE="yes",  # anything but 0 is on
        GPUOBS_GRAPH_NODES="1",  # the tool's old spelling of every
        GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE="launch",
        GPUOBS_KERNELS="nvjet",
        GPUOBS_WINDOW_EVERY="4",
        GPUOBS_LOSSLESS="1",
    )
    assert got["mode"] == 6 and got["sample_shift"] == 0 and got["capacity"] == 0 and got["clock_probe"] == 1
    assert got["graph_nodes"] == "every" and got["launch_scope"] == 1 and got["kernels"] == "nvjet"
    assert got["window_every"] == 4 and got["lossless"] == 1
    assert _tool_load(check, GPUOBS_GRAPH_NODES="0")["graph_nodes"] == "none"
    new_name_wins = _tool_load(check, GPUOBS_CALLBACK_SCOPE="function", GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE="launch")
    assert new_name_wins["launch_scope"] == 0


def test_the_cli_says_what_it_said_before():
    def said(name, value):
        o = OPTIONS[name]
        return o.problem(value, f"{o.flag} {value!r}" if o.is_kind("MODE", "CHOICE") else f"{o.flag} {value}")

    assert said("sample_shift", 40) == "--sample-shift 40 is outside 0..32"
    assert said("capacity", 100) == "--capacity 100 is outside 1024..268435456 (or 0: what fits)"
    assert said("capacity", 0) is None
    assert said("device_memory_mib", 8) == "--device-memory 8 MiB is outside 64..1048576"
    assert said("window_every", -1) == "--window-every -1 is outside 0..1073741824"
    assert said("scope", "grid") == "--scope 'grid' is not function or launch"
    assert said("graph_nodes", "1") == "--graph-nodes '1' is not learn, every or none"  # aliases are the tool's
    assert said("mode", "warp").startswith("--mode 'warp' is not one of off, block_noop, ")
    assert said_list(["a"]) == "a" and said_list(["a", "b"]) == "a or b"


def test_a_bound_changes_in_the_table_alone():
    from gpuobs.record.options import header_path

    text = re.sub(r"\.lo = 64,(\s*\\?\s*)\.hi = 1 << 20", r".lo = 32,\1.hi = 1 << 21", header_path().read_text())
    o = parse_table(text)["device_memory_mib"]
    assert (o.lo, o.hi) == (32, 1 << 21) and o.problem(40, "--device-memory 40") is None


def test_a_row_cut_short_is_an_error_not_a_shorter_table():
    from gpuobs.record.options import header_path

    lines = header_path().read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '.cli = "--capacity"' in line)
    lines[at] = lines[at].rstrip().removesuffix("\\")  # its backslash lost: the macro ends in the row
    with pytest.raises(ValueError, match="the row after sample_shift is not closed"):
        parse_table("\n".join(lines))


def test_record_options_attach_and_the_environment_come_from_the_rows(tmp_path):
    from gpuobs.record import runtime
    from gpuobs.record.native_build import NativeBuild
    from gpuobs.record.run import RecordOptions, tool_environment

    names = [f.name for f in RecordOptions.__dataclass_fields__.values()]
    assert names == [*OPTIONS, "extra_env"]
    params = inspect.signature(runtime.attach).parameters
    assert list(params) == list(OPTIONS) and params["capacity"].default == 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'capcity'"):
        runtime.attach(capcity=4096)
    with pytest.raises(runtime.AttachError, match=r"gpuobs.attach\(capacity=100\) is outside 1024"):
        runtime.attach(capacity=100)  # said before anything is built or loaded
    build = NativeBuild(tmp_path, tmp_path / "t.so", tmp_path / "p.fatbin", tmp_path / "c.fatbin", tmp_path / "s.so")
    env = tool_environment(build, RecordOptions(output=Path("r.gpuobs"), api_trace=True), base={})
    assert {o.env for o in OPTIONS.values()} <= set(env)
    assert env["GPUOBS_OUTPUT"] == str(Path("r.gpuobs").resolve()) and env["GPUOBS_API_TRACE"] == "1"
    assert env["GPUOBS_SAMPLE_SHIFT"] == "10" and env["GPUOBS_CLOCK_PROBE"] == "1"


def test_the_record_command_has_an_option_per_row():
    import typer

    from gpuobs.cli import app

    command = typer.main.get_command(app).commands["record"]
    params = {p.name: p for p in command.params}
    for o in OPTIONS.values():
        if not o.cli:
            assert o.name not in params
            continue
        p = params[o.name]
        assert sorted(p.opts) == sorted(o.cli.split()) and p.help == o.help_text, o.name
        assert p.default == o.default, o.name
