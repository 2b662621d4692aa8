"""Admission's refusals for streams that cannot be served (lyre.server.admission): the reason given is told."""

from __future__ import annotations

import asyncio

import pytest

from lyre.server.admission import Admission, Overloaded


def _admit(overloaded: object) -> str | None:
    admission = Admission(max_active=4, max_queue=4, timeout_s=1.0)

    async def main() -> str | None:
        try:
            async with admission.slot(overloaded):  # type: ignore[arg-type]
                return None
        except Overloaded as exc:
            assert exc.retry_after_s == 1 and admission.active == 0
            return str(exc)
    return asyncio.run(main())


@pytest.mark.parametrize(("answer", "told"), [
    (False, None),
    (True, "server is at capacity: its streams are falling behind their listeners; retry shortly"),
    ("1 of its 1 streams ran dry in the last 2 s", "server is at capacity: 1 of its 1 streams ran dry in the last 2 s; "
                                                  "retry shortly"),
])
def test_a_stream_is_refused_with_the_reason_the_pipeline_gives(answer: bool | str, told: str | None) -> None:
    assert _admit(lambda: answer) == told
