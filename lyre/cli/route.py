"""``lyre route``: one entry point in front of a fleet of servers, or the fleet's status."""

from __future__ import annotations

import argparse

from lyre.cli.settings import add_config_args

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    route = sub.add_parser("route", help="route a fleet of lyre servers: one entry point, sticky by voice or session",
                           description="A stateless router in front of the servers registered in Redis "
                                       "(lyre serve --register): consistent hashing with bounded load, "
                                       "HTTP and WebSocket passed through. 'lyre route status' prints the fleet. "
                                       "Every flag can also be set by an environment variable (LYRE_ and its "
                                       "name) or a TOML file (--config).")
    route.add_argument("action", nargs="?", choices=("run", "status"), default="run",
                       help="run the router (default), or print the ring, the servers and the hot voices")
    route.add_argument("--redis",
                       help="the fleet's Redis, redis://HOST:PORT/DB (default: none)")
    route.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    route.add_argument("--port", type=int, default=8080)
    route.add_argument("--load-factor", type=float, default=1.25,
                       help="c: a server at c times the fleet's average load is passed over (default: 1.25)")
    route.add_argument("--vnodes", type=int, default=40, help="virtual nodes per server on the ring (default: 40)")
    route.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the fleet (default: 1)")
    route.add_argument("--admin-key",
                       help="turn on the hot-voice admin API for this key (default: none, "
                            "none: off)")
    route.add_argument("--api-key",
                       help="require this key on every request and socket, before anything else is read, in the "
                            "forms a server takes (default: none, none: open)")
    route.add_argument("--twilio-auth-token", metavar="TOKEN",
                       help="with --api-key: let Twilio's webhook and media streams in without the key when they "
                            "carry Twilio's signature, checked with this token (the servers' own); without it they "
                            "are refused (default: none)")
    route.add_argument("--max-inflight", type=int, default=1024,
                       help="requests and sockets open through the router at once; more get 503 (default: 1024)")
    route.add_argument("--max-inflight-per-client", type=int, default=None, metavar="N",
                       help="requests and sockets one client address may have open through the router; more get "
                            "429 (default: no share; set it where clients reach the router directly, not through "
                            "one balancer address)")
    route.add_argument("--max-body-bytes", type=int, default=1024 * 1024,
                       help="largest body read to find its voice (a speech request); others stream through "
                            "(default: 1 MiB)")
    route.add_argument("--first-message-timeout", type=float, default=10.0,
                       help="seconds a TTS socket that names no voice or session has to send its first message "
                            "(default: 10)")
    route.add_argument("--shutdown-grace", type=float, default=30.0,
                       help="on SIGTERM, seconds the streams and sockets in flight have to finish before they are "
                            "cut (default: 30)")
    route.add_argument("--log-level", default="info")
    add_config_args(route)
    route.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.redis:
        raise ValueError("lyre route needs --redis redis://HOST:PORT (or LYRE_REDIS)")
    if not args.shutdown_grace >= 0:
        raise ValueError(f"--shutdown-grace must be 0 or more seconds, got {args.shutdown_grace}")
    from lyre.fleet.router import RouterConfig, create_router_app
    from lyre.fleet.router.status import fleet_status

    config = RouterConfig(redis=args.redis, host=args.host, port=args.port, load_factor=args.load_factor,
                          vnodes=args.vnodes, poll_s=args.poll, admin_key=args.admin_key or None,
                          api_key=args.api_key or None, twilio_auth_token=args.twilio_auth_token or None,
                          max_inflight=args.max_inflight, max_inflight_per_client=args.max_inflight_per_client,
                          max_body_bytes=args.max_body_bytes, first_message_timeout_s=args.first_message_timeout)
    if args.action == "status":
        print(fleet_status(config.redis, config.vnodes))
        return 0
    import uvicorn

    # proxy_headers off: the router adds its peer to X-Forwarded-For itself, so it must see the peer, not a
    # client named by a header uvicorn would otherwise trust from loopback.
    # A connection that never closes (a client that never reads, a stream that never ends) would hold the
    # shutdown forever: after the grace, what is still running is cancelled.
    uvicorn.run(create_router_app(config), host=config.host, port=config.port, log_level=args.log_level,
                proxy_headers=False, timeout_graceful_shutdown=args.shutdown_grace)
    return 0
