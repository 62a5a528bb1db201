"""The sampler's rule (tool/sample_rule.h) against a simulated program that fills
the rings at a steady rate: what it lets the rings take, over time, is the burst
plus the budget, whatever the rate; a duty cycle keeps the first ON of every PERIOD;
with neither the gate stays open. No GPU: tests/native/sampler_check.cpp."""

import json
import subprocess

import pytest

from .native_helpers import compile_check

MB = 1_000_000


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    return compile_check(tmp_path_factory.mktemp("bin") / "sampler_check", "sampler_check.cpp")


def simulate(check, rate, budget, burst, on=0, period=0, seconds=60.0):
    out = subprocess.run(
        [str(check), str(rate), str(budget), str(burst), str(on), str(period), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("rate", [20 * MB, 1_800 * MB, 20_000 * MB])
def test_a_run_over_budget_records_the_burst_and_the_budget(check, rate):
    r = simulate(check, rate, 16 * MB, 256 * 2**20, seconds=120)
    allowed = 256 * 2**20 + 16 * MB * 120
    # The bucket owes what a late close let in, so the long-run rate is the budget:
    # over by at most one poll's worth at this rate.
    assert allowed * 0.97 <= r["recorded"] <= allowed + rate * 0.0011, r
    assert r["closes"] >= 2, r  # it samples in stretches, it does not stop


def test_stretches_are_about_a_second_of_budget(check):
    r = simulate(check, 1_800 * MB, 16 * MB, 64 * MB, seconds=120)
    # reopened at a second's budget (16 MB) at 1.8 GB/s: ~9 ms open, about once a second
    assert 100 <= r["closes"] <= 125, r
    assert r["longest_open_ns"] <= 0.05e9, r


def test_under_budget_the_gate_never_closes(check):
    r = simulate(check, 10 * MB, 16 * MB, 256 * 2**20)
    assert r["closes"] == 0 and r["recorded"] == pytest.approx(10 * MB * 60, rel=1e-6)


def test_no_budget_no_duty_never_closes(check):
    r = simulate(check, 50_000 * MB, 0, 0)
    assert r["closes"] == 0 and r["open_ns"] == 60 * 10**9


def test_duty_cycle_keeps_the_first_on_of_every_period(check):
    r = simulate(check, 1_000 * MB, 0, 0, on=50_000_000, period=5_000_000_000, seconds=60)
    assert r["open_ns"] == 12 * 50_000_000 and r["closes"] == 12, r


def test_duty_cycle_and_budget_together_keep_both(check):
    r = simulate(check, 1_000 * MB, 1 * MB, 8 * MB, on=50_000_000, period=500_000_000, seconds=60)
    assert r["open_ns"] <= 120 * 50_000_000  # never outside the duty cycle's windows
    assert r["recorded"] <= 8 * MB + 1 * MB * 60 + 1_000 * MB * 0.0011, r
