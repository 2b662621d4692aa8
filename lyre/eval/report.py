"""The gate's results: a table for people, a JSON document for machines, and the verdict on the thresholds."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lyre.eval.gate import EvalResult
from lyre.eval.paired import Difference
from lyre.eval.scoring import Scored
from lyre.eval.wer import OVER

__all__ = ["JSON_SCHEMA_VERSION", "NOISE_WER", "Thresholds", "format_table", "to_json", "verdict"]

JSON_SCHEMA_VERSION = 1
# A corpus WER this high means the transcripts share next to nothing with the texts: the audio is not the speech
# asked for (noise, as a model with random weights makes; another language; silence).
NOISE_WER = 0.8
_ABSENT = "-"


def _figures(side: Scored) -> dict[str, Any]:
    wer = side.wer
    return {"label": side.label, "judge": side.judge, "utterances": wer.utterances, "corpus_wer": wer.corpus_wer,
            "wer_excluding_over_50": wer.wer_excluding_over_50, "over_50": wer.over_50,
            "similarity": side.similarity(), "rows": [row.as_json() for row in side.rows]}


def to_json(result: EvalResult) -> dict[str, Any]:
    """The first side's figures at the top level; a second side, and the paired differences, under ``compare``."""
    document: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION,
                                "created": datetime.now(UTC).isoformat(timespec="seconds"), "command": sys.argv,
                                "settings": result.config.settings(), **_figures(result.sides[0])}
    if len(result.sides) == 2:
        paired: dict[str, Any] = {"wer": result.wer_difference.as_json() if result.wer_difference else None,
                                  "similarity": (result.similarity_difference.as_json()
                                                 if result.similarity_difference else None)}
        document["compare"] = {**_figures(result.sides[1]), "paired": paired}
    return document


def _num(value: float | None, digits: int = 3) -> str:
    return _ABSENT if value is None else f"{value:.{digits}f}"


def _signed(d: Difference) -> str:
    return f"{d.difference:+.3f}  95% CI [{d.low:+.3f}, {d.high:+.3f}]"


def format_table(result: EvalResult) -> str:
    """One line per side (corpus WER, WER without the utterances over 50%, how many those were, similarity per
    speaker), then the paired differences when two sides were compared, then a word on noise if it was noise."""
    names = ["A", "B"] if len(result.sides) == 2 else [""]
    lines = []
    for name, side in zip(names, result.sides):
        lines.append(f"{name + ': ' if name else ''}{side.label}  (judged by {side.judge})")
    header = ["", "utterances", "corpus WER", f"WER <={OVER:.0%}", f"over {OVER:.0%}", "similarity"]
    rows = [header]
    for name, side in zip(names, result.sides):
        similarity = " ".join(f"{speaker} {value:.3f}" for speaker, value in side.similarity().items()) or _ABSENT
        rows.append([name or "all", str(side.wer.utterances), _num(side.wer.corpus_wer),
                     _num(side.wer.wer_excluding_over_50), str(side.wer.over_50), similarity])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if (wer := result.wer_difference) is not None:
        lines.append(f"paired, B - A, over {wer.pairs} utterances ({wer.resamples} bootstrap resamples, "
                     f"seed {wer.seed}):")
        lines.append(f"  corpus WER  {_signed(wer)}")
        if (similarity := result.similarity_difference) is not None:
            lines.append(f"  similarity  {_signed(similarity)} ({similarity.pairs} pairs)")
    for name, side in zip(names, result.sides):
        if side.wer.corpus_wer is not None and side.wer.corpus_wer >= NOISE_WER:
            lines.append(f"{name + ': ' if name else ''}corpus WER {side.wer.corpus_wer:.2f}: the transcripts share "
                         "almost no words with the texts. This audio is not the speech asked for (noise, as a model "
                         "with random weights makes; silence; another language)")
    return "\n".join(lines)


@dataclass(frozen=True)
class Thresholds:
    """What the gate holds a run to; None: not checked."""

    max_wer: float | None = None  # every side's corpus WER at most this
    min_similarity: float | None = None  # every speaker's mean similarity, on every side, at least this
    max_wer_increase: float | None = None  # B - A's 95% CI upper bound below this (B shown no worse than that)


def verdict(result: EvalResult, thresholds: Thresholds) -> list[str]:
    """What failed the gate, one line each; empty when it passed."""
    failed = []
    for side in result.sides:
        wer = side.wer.corpus_wer
        if thresholds.max_wer is not None and wer is not None and wer > thresholds.max_wer:
            failed.append(f"{side.label}: corpus WER {wer:.3f} is over --max-wer {thresholds.max_wer:g}")
        for speaker, value in side.similarity().items():
            if thresholds.min_similarity is not None and value < thresholds.min_similarity:
                failed.append(f"{side.label}: {speaker}'s similarity {value:.3f} is under --min-similarity "
                              f"{thresholds.min_similarity:g}")
    if thresholds.max_wer_increase is not None:
        if result.wer_difference is None:
            raise ValueError("--max-wer-increase compares two servers: give --compare URL2 or a second --serve")
        if result.wer_difference.high >= thresholds.max_wer_increase:
            failed.append(f"B's corpus WER may be {result.wer_difference.high:+.3f} above A's (the 95% CI's upper "
                          f"bound), not shown under --max-wer-increase {thresholds.max_wer_increase:g}")
    return failed
