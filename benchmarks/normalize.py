"""The text front end's cost: CPU per 1,000 characters of text, by kind of text.

Three texts, each read whole (as an HTTP request's segments are, one `TextFront.read` per segment):

- prose: plain sentences with few numbers (most of what an assistant says);
- dense: every sentence full of amounts, dates, times, units, phone numbers and abbreviations (the worst case);
- table: the test table's written cases (tests/english_cases.py), one after another.

For each: milliseconds of process time per 1,000 characters (median of repeats, one thread), and the same
for `clean` alone (what every request paid before the front end) for comparison.

    .venv/bin/python benchmarks/normalize.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from english_cases import CASES  # noqa: E402

from lyre.tts import TextFront  # noqa: E402
from lyre.tts.segments import split_segments  # noqa: E402
from lyre.tts.text import normalize  # noqa: E402

PROSE = ("The weather today is calm and bright, with a light breeze from the west. I can help you plan the "
         "trip, book the tickets and find a quiet place to stay near the station. Let me know what you would "
         "like to do first, and I will take care of the rest. ") * 6
DENSE = ("Dr. Smith paid $5.20 on 2026-12-02 at 10:30am for 5 km of track on Elm St. Call +1 (415) 555-0100 "
         "or write to john.doe@example.com before 3pm; 25% of the 1,500 CEOs said the 1990s were better. "
         "It weighs 2.5 kg, costs EUR 10.50 and runs at 60 km/h from 9am-5pm, 24/7. ") * 4


def _per_kchar_ms(text: str, read: object, repeats: int) -> float:
    segments = split_segments(normalize(text, len(text)))
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for segment in segments:
            read(segment)  # type: ignore[operator]
        times.append(time.process_time() - start)
    return 1000 * statistics.median(times) / (len(text) / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    front = TextFront()
    front.read("warm up $5 on 2026-12-02", "en")  # num2words' first import is not the reading's cost
    table = " ".join(written for written, _ in CASES)
    print(f"{'text':8} {'chars':>6} {'read ms/1k chars':>17} {'clean ms/1k chars':>18}")
    for name, text in (("prose", PROSE), ("dense", DENSE), ("table", table)):
        read = _per_kchar_ms(text, lambda s: front.read(s, "en"), args.repeats)
        clean = _per_kchar_ms(text, lambda s: normalize(s, len(s)), args.repeats)
        print(f"{name:8} {len(text):6d} {read:17.2f} {clean:18.2f}")
    assert front.fallbacks == 0, "a reading failed: see the log"


if __name__ == "__main__":
    main()
