"""One layer's decode attention on the CPU, each way side by side: microseconds a call for ``--rows`` rows of
``--keys`` keys each, their blocks laid one after another in the pool (the demo model's heads: 4 query heads,
2 kv heads of 64; blocks of 64). ``spans`` and ``blocks`` read the pool in place (`lyre.engine.cpu_decode`),
``runs`` a view per row, and ``contiguous`` is one batched SDPA over rows already contiguous, as the old slot
cache's step made it: the floor the in-place ways are measured against (they also write the step's keys
and values into the pool; it does not). Main thread only: in the engine's
thread a call's fixed cost is higher (`benchmarks/step_figures.py` measures there).

    .venv/bin/python benchmarks/attention_layer.py --rows 32 --keys 128 512 2048
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from lyre.engine.cpu_decode import BlockDecode, BlockOwners, RunDecode, SpanDecode
from lyre.engine.kv_cache import KVCache
from lyre.models.config import LlamaConfig

BLOCK, HEADS, KV_HEADS, DIM = 64, 4, 2, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--keys", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = LlamaConfig(hidden_size=HEADS * DIM, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=DIM, vocab_size=8)
    rows = args.rows
    for keys in args.keys:
        n = -(-keys // BLOCK)
        cache = KVCache(config, rows * n, BLOCK, torch.float32, torch.device("cpu"))
        cache.k.normal_()
        cache.v.normal_()
        tables = torch.arange(rows * n).view(rows, n)
        lengths = torch.full((rows,), keys)
        where = tables[:, -1] * BLOCK + (keys - 1) % BLOCK
        q = torch.randn(rows, 1, HEADS, DIM)
        k, v = torch.randn(rows, 1, KV_HEADS, DIM), torch.randn(rows, 1, KV_HEADS, DIM)
        whole_k, whole_v = torch.randn(rows, KV_HEADS, keys, DIM), torch.randn(rows, KV_HEADS, keys, DIM)
        ways = {
            "spans": SpanDecode(cache, where, tables.tolist(), lengths.tolist()),
            "runs": RunDecode(cache, where, tables.tolist(), lengths.tolist()),
            "blocks": BlockDecode(cache, where, BlockOwners.of(tables, lengths, BLOCK)),
            "contiguous": lambda layer, q, k, v: F.scaled_dot_product_attention(
                q.transpose(1, 2), whole_k, whole_v, enable_gqa=True),
        }
        figures = {}
        for name, way in ways.items():
            way(0, q, k, v)  # warm-up
            start = time.perf_counter()
            for _ in range(args.calls):
                way(0, q, k, v)
            figures[name] = round(1e6 * (time.perf_counter() - start) / args.calls)
        print(f"{rows} rows x {keys} keys, µs a layer: {figures}", flush=True)


if __name__ == "__main__":
    main()
