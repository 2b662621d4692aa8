#!/usr/bin/env bash
# Rerun every CPU benchmark and rewrite the figures docs/benchmarks.md quotes:
# each script's output goes to docs/bench/<name>.txt (compare writes
# compare.md, compare.json and its plots there), with the machine they ran on.
# About 35 minutes on 2 cores. Run nothing else meanwhile: the figures are timings.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/bench
mkdir -p "$out"
py=.venv/bin/python
{
  date -u +"measured %Y-%m-%d %H:%M UTC"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "memory: $(free -g | awk '/Mem:/ {print $2}') GB"
  $py -c "import torch, platform; print(f'python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} intra-op threads')"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/lyre commit /' || true
} > "$out/machine.txt"
run() {
  local name=$1; shift
  echo "== $name: $*" >&2
  "$py" "$@" > "$out/$name.txt"
}
run engine benchmarks/engine.py
run host_budget benchmarks/host_budget.py --concurrency 16 64 128 --json "$out/host_budget.json"
run lora benchmarks/lora.py --json "$out/lora.json"
run reference_voice benchmarks/reference_voice.py --json "$out/reference_voice.json"
run codec benchmarks/codec.py
run streaming benchmarks/streaming.py --levels 1 2
run train_voice benchmarks/train_voice.py --overfit-clips 4 --overfit-steps 50 --overfit-lr 2e-3 --json "$out/train_voice.json"
run train_voice_silence benchmarks/train_voice.py --only silence --json "$out/train_voice_silence.json"
echo "== compare: benchmarks/compare.py --out $out" >&2
"$py" benchmarks/compare.py --out "$out" > /dev/null  # it writes compare.md itself
echo "== scheduling: benchmarks/scheduling.py --out $out" >&2
"$py" benchmarks/scheduling.py --rate 0.25 --concurrency 1 2 3 4 6 --requests 20 --out "$out" > /dev/null
run stt benchmarks/stt.py
run quality_gate benchmarks/quality_gate.py
run chat benchmarks/chat.py --tokens 32 --server-requests 5
run router benchmarks/router.py
run agent benchmarks/agent.py --levels 1 2 4 --turns 2
run webrtc benchmarks/webrtc.py --turns 16 --calls 1 8 --seconds 10 --bursts 20 --json "$out/webrtc.json"
run phone benchmarks/phone.py
echo "wrote $out/" >&2
