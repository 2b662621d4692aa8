"""What a server's failure says, in the gate's errors: its own message, or why it could not be asked."""

from __future__ import annotations

import httpx

__all__ = ["message", "unreachable"]

_CHARS = 300  # of a reply's body, in an error


def message(response: httpx.Response) -> str:
    """The OpenAI-shaped error's message of ``response``, else the start of its body."""
    try:
        return str(response.json()["error"]["message"])[:_CHARS]
    except (ValueError, KeyError, TypeError):
        return response.text[:_CHARS]


def unreachable(url: str, exc: httpx.HTTPError) -> ValueError:
    """The error for a server that could not be asked, or gave no answer (within --timeout)."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ValueError(f"cannot reach the server at {url} ({type(exc).__name__}: {exc})")
    return ValueError(f"the server at {url} gave no answer ({type(exc).__name__}: {exc}; --timeout sets how long "
                      "to wait)")
