"""SSML's basics, read into pieces of text, readings, pauses and boundaries.

    pieces, warnings = parse_ssml('<speak>Hi <break time="500ms"/> <say-as interpret-as="characters">ABC'
                                  '</say-as></speak>')
    # [Text("Hi "), Pause(500), Text(" "), Fixed("ABC", "A B C")], []

Understood: ``<speak>``, ``<break time="500ms|2s" strength="none..x-strong">``, ``<say-as interpret-as=
"characters|spell-out|cardinal|ordinal|digits|date|time|telephone" format="mdy">``, ``<sub alias>``, ``<p>``
and ``<s>`` (segment boundaries), and Orpheus's emotion tags as empty elements (``<laugh/>``). Any other element
is read as its text, with a warning. Malformed SSML raises `SSMLError` naming the problem.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from types import ModuleType

from lyre.text.said import Pause

__all__ = ["Boundary", "Fixed", "MAX_BREAK_MS", "MAX_DEPTH", "SSMLError", "Text", "is_ssml", "parse_ssml"]

MAX_BREAK_MS = 10_000
# Elements nested deeper than this are refused: real documents nest a few levels (speak, p, s, say-as).
MAX_DEPTH = 32
# SSML 1.1's strengths; "medium" is the default of a <break/> with neither attribute.
_STRENGTHS = {"none": 0, "x-weak": 100, "weak": 250, "medium": 500, "strong": 750, "x-strong": 1000}
_EMOTIVE = frozenset({"laugh", "chuckle", "sigh", "cough", "sniffle", "groan", "yawn", "gasp"})
_SAY_AS = frozenset({"characters", "cardinal", "ordinal", "digits", "date", "time", "telephone"})


class SSMLError(ValueError):
    """Malformed or refused SSML; the message names the problem."""


@dataclass(frozen=True)
class Text:
    """Text to read by the language's rules."""

    text: str


@dataclass(frozen=True)
class Fixed:
    """Written text whose reading is given (``<say-as>``, ``<sub>``)."""

    written: str
    spoken: str


@dataclass(frozen=True)
class Boundary:
    """A segment ends here (``<p>``, ``<s>``)."""


Piece = Text | Fixed | Pause | Boundary


def is_ssml(text: str) -> bool:
    """Whether ``text`` asks to be read as SSML by itself: it starts with ``<speak``."""
    return text.lstrip().startswith("<speak")


def parse_ssml(document: str, rules: ModuleType | None = None) -> tuple[list[Piece], list[str]]:
    """``document``'s pieces in order, and a warning for each thing not understood. A document that does not
    start with ``<speak>`` is taken as the inside of one. ``rules``: the language's package, for ``<say-as>``
    (None: no language rules; say-as is then read as plain text, with a warning)."""
    if "<!DOCTYPE" in document or "<!ENTITY" in document:
        raise SSMLError("ssml: DOCTYPE and ENTITY declarations are not allowed")
    if not is_ssml(document):
        document = f"<speak>{document}</speak>"
    try:
        root = ET.fromstring(document.strip())
    except ET.ParseError as exc:
        raise SSMLError(f"ssml: malformed: {exc}") from None
    if _name(root) != "speak":
        raise SSMLError(f"ssml: the root element must be <speak>, not <{_name(root)}>")
    if (depth := _depth(root)) > MAX_DEPTH:
        raise SSMLError(f"ssml: elements nested {depth} deep; at most {MAX_DEPTH}")
    pieces: list[Piece] = []
    warnings: list[str] = []
    _walk(root, pieces, warnings, rules)
    return pieces, list(dict.fromkeys(warnings))


def _depth(root: ET.Element) -> int:
    """How deep ``root``'s elements nest (1: no children), found without recursion."""
    deepest, level = 0, [(root, 1)]
    while level:
        element, depth = level.pop()
        deepest = max(deepest, depth)
        level.extend((child, depth + 1) for child in element)
    return deepest


def _name(element: ET.Element) -> str:
    return element.tag.rsplit("}", 1)[-1] if isinstance(element.tag, str) else ""


def _text(element: ET.Element) -> str:
    return "".join(element.itertext())


def _walk(element: ET.Element, out: list[Piece], warnings: list[str], rules: ModuleType | None) -> None:
    """``element``'s own text and children (not its tail) into ``out``."""
    if element.text:
        out.append(Text(element.text))
    for child in element:
        _element(child, out, warnings, rules)
        if child.tail:
            out.append(Text(child.tail))


def _element(element: ET.Element, out: list[Piece], warnings: list[str], rules: ModuleType | None) -> None:
    name = _name(element)
    if name in _EMOTIVE:
        out.append(Text(f" <{name}> "))
    elif name == "break":
        out.append(Pause(_break_ms(element)))
    elif name == "say-as":
        out.append(_say_as(element, warnings, rules))
    elif name == "sub":
        alias = element.get("alias")
        if alias is None:
            raise SSMLError("ssml: <sub> needs an alias attribute (what to say instead of its text)")
        out.append(Fixed(_text(element), alias))
    elif name in ("p", "s", "paragraph", "sentence"):
        out.append(Boundary())
        _walk(element, out, warnings, rules)
        out.append(Boundary())
    else:
        if name != "speak":
            warnings.append(f"<{name}> is not supported; its text is read")
        _walk(element, out, warnings, rules)


def _break_ms(element: ET.Element) -> int:
    time, strength = element.get("time"), element.get("strength")
    if time is not None:
        value = time.strip().lower()
        try:
            ms = float(value[:-2]) if value.endswith("ms") else float(value[:-1]) * 1000 if value.endswith("s") \
                else float("nan")
        except ValueError:
            ms = float("nan")
        if not 0 <= ms <= MAX_BREAK_MS:  # NaN fails too
            raise SSMLError(f"ssml: <break time={time!r}>: give a time such as '500ms' or '2s', at most "
                            f"{MAX_BREAK_MS // 1000} s")
        return round(ms)
    if strength is None:
        return _STRENGTHS["medium"]
    if strength not in _STRENGTHS:
        raise SSMLError(f"ssml: <break strength={strength!r}>: use one of {', '.join(_STRENGTHS)}")
    return _STRENGTHS[strength]


def _say_as(element: ET.Element, warnings: list[str], rules: ModuleType | None) -> Piece:
    kind = element.get("interpret-as")
    text = _text(element)
    if kind is None:
        raise SSMLError("ssml: <say-as> needs an interpret-as attribute")
    kind = "characters" if kind == "spell-out" else kind
    if kind not in _SAY_AS:
        warnings.append(f"<say-as interpret-as={kind!r}> is not supported; its text is read")
        return Text(text)
    spoken = rules.say_as(kind, text, element.get("format")) if rules is not None else None
    if spoken is None:
        warnings.append(f"<say-as interpret-as={kind!r}>: {text.strip()!r} cannot be read as {kind}; it is read "
                        "as written")
        return Text(text)
    return Fixed(text, spoken)
