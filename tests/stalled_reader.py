"""A WebSocket client that stops reading, for the tests of a server's write timeout (``--write-timeout``): it
shakes hands, sends what it is told, and takes nothing more, its receive buffer kept small so the server's
buffers fill within seconds, as a stalled player's would. At the end it reads everything to the end of the
connection.

    reader = StalledReader("ws://127.0.0.1:8000/v1/tts/websocket", {"Authorization": "Bearer KEY"})
    reader.send({"context_id": "c1", ...})          # then nothing read
    code, reason = reader.to_the_end()              # the server's close frame (None, "" when none came)
    reader.close()

Sans-io (websockets' ClientProtocol over a plain socket): an asyncio client library would go on reading in
the background.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.uri import parse_uri

__all__ = ["StalledReader"]

_RECEIVE_BUFFER = 4096  # bytes: the kernel doubles it, and the window it offers stays that small


class StalledReader:
    """One WebSocket that stops reading after its handshake; see the module docstring."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        uri = parse_uri(url)
        self.client = ClientProtocol(uri, max_size=None)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
        self.sock.connect((uri.host, uri.port))
        request = self.client.connect()
        for name, value in (headers or {}).items():
            request.headers[name] = value
        self.client.send_request(request)
        self._flush()
        while self.client.state is State.CONNECTING:
            self.client.receive_data(self.sock.recv(_RECEIVE_BUFFER))
        assert self.client.state is State.OPEN, self.client.handshake_exc

    def send(self, message: dict[str, Any] | str) -> None:
        self.client.send_text((message if isinstance(message, str) else json.dumps(message)).encode())
        self._flush()

    def to_the_end(self, timeout: float = 60.0) -> tuple[int | None, str]:
        """Read all the server sent until the connection ends (answering its close, if one comes); the close
        frame's code and reason, or (None, "") when the connection ended without one. A reset ends it too: a
        server that closes a socket with what the client sent unread resets it."""
        self.sock.settimeout(timeout)
        try:
            while data := self.sock.recv(1 << 16):
                self.client.receive_data(data)
                self.client.events_received()  # the frames are not wanted: only the close at the end
                try:
                    self._flush()  # the answer to a close
                except OSError:
                    pass  # the server has closed its side already
        except ConnectionResetError:
            pass
        self.client.receive_eof()
        close = self.client.close_rcvd
        return (close.code, close.reason) if close is not None else (None, "")

    def close(self) -> None:
        self.sock.close()

    def _flush(self) -> None:
        if data := b"".join(self.client.data_to_send()):
            self.sock.sendall(data)
