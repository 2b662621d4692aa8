"""The decode-step figures issue 40 compares across commits, as one JSON line: the decode step at batch 1, 8 and
32 and the first token at batch 1 (`benchmarks/engine.py`'s ``bench_lyre``: 64 audio-constrained tokens per
request), and the step at batch 32 by context (its ``bench_context``; the engine's own default path for 32 rows where
the tree names its paths, else its ``sdpa``).

Run it against any checkout's code, that code only: from inside the checkout, without the site hook an editable
install leaves (it would serve the current checkout's modules for whatever the other lacks), the checkout first:

    cd TREE && PYTHONPATH=TREE:$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])') \\
        .venv/bin/python -S /path/to/lyre/benchmarks/step_figures.py
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, "benchmarks")  # the checkout's own engine benchmark (the working directory's)

import torch  # noqa: E402

import engine as bench_engine  # noqa: E402

try:
    from lyre.models.choice import choose_model  # noqa: E402
except ImportError:  # a checkout from before the package's folders were sorted
    from lyre.model_choice import choose_model  # type: ignore[no-redef]  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    folder = choose_model(None).local()
    lyre = bench_engine.bench_lyre(folder, [1, 8, 32], 64, constrained=True)
    named = getattr(bench_engine, "PATHS", {})
    paths = ["spans"] if "spans" in named else ["blocks"] if named else ["sdpa"]
    by_context = next(iter(bench_engine.bench_context(folder, [128, 512, 2048], 32, paths).values()))
    print(json.dumps({"step1": lyre[1]["step_ms"], "step8": lyre[8]["step_ms"], "step32": lyre[32]["step_ms"],
                      "first1": lyre[1]["first_token_ms"], **{f"c{k}": v for k, v in by_context.items()}}))


if __name__ == "__main__":
    main()
