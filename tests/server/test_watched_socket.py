"""lyre.server.watched_socket alone, over a stand-in socket whose sends wait while it is not writable (as
uvicorn's do while the transport's buffer is full): a send that waits the write timeout cuts the socket, every
later send fails at once, the reader is woken, and the close names the stall. The surfaces, end to end:
tests/server/test_websocket.py, tests/agent/test_agent_events.py, tests/server/calls/test_twilio.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect, WebSocketState

from lyre.server.watched_socket import STALLED, Gone, Stalled, WatchedSocket

TIMEOUT_S = 0.05


class _Socket:
    """A WebSocket's sends and receives: a send waits until ``writable`` is set; it fails once ``gone``."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.gone = False
        self.client_state = self.application_state = WebSocketState.CONNECTED

    async def send_text(self, text: str) -> None:
        await self.writable.wait()
        if self.gone:
            raise WebSocketDisconnect(1006)
        self.sent.append(text)

    async def receive(self) -> dict[str, Any]:
        return await self.incoming.get()

    async def close(self, code: int, reason: str) -> None:
        await self.writable.wait()
        self.closed = (code, reason)
        self.application_state = WebSocketState.DISCONNECTED


def _watched() -> tuple[_Socket, WatchedSocket, list[None]]:
    socket, stalls = _Socket(), []
    return socket, WatchedSocket(socket, TIMEOUT_S, lambda: stalls.append(None)), stalls  # type: ignore[arg-type]


def test_a_send_left_untaken_cuts_the_socket_wakes_its_reader_and_the_close_names_it() -> None:
    async def run() -> tuple[_Socket, list[None], BaseException | None]:
        socket, watched, stalls = _watched()
        reader = asyncio.create_task(watched.receive())
        await asyncio.sleep(0)  # the reader waits for a message
        with pytest.raises(Stalled):
            await watched.send_text("never taken")
        with pytest.raises(Stalled):
            await watched.send_text("after the cut")  # at once: nothing goes after a gap
        woken = await asyncio.gather(reader, return_exceptions=True)
        socket.writable.set()  # the listener reads again: the close goes out behind what it had not taken
        assert watched.stall is not None
        await watched.close(STALLED, str(watched.stall))
        return socket, stalls, woken[0]

    socket, stalls, woken = asyncio.run(run())
    assert isinstance(woken, Stalled)
    assert len(stalls) == 1 and socket.sent == []
    assert socket.closed == (1008, "the listener took nothing for 0.05 s")


def test_a_reader_busy_elsewhere_is_told_at_its_next_receive_and_a_close_never_taken_gives_up() -> None:
    async def run() -> _Socket:
        socket, watched, _ = _watched()
        with pytest.raises(Stalled):
            await watched.send_text("never taken")
        socket.incoming.put_nowait({"type": "websocket.receive", "text": "{}"})
        with pytest.raises(Stalled):
            await watched.receive()  # the cut first, though a message waits
        await watched.close(STALLED, "stalled", within=TIMEOUT_S)
        return socket

    assert asyncio.run(run()).closed is None


def test_a_client_gone_wakes_the_reader_with_a_disconnect_and_no_stall_counted() -> None:
    async def run() -> tuple[dict[str, Any], list[None]]:
        socket, watched, stalls = _watched()
        socket.writable.set()
        await watched.send_text("taken")
        reader = asyncio.create_task(watched.receive())
        await asyncio.sleep(0)
        socket.gone = True  # uvicorn: the client has left, or a ping went unanswered
        with pytest.raises(Gone) as gone:
            await watched.send_text("lost")
        assert not isinstance(gone.value, Stalled)
        return await reader, stalls

    message, stalls = asyncio.run(run())
    assert message["type"] == "websocket.disconnect" and stalls == []


def test_a_reader_cancelled_from_outside_stays_cancelled_and_reads_on() -> None:
    async def run() -> dict[str, Any]:
        socket, watched, _ = _watched()
        with pytest.raises(TimeoutError):  # the surface's own idle timeout, say
            async with asyncio.timeout(TIMEOUT_S):
                await watched.receive()
        socket.incoming.put_nowait({"type": "websocket.receive", "text": "hello"})
        return await watched.receive()

    assert asyncio.run(run()) == {"type": "websocket.receive", "text": "hello"}
