"""Every server event a GA Realtime session sends, held to the openai SDK's own types, strictly.

    check_event(event)                 # AssertionError naming the event and what of it the SDK rejects
    check_event(event, lyre=True)      # a session that asked for lyre's own events and fields

The SDK's models take unknown fields silently (``extra="allow"``), so a plain
validation would let through a field a strict client drops; here a field the
SDK's type does not name fails, wherever it sits, except the one namespaced
``lyre`` key a session object carries to report what it refused, and the
session's ``id`` and ``object``, which OpenAI's own server sends in
``session.created`` and ``.updated`` though the SDK's type leaves them out. A session
that turned lyre's own events on (``"lyre": {"events": true}``) may also see
``lyre.*`` events and ``lyre`` keys anywhere.
"""

from __future__ import annotations

from typing import Any

import pydantic
from openai._models import BaseModel
from openai.types.realtime import RealtimeServerEvent

__all__ = ["check_event", "check_events"]

_SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)


def check_event(event: dict[str, Any], lyre: bool = False) -> None:
    """``event`` is one the openai SDK's ``RealtimeServerEvent`` union reads, with no field it does not name."""
    if lyre and event["type"].startswith("lyre."):
        return
    try:
        parsed = _SERVER_EVENT.validate_python(event)
    except pydantic.ValidationError as exc:
        raise AssertionError(f"{event['type']}: the SDK rejects it: {exc}\n{_short(event)}") from None
    extras = list(_extras(parsed, event["type"]))
    if event["type"] in ("session.created", "session.updated"):
        extras = [path for path in extras
                  if path.removeprefix(f"{event['type']}.session.") not in ("lyre", "id", "object")]
    if lyre:
        extras = [path for path in extras if not path.rsplit(".", 1)[-1] == "lyre"]
    assert not extras, f"{event['type']}: fields the SDK's types do not have: {extras}\n{_short(event)}"


def check_events(events: list[dict[str, Any]], lyre: bool = False) -> None:
    for event in events:
        check_event(event, lyre)


def _extras(value: Any, path: str) -> Any:
    """The dotted paths of the fields a parsed model holds beyond its declared ones."""
    if isinstance(value, BaseModel):
        for name in value.model_extra or {}:
            yield f"{path}.{name}"
        for name in type(value).model_fields:
            yield from _extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _extras(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _extras(item, f"{path}.{key}")


def _short(event: dict[str, Any]) -> str:
    text = repr({k: (v[:40] + "..." if isinstance(v, str) and len(v) > 40 else v) for k, v in event.items()})
    return text[:1500]
