"""What the tool's sampler did (tool/sampler.h): the rule it kept (a data budget
with its burst, a duty cycle) and how much it left out, from the SAMPLING chunk
written after each flush. Counts stay exact under the sample gate; records are
the stretches of time it was open, so per-record figures (spans, SMs, block
times) describe those stretches, and totals of records are estimates. A duty
cycle kept on the device's clock (the schema's GPUOBS_SAMPLING_DUTY_ON_DEVICE)
is a window instead: outside its on time nothing is counted, and launches run
wholly there are unrecorded, as outside a recording window."""

from __future__ import annotations

from ..recording_file import schema
from ..recording_file.recording import Recording


def sampling(rec: Recording) -> dict | None:
    """The rule and its effect over the whole recording; None where no SAMPLING
    chunk was written (a counting mode, or a writer from before the sampler)."""
    s = rec.sampling
    if len(s) == 0:
        return None
    last = s[-1]
    totals = rec.totals
    on_device = bool(int(last["flags"]) & schema.SamplingFlag.DUTY_ON_DEVICE)
    sampled_out = int(s["sampled_out"].sum())
    would_record = totals["attempted"] + sampled_out  # records attempted + what the gate kept from attempting
    return {
        "budget_bytes_per_s": int(last["budget_bytes_per_s"]),
        "burst_bytes": int(last["burst_bytes"]),
        "duty_on_ns": int(last["duty_on_ns"]),
        "duty_period_ns": int(last["duty_period_ns"]),
        "duty_on_device": on_device,
        # launches (graph replays once) run wholly outside the device's on times, or outside windows
        "off_time_launches": int(totals["unrecorded_launches"]) if on_device else 0,
        "sampled_out": sampled_out,
        "gate_closed_ns": int(s["gate_closed_ns"].sum()),
        "gate_turns": int(s["gate_turns"].sum()),
        # recorded / what would have been recorded with the gate always open (1.0: nothing sampled out)
        "kept_share": totals["recorded"] / would_record if would_record else 1.0,
    }


def device_duty(rec: Recording) -> tuple[int, int] | None:
    """(on_ns, period_ns) of a duty cycle kept on the device's clock (its on times are
    where %globaltimer mod period_ns < on_ns); None where there is none."""
    s = rec.sampling
    if len(s) == 0 or not int(s[-1]["flags"]) & schema.SamplingFlag.DUTY_ON_DEVICE:
        return None
    on, period = int(s[-1]["duty_on_ns"]), int(s[-1]["duty_period_ns"])
    return (on, period) if 0 < on < period else None


def budget_text(d: dict) -> str:
    """'a budget of 16 MB/s with bursts of 256 MiB', or '' where there is none."""
    if not d["budget_bytes_per_s"]:
        return ""
    return f"a budget of {d['budget_bytes_per_s'] / 1e6:g} MB/s with bursts of {d['burst_bytes'] / 2**20:,.0f} MiB"


def duty_text(d: dict) -> str:
    """'the first 67.1089 ms of every 4.29497 s of the device's clock', or '' where there is none."""
    if not d["duty_period_ns"]:
        return ""
    clock = " of the device's clock" if d.get("duty_on_device") else ""
    return f"the first {_ms(d['duty_on_ns'])} of every {_ms(d['duty_period_ns'])}{clock}"


def rule_text(d: dict) -> str:
    """'a budget of 16 MB/s with bursts of 256 MiB' / 'the first 50 ms of every 5 s' / 'none'."""
    return " and ".join(t for t in (budget_text(d), duty_text(d)) if t) or "none (every record kept)"


def is_active(d: dict | None) -> bool:
    """Whether the rule left anything out: records sampled out, or a duty cycle's off time."""
    return d is not None and bool(d["sampled_out"] or d.get("duty_on_device"))


def effect_text(d: dict, unit: str) -> str:
    """What the rule left out, for `info` and `stats`."""
    if d.get("duty_on_device"):
        return (
            f"a duty cycle on the device: recorded {duty_text(d)} ({d['duty_on_ns'] / d['duty_period_ns']:.2%} "
            f"of the time); outside it nothing was counted, and {d['off_time_launches']:,} launches (graph replays "
            "once) ran wholly there, not recorded; launches running across an edge have part of their blocks"
            + (f"; {d['sampled_out']:,} {unit} sampled out by {budget_text(d)}" if d["sampled_out"] else "")
        )
    if not d["sampled_out"]:
        return f"nothing sampled out (rule: {rule_text(d)})"
    return (
        f"{d['sampled_out']:,} {unit} counted but not recorded, by {rule_text(d)}: the gate closed "
        f"{d['gate_turns']:,} times, {d['gate_closed_ns'] / 1e9:,.3f} s in all; "
        f"{d['kept_share']:.1%} of what would have been recorded is (per-record figures describe the open stretches)"
    )


def _ms(ns: int) -> str:
    return f"{ns / 1e9:g} s" if ns >= 1_000_000_000 else f"{ns / 1e6:g} ms"
