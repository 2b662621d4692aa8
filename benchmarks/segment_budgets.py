"""Does long text get the audio its words need? Audio seconds per text over SSE, against natural speech's length.

    lyre serve &                                   # the demo model: its segments run to their budgets
    .venv/bin/python benchmarks/segment_budgets.py http://127.0.0.1:8000

On the demo model (random weights rarely say end-of-speech) each segment runs to its token budget, so the audio's
length is the budget's: a text should get at least its characters / 14 seconds (natural speech runs at 13-16
characters a second) and a short sentence no more than its characters / 5 + 3. Prints, per text: characters,
segments, audio seconds, those two bounds, and the segments reported cut (``speech.segment_cut``) by reason.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections import Counter

import httpx

SENTENCE_140 = ("The package you ordered last Tuesday left our warehouse this morning, and the courier expects to "
                "deliver it before noon tomorrow, as planned.")
SENTENCE_290 = ("When you arrive at the station, take the north exit past the flower stall, cross the wide avenue at "
                "the second set of lights, walk along the canal for about five minutes until you reach the old "
                "brick bridge, and then turn left onto the narrow lane that leads up the hill to our front door.")
TEXT_570 = (SENTENCE_290 + " The door code is written on the card we sent you last week, and if it does not work, "
            "ring the bell twice and wait, because the intercom is slow; someone will come down to let you in, "
            "and there is tea and something to eat in the kitchen when you get upstairs after your long trip.")


def speak(url: str, text: str, seed: int) -> tuple[float, Counter[str]]:
    """Audio seconds (pcm, 24 kHz s16le) and the cut segments by reason."""
    samples, cuts = 0, Counter[str]()
    body = {"input": text, "voice": "tara", "response_format": "pcm", "stream_format": "sse", "seed": seed}
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "speech.audio.delta":
                samples += len(base64.b64decode(event["audio"])) // 2
            elif event["type"] == "speech.segment_cut":
                cuts[event["reason"]] += 1
    return samples / 24_000, cuts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| text | characters | audio s | at least (chars/14) | at most (chars/5+3) | segments cut |")
    print("|---|---:|---:|---:|---:|---|")
    for name, text in (("140-character sentence", SENTENCE_140), ("290-character sentence", SENTENCE_290),
                       ("570-character text", TEXT_570)):
        seconds, cuts = speak(args.url.rstrip("/"), text, args.seed)
        said = ", ".join(f"{n} {reason}" for reason, n in sorted(cuts.items())) or "none"
        print(f"| {name} | {len(text)} | {seconds:.2f} | {len(text) / 14:.2f} | {len(text) / 5 + 3:.2f} | {said} |")


if __name__ == "__main__":
    main()
