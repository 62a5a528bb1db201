#!/usr/bin/env bash
# Installs the test dependencies and runs the tests: the README's second command,
# and exactly what CI runs (.ci/run) after the lint checks (.ci/lint). GPU tests
# are skipped here; run them on a GPU machine with tests/gpu_programs/device_suite.sh (all
# in one call) or device_session.sh (one part a call).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q ".[test]"
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # The real Perfetto UI runs in headless Chromium for the end-to-end tests.
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v prometheus >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # A real Prometheus server scrapes `gpuobs metrics` in tests/test_metrics_prometheus.py.
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
if command -v prometheus >/dev/null 2>&1; then
  export GPUOBS_REQUIRE_PROMETHEUS="${GPUOBS_REQUIRE_PROMETHEUS:-1}"
else
  echo "tests/run.sh: no prometheus; the Prometheus scrape test will be skipped" >&2
fi
if command -v chromium >/dev/null 2>&1; then
  export GPUOBS_REQUIRE_BROWSER="${GPUOBS_REQUIRE_BROWSER:-1}"
else
  echo "tests/run.sh: no chromium; the Perfetto UI tests will be skipped" >&2
fi
# Run against the installed package, from outside the source tree.
cd tests && exec python3 -m pytest -q -p no:cacheprovider --rootdir=.. -c ../pyproject.toml .
