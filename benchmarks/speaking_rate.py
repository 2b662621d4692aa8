"""Speaking rates, in characters a second, for the segment budget's rule (lyre/tts/budget.py).

    .venv/bin/python benchmarks/speaking_rate.py [--whisper]

Speaks a set of sentences (short replies to long, run-on ones, with numbers spelled out) with espeak-ng at several
rates and voices and, where Debian's flite library is installed, with Flite's voices, and prints each speaker's
characters per second over the voiced span of the audio (first to last 10 ms frame within 40 dB of the loudest).
With --whisper, also over the span Whisper's word times give (first word's start to last word's end; the demo
Whisper base), an independent timing of the same audio. The budget assumes no delivery slower than
lyre.tts.budget.SLOWEST_CHARS_PER_S; this shows how far below the measured rates it sits.

Then German, French, Spanish, Italian, Mandarin, Korean and Hindi: five everyday sentences each, spoken by
espeak-ng's voice for the language at 120, 150 and 175 words a minute, characters (as lyre cleans them, spaces and
punctuation included: what the budget counts) per second over the voiced audio; each language's budget rate
(lyre.tts.budget.LANGUAGE_CHARS_PER_S) is its slowest clip times English's margin, 9 / 10.3. espeak-ng is a
formant synthesiser whose rates are not a human's. Its ``cmn`` voice reads many Han characters as spelled-out
pinyin with tone numbers, so Mandarin is spoken from the same sentences in pinyin by ``cmn-latn-pinyin``, and
its characters (one a syllable) are counted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from lyre.tts.budget import LANGUAGE_CHARS_PER_S, SLOWEST_CHARS_PER_S  # noqa: E402
from lyre.tts.text import clean  # noqa: E402

TEXTS = {
    "en": (
        "Sure, I can help with that.",
        "Your order shipped this morning and should arrive on Thursday, before noon.",
        "The pharmacy on Main Street closes at nine tonight, but the one by the station stays open until midnight.",
        "Let me check that for you. You have two meetings tomorrow, one at ten with the design team and one just "
        "after lunch with the people from finance, who asked to move it to the small room on the third floor.",
        "I found three flights to Boston on Friday: the earliest leaves at six fifteen and lands a little after "
        "eight, the second leaves at noon, and the last one leaves at seven in the evening, which is also the "
        "cheapest of the three by about forty dollars.",
        "Thanks for waiting.",
    ),
    "de": (
        "Ja, dabei helfe ich Ihnen gern.",
        "Ihre Bestellung wurde heute Morgen verschickt und sollte am Donnerstag vor Mittag ankommen.",
        "Die Apotheke in der Hauptstraße schließt heute um neun, aber die am Bahnhof hat bis Mitternacht geöffnet.",
        "Sie haben morgen zwei Termine, einen um zehn mit dem Designteam und einen kurz nach dem Mittagessen mit "
        "den Kollegen aus der Buchhaltung, die ihn in den kleinen Raum im dritten Stock verlegen möchten.",
        "Danke fürs Warten.",
    ),
    "fr": (
        "Bien sûr, je peux vous aider.",
        "Votre commande est partie ce matin et devrait arriver jeudi, avant midi.",
        "La pharmacie de la rue principale ferme à neuf heures ce soir, mais celle de la gare reste ouverte "
        "jusqu'à minuit.",
        "Vous avez deux réunions demain, une à dix heures avec l'équipe de design et une juste après le déjeuner "
        "avec les collègues de la comptabilité, qui voudraient la déplacer dans la petite salle du troisième étage.",
        "Merci de votre patience.",
    ),
    "es": (
        "Claro, puedo ayudarte con eso.",
        "Tu pedido salió esta mañana y debería llegar el jueves, antes del mediodía.",
        "La farmacia de la calle Mayor cierra a las nueve esta noche, pero la de la estación está abierta hasta "
        "medianoche.",
        "Mañana tienes dos reuniones, una a las diez con el equipo de diseño y otra justo después de comer con la "
        "gente de contabilidad, que quiere pasarla a la sala pequeña del tercer piso.",
        "Gracias por esperar.",
    ),
    "it": (
        "Certo, posso aiutarti.",
        "Il tuo ordine è partito stamattina e dovrebbe arrivare giovedì, prima di mezzogiorno.",
        "La farmacia in via Roma chiude alle nove stasera, ma quella vicino alla stazione resta aperta fino a "
        "mezzanotte.",
        "Domani hai due riunioni, una alle dieci con il gruppo di progettazione e una subito dopo pranzo con i "
        "colleghi della contabilità, che vorrebbero spostarla nella saletta al terzo piano.",
        "Grazie per l'attesa.",
    ),
    "zh": (
        "好的，我可以帮你。",
        "你的订单今天早上已经发货了，应该在星期四中午以前到。",
        "大街上的药店今晚九点关门，但是车站旁边那家一直开到半夜。",
        "你明天有两个会，一个是十点跟设计组开，另一个在午饭以后，跟财务部的同事开，他们想换到三楼的小会议室。",
        "谢谢你的耐心等待。",
    ),
    "ko": (
        "네, 도와드릴게요.",
        "주문하신 상품은 오늘 아침에 발송되었고 목요일 정오 전에 도착할 예정입니다.",
        "큰길에 있는 약국은 오늘 밤 아홉 시에 문을 닫지만, 역 옆에 있는 약국은 자정까지 열어요.",
        "내일 회의가 두 개 있어요. 하나는 열 시에 디자인 팀과 하고, 다른 하나는 점심 먹고 나서 회계팀 사람들과 "
        "하는데, 삼 층 작은 회의실로 옮기고 싶대요.",
        "기다려 주셔서 감사합니다.",
    ),
    "hi": (
        "हाँ, मैं आपकी मदद कर सकता हूँ।",
        "आपका ऑर्डर आज सुबह भेज दिया गया है और गुरुवार को दोपहर से पहले पहुँच जाना चाहिए।",
        "मुख्य सड़क वाली दवा की दुकान आज रात नौ बजे बंद होती है, लेकिन स्टेशन के पास वाली आधी रात तक खुली रहती है।",
        "कल आपकी दो बैठकें हैं, एक दस बजे डिज़ाइन टीम के साथ और दूसरी दोपहर के खाने के बाद हिसाब विभाग के लोगों के "
        "साथ, जो उसे तीसरी मंज़िल के छोटे कमरे में ले जाना चाहते हैं।",
        "इंतज़ार करने के लिए धन्यवाद।",
    ),
}
# The Mandarin sentences in pinyin, a syllable for each of their Han characters.
PINYIN = (
    "hao3 de5, wo3 ke3 yi3 bang1 ni3.",
    "ni3 de5 ding4 dan1 jin1 tian1 zao3 shang5 yi3 jing1 fa1 huo4 le5, ying1 gai1 zai4 xing1 qi1 si4 zhong1 wu3 "
    "yi3 qian2 dao4.",
    "da4 jie1 shang4 de5 yao4 dian4 jin1 wan3 jiu3 dian3 guan1 men2, dan4 shi4 che1 zhan4 pang2 bian1 na4 jia1 "
    "yi4 zhi2 kai1 dao4 ban4 ye4.",
    "ni3 ming2 tian1 you3 liang3 ge4 hui4, yi2 ge4 shi4 shi2 dian3 gen1 she4 ji4 zu3 kai1, ling4 yi2 ge4 zai4 wu3 "
    "fan4 yi3 hou4, gen1 cai2 wu4 bu4 de5 tong2 shi4 kai1, ta1 men5 xiang3 huan4 dao4 san1 lou2 de5 xiao3 hui4 "
    "yi4 shi4.",
    "xie4 xie5 ni3 de5 nai4 xin1 deng3 dai4.",
)
ESPEAK = (("en-us", 120), ("en-us", 150), ("en-us", 175), ("en-gb", 120), ("en-gb", 175))
# Other languages: espeak-ng's voice for each, at its slow and normal rates.
LANGUAGE_RATES = (120, 150, 175)
VOICES = {"de": "de", "fr": "fr-fr", "es": "es", "it": "it", "zh": "cmn-latn-pinyin", "ko": "ko", "hi": "hi"}
# English's budget rate sits this far below its slowest clip (9 against 10.3); every language's keeps the margin.
MARGIN = 9.0 / 10.3


def _espeak(text: str, voice: str, wpm: int) -> tuple[np.ndarray, int]:
    out = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text], capture_output=True,
                         check=True).stdout
    data = out.index(b"data") + 8
    return np.frombuffer(out[data:], np.int16).astype(np.float32) / 32768.0, 22050


def voiced_seconds(audio: np.ndarray, rate: int) -> float:
    """First to last 10 ms frame within 40 dB of the loudest."""
    hop = rate // 100
    frames = audio[: len(audio) // hop * hop].reshape(-1, hop)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() - 40)
    return (loud[-1] - loud[0] + 1) * hop / rate


class _Whisper:
    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        from lyre.stt.model import demo_whisper

        self.model = WhisperModel(str(demo_whisper()), device="cpu", compute_type="int8")

    def seconds(self, audio: np.ndarray, rate: int) -> float:
        from scipy.signal import resample_poly

        at16k = resample_poly(audio, 16000, rate).astype(np.float32)
        segments, _ = self.model.transcribe(at16k, language="en", word_timestamps=True, beam_size=1)
        words = [w for s in segments for w in (s.words or [])]
        return words[-1].end - words[0].start if words else float("nan")


def _speakers() -> list[tuple[str, object]]:
    speakers: list[tuple[str, object]] = [(f"espeak-ng {v} {wpm} wpm", (lambda t, v=v, wpm=wpm: _espeak(t, v, wpm)))
                                          for v, wpm in ESPEAK]
    try:
        import flite_events
    except ImportError:
        return speakers
    if flite_events.available():
        for voice in flite_events.FLITE_VOICES:
            def say(text: str, voice: str = voice) -> tuple[np.ndarray, int]:
                spoken = flite_events.synthesize(text, voice=voice)
                return spoken.audio.astype(np.float32) / 32768.0, spoken.rate
            speakers.append((f"flite {voice}", say))
    return speakers


def _languages() -> None:
    """Each language's clips at espeak-ng's slow and normal rates, and the budget rate the margin gives."""
    print(f"\n{'language':9} {'wpm':>4} {'chars/s voiced (min/median/max)':>32} {'slowest x margin':>17} {'budget':>7}")
    for language, voice in VOICES.items():
        spoken = PINYIN if language == "zh" else TEXTS[language]
        rates = {wpm: [len(clean(text).strip()) / voiced_seconds(*_espeak(said, voice, wpm))
                       for text, said in zip(TEXTS[language], spoken)] for wpm in LANGUAGE_RATES}
        slowest = min(min(r) for r in rates.values())
        for wpm, voiced in rates.items():
            print(f"{language:9} {wpm:4} {min(voiced):10.2f} {statistics.median(voiced):10.2f} {max(voiced):10.2f}"
                  + (f" {slowest * MARGIN:17.2f} {LANGUAGE_CHARS_PER_S[language]:7g}" if wpm == LANGUAGE_RATES[0]
                     else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--whisper", action="store_true", help="also time each English clip by Whisper's word times")
    args = parser.parse_args()
    whisper = _Whisper() if args.whisper else None
    print(f"{'speaker':26} {'chars/s voiced (min/median/max)':>32}" + (f" {'chars/s by Whisper':>26}" if whisper else ""))
    slowest = float("inf")
    for name, say in _speakers():
        voiced, timed = [], []
        for text in TEXTS["en"]:
            audio, rate = say(text)  # type: ignore[operator]
            voiced.append(len(text) / voiced_seconds(audio, rate))
            if whisper is not None:
                timed.append(len(text) / whisper.seconds(audio, rate))
        slowest = min(slowest, *voiced, *(timed or [float("inf")]))
        row = f"{name:26} {min(voiced):10.1f} {statistics.median(voiced):10.1f} {max(voiced):10.1f}"
        if timed:
            row += f" {min(timed):8.1f} {statistics.median(timed):8.1f} {max(timed):8.1f}"
        print(row)
    print(f"slowest clip: {slowest:.1f} chars/s; the budget assumes {SLOWEST_CHARS_PER_S:g} "
          f"({slowest / SLOWEST_CHARS_PER_S:.2f}x slower than the slowest clip)")
    _languages()


if __name__ == "__main__":
    main()
