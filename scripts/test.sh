#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The playground test drives Debian's Chromium through its chromedriver;
# the speech-to-text tests hear sentences spoken by espeak-ng; the fleet tests
# run a real redis-server, and HAProxy and nginx in front of servers (Debian puts
# both in /usr/sbin, not on a user's PATH); the SIP tests call lyre with SIPp (sip-tester) and baresip.
export PATH="$PATH:/usr/sbin"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v espeak-ng >/dev/null \
   || ! command -v redis-server >/dev/null || ! command -v haproxy >/dev/null || ! command -v nginx >/dev/null \
   || ! command -v sipp >/dev/null || ! command -v baresip >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver espeak-ng redis-server \
    haproxy nginx sip-tester baresip >/dev/null
fi
# The Realtime agent's client frameworks, each in its own release, in a virtual environment of their own
# (tests/clients/requirements.txt says why); the JS Agents SDK from the npm registry.
if [ ! -x .venv-clients/bin/python ]; then
  python3 -m venv .venv-clients
  .venv-clients/bin/python -m pip install -q --upgrade pip >/dev/null
fi
.venv-clients/bin/python -m pip install -q -r tests/clients/requirements.txt
(cd tests/clients/js && npm ci --no-audit --no-fund --silent)
# Two workers (LYRE_TEST_WORKERS; 0: none), each taking whole test files: a file's shared server
# starts once, and one worker's tests wait on real-time audio while the other's compute. Files go out
# longest first (tests/conftest.py).
WORKERS="${LYRE_TEST_WORKERS:-2}"
# Each process (a worker, the servers it starts) computes on its share of the cores: with more OpenMP
# threads than cores, threads that finish a parallel region spin waiting for the next one, on cores
# another process needs (on 2 cores, 2 workers: 28% less CPU for the suite with one thread each).
# Set OMP_NUM_THREADS yourself to choose otherwise.
THREADS=$(( $(nproc) / (WORKERS > 0 ? WORKERS : 1) ))
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( THREADS > 0 ? THREADS : 1 ))}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-$OMP_NUM_THREADS}"
# The one test that compiles (FlexAttention on the CPU) compiles in its own process, not a pool of
# compile workers that would each import torch first.
export TORCHINDUCTOR_COMPILE_THREADS="${TORCHINDUCTOR_COMPILE_THREADS:-1}"
exec .venv/bin/python -m pytest -n "$WORKERS" --dist loadfile --no-loadscope-reorder "$@"
