"""Word times in the languages Orpheus speaks besides English, against the truth, through lyre's own aligner.

Truth as for English (tests/align_truth.py): whole sentences spoken in one go by
libespeak-ng, words running together, each word's start and end read from the
synthesiser's own word and pause events, a faint noise floor (-70 dBFS) added.
The words are lyre's (`written_words`: Mandarin's by jieba); a word is timed
from its first character's word event to its last's end (espeak-ng reads
Mandarin a character at a time, one event each). A word espeak-ng joins to the
one before (no event of its own) has no known start and its neighbour no known
end: those boundaries are left out. Each sentence is aligned by
``lyre.server.aligner.Aligner`` under ``auto`` (English by phones, every other
language by Whisper, the demo Whisper base unless ``--model``) and scored on
every known boundary: median and p95 absolute error, the share within 50 ms,
the median signed error (negative: early), and the longest word placed.

    OMP_NUM_THREADS=4 .venv/bin/python benchmarks/word_timing_languages.py [--languages de,zh] [--model WHISPER]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from align_truth import EDGE_S, NOISE_DBFS, RATE, _word_times  # noqa: E402
from espeak_events import synthesize  # noqa: E402
from speech import resample  # noqa: E402

from lyre.server.aligner import Aligner  # noqa: E402
from lyre.stt import STTConfig, Transcriber, written_words  # noqa: E402

# Debian's espeak-ng (1.51) reads most Chinese characters as their pinyin spelled out in English ("xiang
# three"): Mandarin is spoken from its pinyin, written here by hand, by the pinyin voice, one word event a
# syllable, each the character at its place.
MANDARIN = {
    "我想预订明天晚上的两人餐桌。": "wo3 xiang3 yu4 ding4 ming2 tian1 wan3 shang4 de5 liang3 ren2 can1 zhuo1.",
    "车站旁边的药店今天晚上九点关门。": "che1 zhan4 pang2 bian1 de5 yao4 dian4 jin1 tian1 wan3 shang4 jiu3 dian3 guan1 men2.",
    "请把收据发到我的电子邮箱，谢谢。": "qing3 ba3 shou1 ju4 fa1 dao4 wo3 de5 dian4 zi3 you2 xiang1, xie4 xie5.",
    "您的包裹今天早上已经发出，星期四就能到。":
        "nin2 de5 bao1 guo3 jin1 tian1 zao3 shang4 yi3 jing1 fa1 chu1, xing1 qi1 si4 jiu4 neng2 dao4.",
    "今天天气很好，我们一起去公园散步吧。": "jin1 tian1 tian1 qi4 hen3 hao3, wo3 men5 yi4 qi3 qu4 gong1 yuan2 san4 bu4 ba5.",
}

# (espeak-ng voice, its rate in words a minute, sentences): what a voice agent says, plain and everyday.
LANGUAGES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "en": ("en-us", 160, (
        "I would like to book a table for dinner tomorrow evening.",
        "The meeting moved to Friday, so I need a later flight.",
        "Could you send the receipt to my email address?",
        "Your package shipped this morning and should arrive on Thursday.",
    )),
    "de": ("de", 160, (
        "Ich möchte für morgen Abend einen Tisch für zwei Personen reservieren.",
        "Die Apotheke am Bahnhof hat heute bis neun Uhr geöffnet.",
        "Können Sie mir die Rechnung bitte per E-Mail schicken?",
        "Ihr Paket wurde heute Morgen verschickt und kommt am Donnerstag an.",
    )),
    "fr": ("fr", 160, (
        "Je voudrais réserver une table pour deux personnes demain soir.",
        "La pharmacie près de la gare ferme à neuf heures ce soir.",
        "Pouvez-vous m'envoyer le reçu par courriel, s'il vous plaît ?",
        "Votre colis est parti ce matin et devrait arriver jeudi.",
    )),
    "es": ("es", 160, (
        "Me gustaría reservar una mesa para dos personas mañana por la noche.",
        "La farmacia de la estación cierra a las nueve esta noche.",
        "¿Podría enviarme el recibo a mi correo electrónico?",
        "Su paquete salió esta mañana y debería llegar el jueves.",
    )),
    "it": ("it", 160, (
        "Vorrei prenotare un tavolo per due persone domani sera.",
        "La farmacia vicino alla stazione chiude alle nove stasera.",
        "Potrebbe mandarmi la ricevuta per posta elettronica?",
        "Il suo pacco è partito stamattina e dovrebbe arrivare giovedì.",
    )),
    "zh": ("cmn-latn-pinyin", 200, tuple(MANDARIN)),
    "ko": ("ko", 160, (
        "내일 저녁에 두 사람 자리를 예약하고 싶어요.",
        "역 옆에 있는 약국은 오늘 밤 아홉 시에 문을 닫아요.",
        "영수증을 제 이메일로 보내 주실 수 있나요?",
        "고객님의 택배는 오늘 아침에 발송되었고 목요일에 도착합니다.",
    )),
    "hi": ("hi", 160, (
        "मैं कल शाम के लिए दो लोगों की मेज़ बुक करना चाहता हूँ।",
        "स्टेशन के पास वाली दवा की दुकान आज रात नौ बजे बंद होती है।",
        "क्या आप रसीद मेरे ईमेल पर भेज सकते हैं?",
        "आपका पार्सल आज सुबह भेजा गया और गुरुवार को पहुँचेगा।",
    )),
}

Truth = list[tuple[str, float | None, float | None]]  # each written word, its true start and end (s)


def _spans(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Each word's characters in ``text``, [first, past last), found in order by its characters other than
    whitespace."""
    spans, at = [], 0
    for word in words:
        first = None
        for ch in word.replace(" ", ""):
            while text[at] != ch:
                at += 1
            first = at if first is None else first
            at += 1
        spans.append((first, at))
    return spans


