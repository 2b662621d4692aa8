"""Whether a lever changes what is said, or who says it: each lever set's speech against sdpa's eager bf16.

With real weights (``--model`` and ``--codec``), each lever set is served in turn and speaks the same texts
with the same seeds as the reference; `lyre.eval` transcribes every utterance with one Whisper (``--whisper``,
loaded on the run's device), scores it, and reports each lever's paired difference from the reference (corpus
WER B - A, and speaker similarity to ``--reference`` clips) with a bootstrap 95% confidence interval. Random
weights make noise, whose WER says nothing: then the section says so and runs nothing (the token and KV
agreement of `gpu_agreement` is the check that random weights can make).

Used by benchmarks/gpu.py; `lever_quality` returns plain figures for its JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from gpu_levers import Lever
from gpu_plan import REFERENCE, Plan
from gpu_serving import build_tts, serving

__all__ = ["QUALITY_SEQ_LEN", "lever_quality"]

QUALITY_SEQ_LEN = 2048  # room for a whole utterance of the built-in texts (the longest is about 15 s)
_CONCURRENCY = 8
RANDOM_WEIGHTS = ("random weights make noise, whose WER and similarity say nothing; give --model and --codec "
                  "(a real Orpheus and its SNAC) to judge each lever set's speech")


async def _side(url: str, label: str, config: Any, judge: Any, references: Any, timeout_s: float) -> Any:
    from lyre import eval as gate

    async with httpx.AsyncClient(timeout=timeout_s) as client:
        return await gate.score_server(client, url, label, config, judge, references)


def lever_quality(plan: Plan, levers: Sequence[Lever], log: Callable[[str], None]) -> dict[str, Any]:
    """Each of ``levers`` against `REFERENCE` (served first): corpus WER and similarity, and B - A with CIs."""
    if plan.model is None:
        return {"skipped": RANDOM_WEIGHTS}
    try:
        from lyre import eval as gate
        from lyre.bench import BUILTIN_TEXTS
    except ImportError as exc:  # the GPU machine has no faster-whisper or jiwer unless their wheels travel
        return {"skipped": f"lyre eval cannot load here ({exc})"}
    config = gate.EvalConfig(
        texts=BUILTIN_TEXTS[:plan.quality_texts], voices=tuple(v for v, _ in plan.references) or ("tara",),
        seeds=(plan.seed or 0,), speech=gate.SpeechSettings("pcm", plan.max_tokens if plan.small else None,
                                                            _CONCURRENCY),
        whisper=plan.whisper, whisper_device=plan.device, references=plan.references, timeout_s=plan.timeout_s)
    served = dataclasses.replace(plan, max_seq_len=max(plan.max_seq_len, QUALITY_SEQ_LEN))
    references = gate.load_references(config)
    judge = gate.local_judge(config)
    sides: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        for lever in [REFERENCE, *(lever for lever in levers if lever != REFERENCE)]:
            tts = build_tts(served, lever, _CONCURRENCY)
            try:
                with serving(tts, served, _CONCURRENCY) as url:
                    side = asyncio.run(_side(url, lever.name, config, judge, references, plan.timeout_s))
                sides[lever.name] = side
                log(f"  {lever.name}: corpus WER {side.wer.corpus_wer:.3f} over {side.wer.utterances} utterances, "
                    f"similarity {side.similarity() or '-'}")
            except Exception as exc:  # noqa: BLE001 - one lever's failure is its row, not the run's end
                errors[lever.name] = f"{type(exc).__name__}: {exc}"
                log(f"  {lever.name}: failed ({errors[lever.name]})")
            finally:
                tts.close()
    finally:
        if judge is not None:
            asyncio.run(judge.aclose())
    out: dict[str, Any] = {"judge": judge.name if judge else None, "texts": len(config.texts),
                           "seed": config.seeds[0], "reference": REFERENCE.name, "levers": []}
    base = sides.get(REFERENCE.name)
    if base is not None:
        out["reference_corpus_wer"], out["reference_similarity"] = base.wer.corpus_wer, base.similarity()
    for lever in levers:
        if lever == REFERENCE:
            continue
        entry: dict[str, Any] = {"lever": lever.name}
        if lever.name in errors or base is None:
            entry["error"] = errors.get(lever.name) or f"the reference failed: {errors.get(REFERENCE.name)}"
        else:
            result = gate.paired(config, base, sides[lever.name])
            entry |= {"corpus_wer": sides[lever.name].wer.corpus_wer, "similarity_by_voice": sides[lever.name].similarity(),
                      "wer": result.wer_difference.as_json() if result.wer_difference else None,
                      "similarity": result.similarity_difference.as_json() if result.similarity_difference else None}
        out["levers"].append(entry)
    return out
