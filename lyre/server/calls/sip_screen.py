"""The SIP requests lyre answers itself before aiosipua sees them, where aiosipua would do the wrong thing
with a request a hostile or confused peer sends (lyre.server.calls.sip_server calls ``screen`` for each):

- method names are case-sensitive (RFC 3261 7.1): "invite" is a method lyre does not take, 405 (aiosipua would
  take it for an INVITE and keep a transaction no one removes); a CSeq that names another method than the
  request line's, 400;
- an INVITE without a To-tag for a call lyre holds is a retransmission (its answer is on the way: aiosipua
  resends the 200 until the ACK), dropped;
- an INVITE with a To-tag belongs to a dialog: unless one is confirmed under its Call-ID, 481 (aiosipua would
  take it for a new call and put it in place of a ringing one);
- a CANCEL must match its INVITE's transaction by branch, Call-ID and CSeq number (RFC 3261 9.2; aiosipua
  matches the branch alone, and lyre would end the call the CANCEL names): 481 if not; and a CANCEL of a call
  already answered has no effect (200; aiosipua would drop the answered call's dialog).

    if screen(uas, request, held=call_ids_lyre_holds):
        uas._on_message(request, addr)
"""

from __future__ import annotations

from collections.abc import Container

from aiosipua import IncomingCall, SipRequest, SipResponse, SipUAS
from aiosipua.dialog import DialogState
from aiosipua.utils import generate_tag

__all__ = ["drop_stray", "reply", "screen"]


def screen(uas: SipUAS, request: SipRequest, held: Container[str]) -> bool:
    """Whether aiosipua should have ``request``; if not, it has been answered (or dropped) here."""
    call_id = request.call_id or ""
    if request.method != request.method.upper():
        reply(uas, request, 405, "Method Not Allowed")
        return False
    if request.cseq is not None and request.cseq.method != request.method:
        reply(uas, request, 400, "CSeq Method Does Not Match")
        return False
    if request.method == "INVITE":
        if "tag=" not in (request.headers.get_first("to") or ""):
            return call_id not in held  # held: a retransmission
        call = uas._calls.get(call_id)
        if call is None or call.dialog.state != DialogState.CONFIRMED:
            reply(uas, request, 481, "Call/Transaction Does Not Exist")
            return False
        return True
    if request.method == "CANCEL":
        vias = request.via
        branch = vias[0].branch if vias else None
        txn = uas.transactions.get_server(branch, "INVITE") if branch else None
        invite = txn.request if txn is not None else None
        if (invite is None or invite.call_id != call_id or invite.cseq is None or request.cseq is None
                or invite.cseq.seq != request.cseq.seq):
            reply(uas, request, 481, "Call/Transaction Does Not Exist")
            return False
        call = uas._calls.get(call_id)
        if call is not None and call._answered:
            reply(uas, request, 200, "OK")  # too late to cancel: the call goes on, to be ended by a BYE
            return False
    return True


def drop_stray(uas: SipUAS, request: SipRequest) -> IncomingCall | None:
    """What aiosipua began for a request that then failed, for a call lyre never took: its server transaction
    removed (an INVITE whose offer did not parse left one for good), and its call (if one was made) ended and
    returned, for the caller to forget."""
    call = uas._calls.get(request.call_id or "")
    if call is not None:
        call.dialog.terminate()
    try:
        branch = request.via[0].branch if request.via else None
    except Exception:  # noqa: BLE001 - a Via that does not read: no transaction was made for it
        return call
    if branch and (txn := uas.transactions.get_server(branch, request.method)) is not None:
        uas.transactions.remove(txn)
    return call


def reply(uas: SipUAS, request: SipRequest, status: int, reason: str) -> None:
    """A response outside any dialog lyre keeps: the request's Via, From, To (tagged once), Call-ID and CSeq."""
    response = SipResponse(status_code=status, reason_phrase=reason)
    for via in request.headers.get("via"):
        response.headers.append("Via", via)
    for name in ("From", "Call-ID", "CSeq"):
        if (value := request.headers.get_first(name.lower())) is not None:
            response.headers.set_single(name, value)
    to = request.headers.get_first("to") or ""
    response.headers.set_single("To", to if "tag=" in to else f"{to};tag={generate_tag()}")
    response.headers.set_single("User-Agent", "lyre")
    uas.transport.send_reply(response)