def spoken(text: str, language: str, voice: str, wpm: int, seed: int) -> tuple[np.ndarray, Truth]:
    """``text`` spoken in one go by espeak-ng (float32, 16 kHz, edges of silence, a noise floor), and its
    words (as lyre writes them) with their true times."""
    reading = MANDARIN.get(text)
    said = synthesize(reading or text, voice, wpm)
    said = replace(said, words=[w for w in said.words if w[1]])  # not the empty event a pause may bring
    events = _word_times(said)
    if reading is not None:  # the k-th syllable's event is the k-th character's
        syllables = [m.start() for m in re.finditer(r"\S+", reading)]
        characters = [i for i, ch in enumerate(text) if ch.isalnum()]
        assert len(syllables) == len(characters), text
        events = [(characters[syllables.index(char)], start, end) for char, start, end in events]
    words = written_words(text, language)
    truth: Truth = []
    for word, (a, b) in zip(words, _spans(text, words)):
        inside = [(start, end) for char, start, end in events if a <= char < b]
        if inside:
            truth.append((word, EDGE_S + inside[0][0] / said.rate, EDGE_S + inside[-1][1] / said.rate))
        elif truth:  # said within the word before: neither boundary between them is known
            truth[-1] = (truth[-1][0], truth[-1][1], None)
            truth.append((word, None, None))
        else:
            truth.append((word, None, None))
    edge = np.zeros(int(EDGE_S * RATE), np.float32)
    audio = np.concatenate([edge, resample(said.audio, RATE, said.rate), edge])
    noise = np.random.default_rng(seed).standard_normal(audio.size) * 10 ** (NOISE_DBFS / 20)
    return (audio + noise).astype(np.float32), truth


async def _measure(aligner: Aligner, language: str) -> str:
    voice, wpm, sentences = LANGUAGES[language]
    errors: list[float] = []
    audio_s = longest = 0.0
    words = 0
    for i, text in enumerate(sentences):
        audio, truth = spoken(text, language, voice, wpm, seed=i)
        audio_s += audio.size / RATE
        found = (await aligner.align(audio, [w for w, _, _ in truth], language, session=(language, i))).words
        words += len(found)
        longest = max(longest, *(w.end - w.start for w in found))
        for (_, start, end), word in zip(truth, found):
            errors += [word.start - start] if start is not None else []
            errors += [word.end - end] if end is not None else []
    e = np.array(errors)
    a = np.abs(e)
    placed_by = ",".join(name for name, count in aligner.stats().alignments.items() if count)
    return (f"{language:4s} {voice:15s} {placed_by:8s} "
            f"{len(sentences):3d} {audio_s:5.1f} {words:5d} {len(e):5d} {1000 * np.median(a):7.1f} "
            f"{1000 * np.percentile(a, 95):7.1f} {np.mean(a <= 0.05):6.1%} {1000 * np.median(e):+7.1f} "
            f"{longest:6.2f}")


async def _main(args: argparse.Namespace) -> None:
    stt = Transcriber.load(args.model, STTConfig(cpu_threads=args.threads))
    print(f"{'lang':4s} {'voice':15s} {'aligner':8s} {'n':>3s} {'audio':>5s} {'words':>5s} {'bound':>5s} "
          f"{'median':>7s} {'p95':>7s} {'<=50ms':>6s} {'bias':>7s} {'longest':>6s}")
    try:
        for language in args.languages.split(","):
            aligner = Aligner(None, stt, "cpu")  # one per language: its counts say which aligner placed them
            print(await _measure(aligner, language), flush=True)
            await aligner.aclose()
    finally:
        stt.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--languages", default=",".join(LANGUAGES))
    p.add_argument("--model", help="a CTranslate2 Whisper folder or hub id (default: the built-in Whisper base)")
    p.add_argument("--threads", type=int, default=4, help="Whisper's CPU threads")
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
