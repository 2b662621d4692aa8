"""The ring, routing identities and the fleet's wire format, without Redis or servers."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from lyre.fleet.records import ServerRecord
from lyre.fleet.router import RouterConfig
from lyre.fleet.router.headers import request_headers, response_headers
from lyre.fleet.router.identity import IdentityError, identity_of, service_of, voice_in_message
from lyre.fleet.router.ring import Ring, placement_keys
from lyre.server import ServerConfig


def _fleet(n: int) -> list[ServerRecord]:
    return [ServerRecord(url=f"http://10.0.0.{i}:8000", capacity=8) for i in range(n)]


IDS = [f"voice:v{i}" for i in range(4000)]


def _homes(ring: Ring) -> dict[str, str | None]:
    return {key: ring.home(key) for key in IDS}


def test_removing_one_of_n_servers_moves_about_one_nth_and_only_its_ids() -> None:
    servers = _fleet(5)
    before = _homes(Ring(servers))
    after = _homes(Ring(servers[:2] + servers[3:]))
    moved = [k for k in IDS if before[k] != after[k]]
    assert all(before[k] == servers[2].url for k in moved)
    assert sorted(moved) == sorted(k for k in IDS if before[k] == servers[2].url)
    assert 0.12 <= len(moved) / len(IDS) <= 0.28  # 1/5, give or take the ring's unevenness


def test_a_joining_server_takes_about_one_nth_and_nothing_else_moves() -> None:
    servers = _fleet(4)
    before = _homes(Ring(servers[:3]))
    after = _homes(Ring(servers))
    moved = [k for k in IDS if before[k] != after[k]]
    assert all(after[k] == servers[3].url for k in moved)
    assert 0.15 <= len(moved) / len(IDS) <= 0.35  # 1/4


def test_every_router_builds_the_same_ring_whatever_order_it_read_the_servers_in() -> None:
    servers = _fleet(4)
    assert _homes(Ring(servers)) == _homes(Ring(list(reversed(servers))))


def test_draining_servers_take_no_new_work_and_services_are_respected() -> None:
    up = _fleet(2)
    draining = ServerRecord(url="http://10.0.0.9:8000", capacity=8, draining=True)
    stt = ServerRecord(url="http://10.0.0.8:8000", capacity=8, services=("stt",))
    ring = Ring([*up, draining, stt])
    assert draining.url not in ring.servers
    assert {ring.route(k, {}).server for k in IDS[:200]} == {r.url for r in up}  # type: ignore[union-attr]
    assert ring.route("any:x", {}, service="stt").server == stt.url  # type: ignore[union-attr]
    assert ring.route("any:x", {}, service="chat") is None
    assert Ring([]).route("voice:tara", {}) is None


def test_a_failed_server_is_excluded_and_the_next_one_on_the_ring_answers() -> None:
    ring = Ring(_fleet(3))
    first = ring.route("voice:tara", {})
    assert first is not None
    second = ring.route("voice:tara", {}, exclude=[first.server])
    assert second is not None and second.server != first.server
    assert second.server == next(u for u in ring.walk("voice:tara") if u != first.server)


def _place_zipf(ring: Ring, load_factor: float, streams: int, seed: int = 0) -> Counter[str]:
    rng = random.Random(seed)
    voices = [f"voice:v{i}" for i in range(50)]
    weights = [1 / (rank + 1) ** 1.1 for rank in range(len(voices))]
    loads: Counter[str] = Counter()
    for voice in rng.choices(voices, weights, k=streams):
        route = ring.route(voice, loads, load_factor=load_factor)
        assert route is not None
        loads[route.server] += 1
    return loads


def test_bounded_load_keeps_max_over_average_at_or_under_c_under_a_zipf_mix() -> None:
    ring = Ring(_fleet(4))
    bounded = _place_zipf(ring, 1.25, 400)
    unbounded = _place_zipf(ring, 1000.0, 400)
    average = 400 / 4
    assert max(bounded.values()) <= 1.25 * average
    assert max(unbounded.values()) > 1.25 * average  # the mix is skewed enough for the bound to matter


def test_a_server_over_the_bound_is_passed_over_for_the_next_one() -> None:
    ring = Ring(_fleet(3))
    home = ring.home("voice:tara")
    route = ring.route("voice:tara", {home: 5})  # type: ignore[dict-item]
    assert route is not None and route.passed_over and route.home == home and route.server != home


def test_hot_placements_keep_the_first_where_it_was_and_spread_by_load() -> None:
    ring = Ring(_fleet(5))
    keys = placement_keys("voice:tara", 4)
    assert keys[0] == "voice:tara" and len(set(keys)) == 4
    homes = {ring.home(k) for k in keys}
    loads: Counter[str] = Counter()
    for _ in range(8):
        route = ring.route("voice:tara", loads, placements=4, load_factor=100.0)
        assert route is not None
        loads[route.server] += 1
    assert set(loads) == homes  # least load first: every placement gets used
    # Another voice is unaffected by tara's placements.
    assert ring.route("voice:leo", {}, placements=1).server == ring.home("voice:leo")  # type: ignore[union-attr]


def test_a_placement_whose_server_holds_the_adapter_is_preferred() -> None:
    plain = Ring(_fleet(5))
    keys = placement_keys("voice:clone", 3)
    holder = plain.home(keys[2])
    servers = [ServerRecord(url=r.url, capacity=8, adapters=("clone",) if r.url == holder else ())
               for r in _fleet(5)]
    route = Ring(servers).route("voice:clone", {}, placements=3, adapter="clone")
    assert route is not None and route.server == holder and route.adapter_hit


def test_the_routing_identity_is_the_session_then_the_voice_then_random() -> None:
    assert identity_of({"x-lyre-session": "s1"}, {}, {"voice": "tara"}).key == "session:s1"
    assert identity_of({}, {"session": "s2"}, None).key == "session:s2"
    body = identity_of({}, {}, {"voice": "tara"})
    assert body.key == "voice:tara" and body.voice == "tara"
    assert identity_of({}, {"voice": "leo"}, None).key == "voice:leo"
    assert identity_of({}, {}, None).kind == "any"
    assert identity_of({}, {}, None).key != identity_of({}, {}, None).key
    assert voice_in_message({"voice": {"mode": "id", "id": "zoe"}}) == "zoe"
    assert voice_in_message({"voice": 3}) is None
    with pytest.raises(IdentityError, match="session id"):
        identity_of({"x-lyre-session": "x" * 257}, {}, None)


def test_server_records_round_trip_and_refuse_what_they_cannot_be() -> None:
    record = ServerRecord(url="http://a:1", capacity=4, load=2, adapters=("clone",), services=("tts", "stt"),
                          draining=True, heartbeat_at=12.5, cached_blocks=7)
    assert ServerRecord.from_json(record.to_json()) == record
    older = json.loads(record.to_json())
    del older["cached_blocks"]  # a server from before the block cache: read, with nothing cached
    assert ServerRecord.from_json(json.dumps(older)).cached_blocks == 0
    for bad in ('{"schema": 99}', "[]", '{"schema": 1, "url": "http://a:1"}', "not json"):
        with pytest.raises(ValueError):
            ServerRecord.from_json(bad)
    with pytest.raises(ValueError, match="http"):
        ServerRecord(url="a:1", capacity=1)
    with pytest.raises(ValueError, match="unknown services"):
        ServerRecord(url="http://a:1", capacity=1, services=("video",))


def test_bad_fleet_settings_are_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="--advertise"):
        ServerConfig(register="redis://localhost:6379")
    with pytest.raises(ValueError, match="--register"):
        ServerConfig(advertise="http://localhost:8000")
    with pytest.raises(ValueError, match="redis://"):
        ServerConfig(register="localhost:6379", advertise="http://localhost:8000")
    with pytest.raises(ValueError, match="--redis"):
        RouterConfig(redis="localhost")
    with pytest.raises(ValueError, match="load factor"):
        RouterConfig(redis="redis://localhost", load_factor=1.0)


def test_a_realtime_socket_is_a_conversation_unless_it_asks_for_transcription() -> None:
    assert service_of("/v1/realtime", {}) == "agent"
    assert service_of("/v1/realtime", {"model": "gpt-realtime"}) == "agent"
    assert service_of("/v1/realtime", {"intent": "transcription"}) == "stt"
    assert service_of("/v1/audio/transcriptions", {}) == "stt" and service_of("/v1/models", {}) is None
    listener = ServerRecord(url="http://10.0.0.1:8000", capacity=8, services=("stt",))
    talker = ServerRecord(url="http://10.0.0.2:8000", capacity=8, services=("tts", "stt", "agent"))
    ring = Ring([listener, talker])
    assert {ring.route(k, {}, service="agent").server for k in IDS[:100]} == {talker.url}  # type: ignore[union-attr]
    assert {ring.route(k, {}, service="stt").server for k in IDS[:100]} == {listener.url, talker.url}  # type: ignore[union-attr]
    assert Ring([listener]).route("any:x", {}, service="agent") is None


def test_a_service_the_reader_does_not_know_is_left_out_not_the_whole_record() -> None:
    newer = json.loads(ServerRecord(url="http://a:1", capacity=4, services=("tts", "agent")).to_json())
    newer["services"].append("video")
    assert ServerRecord.from_json(json.dumps(newer)).services == ("tts", "agent")


def test_hop_by_hop_headers_stay_behind_and_the_client_joins_x_forwarded_for() -> None:
    sent = [("host", "router"), ("connection", "keep-alive, X-Trace"), ("x-trace", "1"), ("keep-alive", "5"),
            ("te", "trailers"), ("upgrade", "h2c"), ("content-length", "12"), ("x-forwarded-for", "10.1.1.1"),
            ("authorization", "Bearer k"), ("x-lyre-session", "s")]
    out = request_headers(sent, "10.2.2.2", scheme="https")
    assert out == [("host", "router"), ("authorization", "Bearer k"), ("x-lyre-session", "s"),
                   ("x-forwarded-for", "10.1.1.1, 10.2.2.2"), ("x-forwarded-proto", "https")]
    assert ("content-length", "12") in request_headers(sent, None, keep_length=True)
    assert ("x-forwarded-for", "10.1.1.1") in request_headers(sent, None)
    # A proxy in front of the router said how the client came: that stands.
    said = request_headers([*sent, ("X-Forwarded-Proto", "https")], None, scheme="http")
    assert [v for k, v in said if k.lower() == "x-forwarded-proto"] == ["https"]
    back = response_headers([("Connection", "x-up"), ("X-Up", "1"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"),
                             ("Date", "today"), ("Transfer-Encoding", "chunked"), ("Content-Type", "audio/pcm")])
    assert back == [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("Content-Type", "audio/pcm")]


def test_the_routers_own_limits_are_checked() -> None:
    for bad in ({"max_inflight": 0}, {"max_body_bytes": 0}, {"first_message_timeout_s": 0}, {"api_key": ""}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RouterConfig(redis="redis://localhost", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="differ"):
        RouterConfig(redis="redis://localhost", api_key="k", admin_key="k")
