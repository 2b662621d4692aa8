"""``lyre eval``: the quality gate. Does a server still say the text, in the voice it should?

Each prompt of a prompt set (``lyre.bench``'s: built in, a file, or seed-tts-en) is spoken by a server with
the same seeds every run, transcribed by Whisper (the server's own speech to text, or a model loaded here),
and scored as the 2026 serving comparisons score it: round-trip word error rate after Whisper's English
normaliser (corpus WER, WER without the utterances above 50%, and how many those were), and, for cloned
voices, the cosine similarity of speaker embeddings to the voice's reference clip. Two servers (or two
settings of one) answer the same prompts, and the gate reports the paired difference with a bootstrap 95%
confidence interval. A folder of audio files with their texts is scored the same way without a server.

    result = asyncio.run(run_eval([Target(url="http://127.0.0.1:8000")], EvalConfig()))
    print(format_table(result))

Like ``lyre.bench`` it talks to servers over HTTP only: nothing of lyre's serving code is imported.
"""

from lyre.eval.gate import (
    EvalConfig,
    EvalResult,
    Target,
    load_references,
    local_judge,
    paired,
    run_eval,
    score_folder,
    score_server,
)
from lyre.eval.paired import RESAMPLES, Difference, similarity_difference, wer_difference
from lyre.eval.report import NOISE_WER, Thresholds, format_table, to_json, verdict
from lyre.eval.speakers import EMBEDDINGS, cosine, make_embedding
from lyre.eval.utterances import FORMATS, SpeechSettings
from lyre.eval.wer import OVER, WerSummary, Words, normalise, score, summarise

__all__ = [
    "EMBEDDINGS",
    "FORMATS",
    "NOISE_WER",
    "OVER",
    "RESAMPLES",
    "Difference",
    "EvalConfig",
    "EvalResult",
    "SpeechSettings",
    "Target",
    "Thresholds",
    "WerSummary",
    "Words",
    "cosine",
    "format_table",
    "load_references",
    "local_judge",
    "make_embedding",
    "normalise",
    "paired",
    "run_eval",
    "score",
    "score_folder",
    "score_server",
    "similarity_difference",
    "summarise",
    "to_json",
    "verdict",
    "wer_difference",
]
