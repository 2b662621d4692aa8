"""How the block KV cache's tables lie in its pool at steady state: the share of decode rows whose blocks are
one run (read in place as a view) and of those that must be copied, and for a step of many rows how many spans
`BlockDecode` reads and how much of them is other rows' or nobody's.

A closed loop over the block manager alone (no model: the layout depends only on who takes and gives back
which blocks): ``--rows`` requests always running, each with a prompt of 20 to 120 tokens and 32 to 512
tokens generated one per step (the engine benchmark's length mix, varied), its blocks grown as it writes,
its prompt's sealed (prefix caching on, as the server runs; speech seals no output block, ``--cache-output``
seals them too, as a chat does) and released when it ends; a finished request is replaced at once. The first ``--warm-up`` steps are not counted. The pool is the engine's default: one
``--max-seq-len`` per row.

    .venv/bin/python benchmarks/kv_layout.py
    .venv/bin/python benchmarks/kv_layout.py --rows 32 --steps 20000 --no-caching
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from lyre.engine.block_manager import BlockManager, BlockTable
from lyre.engine.cpu_decode import BlockOwners


def _one_run(blocks: list[int]) -> bool:
    return all(b == blocks[0] + i for i, b in enumerate(blocks))


def simulate(rows: int, steps: int, warm_up: int, block_size: int, max_seq_len: int, caching: bool,
             seed: int, cache_output: bool = False) -> dict[str, float]:
    rng = random.Random(seed)
    pool = BlockManager(rows * -(-max_seq_len // block_size), block_size, caching=caching)
    running: list[tuple[BlockTable, list[int], int]] = []  # table, tokens so far, tokens it will end with
    counted = scattered = spans = span_blocks = read_blocks = 0
    made = 0

    def start() -> None:
        nonlocal made
        made += 1
        prompt = [rng.randrange(1000, 2000) for _ in range(rng.randint(20, 120))]
        end = len(prompt) + rng.randint(32, 512)
        table = pool.admit(prompt, "", expect=end)  # the engine's hint: prompt and max_tokens
        assert table is not None, "the pool holds one max_seq_len per row: admission cannot fail"
        table.computed = len(prompt)
        pool.seal(table, prompt, "")
        running.append((table, list(prompt), end))

    for _ in range(rows):
        start()
    for step in range(steps):
        for table, tokens, _ in running:
            tokens.append(rng.randrange(128266, 156938))  # the audio token this step wrote
            assert pool.grow(table, len(tokens))
            table.computed = len(tokens)
            pool.seal(table, tokens if cache_output else tokens[:0], "")  # speech seals only its prompt
        if step >= warm_up:
            used = [table.blocks[: -(-len(tokens) // block_size)] for table, tokens, _ in running]
            counted += len(used)
            scattered += sum(not _one_run(b) for b in used)
            width = max(len(b) for b in used)
            tables = torch.tensor([b + [pool.num_blocks] * (width - len(b)) for b in used])
            owners = BlockOwners.of(tables, torch.tensor([len(t) for _, t, _ in running]), block_size)
            spans += len(owners.spans)
            span_blocks += sum(hi - lo for lo, hi in owners.spans)
            read_blocks += sum(len(b) for b in used)
        for i in reversed(range(len(running))):
            table, tokens, end = running[i]
            if len(tokens) >= end:
                pool.release(table)
                del running[i]
                start()
    stats = pool.stats()
    return {"rows": rows, "caching": caching, "requests": made, "row_steps": counted,
            "scattered_share": scattered / counted, "spans_per_step": spans / (steps - warm_up),
            "span_blocks_per_read_block": span_blocks / read_blocks, "evictions": stats.evictions,
            "cached_blocks_at_end": stats.cached, "pool_blocks": stats.total}


def chat(rows: int, conversations: int, turns: int, block_size: int, max_seq_len: int, seed: int) -> dict[str, float]:
    """Prefix reuse under pressure: ``conversations`` chats (more than ``rows`` run at once) share a 300-token
    system prompt; each turn's prompt is the whole history so far, its reply 50 to 150 tokens. The share of
    blocks a turn looked up that the cache still had (LRU order is what eviction out of turn would cost)."""
    rng = random.Random(seed)
    pool = BlockManager(rows * -(-max_seq_len // block_size), block_size)
    system = [rng.randrange(1000, 2000) for _ in range(300)]
    histories = [list(system) for _ in range(conversations)]
    for _ in range(turns):
        order = list(range(conversations))
        rng.shuffle(order)
        for first in range(0, conversations, rows):
            batch = []
            for c in order[first : first + rows]:
                history = histories[c]
                history += [rng.randrange(1000, 2000) for _ in range(rng.randint(10, 40))]  # the user's words
                reply = rng.randint(50, 150)
                if len(history) + reply > max_seq_len:
                    history[300:] = history[-100:]  # the client trims the oldest turns
                table = pool.admit(history, "", expect=len(history) + reply)
                assert table is not None
                batch.append((table, history, reply))
            for table, history, reply in batch:
                table.computed = len(history)
                pool.seal(table, history, "")
                for _ in range(reply):
                    history.append(rng.randrange(1000, 2000))
                    assert pool.grow(table, len(history))
                    table.computed = len(history)
                    pool.seal(table, history, "")
            for table, _, _ in batch:
                pool.release(table)
    stats = pool.stats()
    return {"rows": rows, "conversations": conversations, "hit_rate": stats.hit_rate, "evictions": stats.evictions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--warm-up", type=int, default=1000)
    parser.add_argument("--block-size", type=int, default=64, help="the CPU's default block size")
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--no-caching", action="store_true")
    parser.add_argument("--cache-output", action="store_true", help="seal generated blocks too, as a chat does")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--chat", type=int, nargs=2, metavar=("ROWS", "CONVERSATIONS"),
                        help="prefix reuse instead: chats taking turns, ROWS at once (hit rate under pressure)")
    args = parser.parse_args()
    if args.chat:
        result = chat(args.chat[0], args.chat[1], 12, args.block_size, args.max_seq_len, args.seed)
        print(f"{result['rows']} at once of {result['conversations']} conversations: prefix blocks found "
              f"{100 * result['hit_rate']:.1f}%, {result['evictions']} evictions")
        return
    results = [simulate(r, args.steps, args.warm_up, args.block_size, args.max_seq_len, not args.no_caching,
                        args.seed, args.cache_output) for r in args.rows]
    print(f"{'rows':>5}{'requests':>10}{'rows scattered':>16}{'spans/step':>12}{'span/read':>11}{'evictions':>11}")
    for r in results:
        print(f"{r['rows']:>5}{r['requests']:>10}{100 * r['scattered_share']:>15.1f}%{r['spans_per_step']:>12.2f}"
              f"{r['span_blocks_per_read_block']:>11.2f}{r['evictions']:>11}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
