"""A setting's value from the text of an environment variable or a file, or from its TOML value, checked against
what its flag takes (lyre.cli.settings); and a URL shown without its password."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

__all__ = ["from_text", "from_toml", "read_value_file", "without_password"]

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class _Setting(Protocol):
    """A setting (lyre.cli.settings): its parser action, and what it takes, in words."""

    action: argparse.Action

    @property
    def kind(self) -> str: ...


def read_value_file(path: str, what: str) -> str:
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    return text[:-1] if text.endswith("\n") else text


def from_text(setting: _Setting, text: str, what: str) -> Any:
    """A setting's value from an environment variable's text (a list: one item, or a JSON array)."""
    action = setting.action
    if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        if text.strip().lower() in _TRUE:
            return True
        if text.strip().lower() in _FALSE:
            return False
        raise ValueError(f"{what} takes true or false (or 1, 0, yes, no, on, off), got {text!r}")
    if isinstance(action, argparse._AppendAction):
        items = [text]
        if text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{what} takes one value or a JSON array of them: {exc}") from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ValueError(f"{what} takes one value or a JSON array of strings, got {text!r}")
        return [_one(setting, item, what) for item in items]
    return _one(setting, text, what)


def _one(setting: _Setting, text: str, what: str) -> Any:
    action = setting.action
    convert = action.type or str
    try:
        value = convert(text)  # type: ignore[operator]
    except (TypeError, ValueError):
        raise ValueError(f"{what} takes {setting.kind}, got {text!r}") from None
    if action.choices and value not in action.choices:
        raise ValueError(f"{what} takes {setting.kind}, got {text!r}")
    return value


def from_toml(setting: _Setting, value: Any, what: str) -> Any:
    """A setting's value from the file, of the type TOML gave it."""
    action = setting.action
    bad = ValueError(f"{what} takes {setting.kind}, got {value!r}")
    if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        if not isinstance(value, bool):
            raise bad
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_scalar(setting, item, bad) for item in items]
    return _scalar(setting, value, bad)


def _scalar(setting: _Setting, value: Any, bad: ValueError) -> Any:
    action = setting.action
    if isinstance(value, bool):
        raise bad
    if action.type is int:
        if not isinstance(value, int):
            raise bad
    elif action.type is float:
        if not isinstance(value, (int, float)):
            raise bad
        value = float(value)
    elif not isinstance(value, str):
        raise bad
    if action.choices and value not in action.choices:
        raise bad
    return value


def without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:" if parts.username else ":"
    return urlunsplit(parts._replace(netloc=f"{user}********@{host}"))
