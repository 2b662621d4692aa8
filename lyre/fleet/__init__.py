"""The fleet: many ``lyre serve`` processes behind ``lyre route``.

- `records`: the wire format in Redis, which servers write and routers read (plain Python);
- `member`: a server's membership (heartbeat, drain, leave);
- `voices`: reference voices shared by every server through Redis;
- `router`: ``lyre route`` itself, which talks to the servers over HTTP only.
"""
