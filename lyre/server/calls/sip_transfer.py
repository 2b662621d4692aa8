"""A SIP call handed on: the agent's ``transfer_call`` tool sends a REFER (RFC 3515, a blind transfer) to one
of the targets the configuration names (``--sip-transfer NAME=URI``, read by
lyre.server.config.transfer_target), never anywhere else.

    transfers = Transfers(targets)                         # NAME -> sip: or tel: URI
    transfers.refer(call, "sales")                          # False: no such target, nothing sent
    transfers.progress(call_id, status)                     # the caller's NOTIFYs: True once it has connected

The caller's side calls the target and reports with NOTIFYs; once one says 2xx the transfer is done and
lyre leaves the call (sip_server sends BYE).
"""

from __future__ import annotations

import logging

from aiosipua import IncomingCall, SipUAC

__all__ = ["Transfers"]

log = logging.getLogger("lyre.server.sip")


class Transfers:
    """The allowed targets, and the calls whose transfer is under way."""

    def __init__(self, targets: tuple[tuple[str, str], ...]) -> None:
        self.targets = dict(targets)
        self.pending: dict[str, str] = {}  # call id -> the target's name

    def refer(self, call: IncomingCall, name: str) -> bool:
        if (uri := self.targets.get(name)) is None:
            log.warning("SIP call %s: transfer_call to %r refused: not one of --sip-transfer's %s", call.call_id,
                        name[:80], sorted(self.targets))
            return False
        assert call.transport is not None
        SipUAC(call.transport).send_refer(call.dialog, uri, call.source_addr)
        self.pending[call.call_id] = name
        log.info("SIP call %s: REFER to %s (%s)", call.call_id, name, uri)
        return True

    def progress(self, call_id: str, status: int) -> bool:
        """A NOTIFY of a transfer: True when it says the target answered."""
        if call_id not in self.pending or status < 200:
            return False
        name = self.pending.pop(call_id)
        if status >= 300:
            log.warning("SIP call %s: the transfer to %s failed (%d)", call_id, name, status)
            return False
        return True

    def forget(self, call_id: str) -> None:
        self.pending.pop(call_id, None)
