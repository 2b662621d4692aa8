#!/usr/bin/env bash
# Fetch the wheels benchmarks/gpu.py needs on the GPU test machine (Python 3.12, no network) into .whl/.
# The machine then runs, from a copy of this working tree with .whl carried along:
#   pip install -q --no-index --no-deps .whl/*.whl && PYTHONPATH=. python benchmarks/gpu.py
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=64  # what the device tool carries beside the working tree
PY=${PYTHON:-.venv/bin/python}
rm -rf .whl
mkdir -p .whl
grep -v '^\s*#' benchmarks/gpu_wheels.txt | grep -v '^\s*$' > .whl/requirements.txt
"$PY" -m pip download -q --dest .whl --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -r .whl/requirements.txt
rm .whl/requirements.txt
size_kib=$(du -sk .whl | cut -f1)
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu_wheels: .whl/ is $((size_kib / 1024)) MiB, over the ${LIMIT_MIB} MiB the device tool carries" >&2
  exit 1
fi
echo "gpu_wheels: $(ls .whl | wc -l) wheels, $((size_kib / 1024)) MiB in .whl/"
