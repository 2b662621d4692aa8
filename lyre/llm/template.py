"""Chat templates: a model's own Jinja template turns messages into its prompt text.

Rendered as transformers renders them (a sandboxed environment, trim_blocks
and lstrip_blocks, ``raise_exception``, ``strftime_now`` and a ``tojson`` that
keeps non-ASCII text), so a template written for transformers renders the same
prompt here. The sandbox matters: a template comes with a downloaded model and
must not reach Python objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "TemplateError"]


class TemplateError(ValueError):
    """The template refused the messages (or failed on them); ``param`` names the request field."""

    param = "messages"


def _raise_exception(message: str) -> None:
    raise TemplateError(f"messages: the model's chat template refused them: {message}")


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """One compiled chat template and the special tokens it may refer to."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(f"the model's chat template does not compile: {error}") from None
        self.source = source
        self.special_tokens = dict(special_tokens)  # bos_token, eos_token, ... as the template names them

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (dicts with ``role`` and string ``content``)."""
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
            )
        except TemplateError:
            raise
        except (jinja2.TemplateError, TypeError) as error:  # TypeError: e.g. str + None in a template
            raise TemplateError(f"messages: the model's chat template failed on them: {error}") from None
