"""HAProxy and nginx in front of lyre servers, for tests and benchmarks: deploy/haproxy/haproxy.cfg and
deploy/nginx/lyre.conf as shipped, with only their fleet (the lines between the fleet's markers) and their
listening address put in, run unprivileged from a temporary folder on a free loopback port.

    proxy = start_proxy("haproxy", ["http://127.0.0.1:8001", ...], folder)
    proxy.server_of(response.headers)      # the server that answered, as the tests know it (its URL)
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleet_processes import Process
from serving import _free_port

__all__ = ["PROXIES", "Proxy", "binary", "render", "start_proxy"]

ROOT = Path(__file__).resolve().parents[1]
PROXIES = ("haproxy", "nginx")
CONFIGS = {"haproxy": ROOT / "deploy" / "haproxy" / "haproxy.cfg", "nginx": ROOT / "deploy" / "nginx" / "lyre.conf"}
_FLEET = re.compile(r"( *)# ---- the fleet ----\n.*?# ---- end of the fleet ----\n", re.S)
_LISTEN = {"haproxy": re.compile(r"^( *)bind :8080$", re.M), "nginx": re.compile(r"^( *)listen 8080;$", re.M)}

# nginx's own paths, all in the folder: it then needs no privilege (its compiled-in defaults are under /var).
_NGINX_MAIN = """daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/lyre.conf;
}}
"""


def binary(kind: str) -> str | None:
    """The proxy's executable: on PATH, or in /usr/sbin where Debian puts both (not on a user's PATH)."""
    found = shutil.which(kind) or Path("/usr/sbin", kind)
    return str(found) if Path(found).is_file() else None


def _host_port(url: str) -> str:
    return url.removeprefix("http://").rstrip("/")


def _name(url: str) -> str:
    """A server's name on HAProxy's `server` line (what x-lyre-server says): its port."""
    return "p" + url.rsplit(":", 1)[1]


def render(kind: str, servers: list[str], port: int) -> str:
    """The shipped configuration with ``servers`` (URLs) as its fleet, listening on 127.0.0.1:``port``."""
    text = CONFIGS[kind].read_text()
    if kind == "haproxy":
        lines = [f"server {_name(url)} {_host_port(url)}" for url in servers]
    else:
        lines = [f"server {_host_port(url)} max_fails=1 fail_timeout=10s;" for url in servers]
    text, fleets = _FLEET.subn(lambda m: "".join(f"{m[1]}{line}\n" for line in lines), text)
    listen = "bind 127.0.0.1:{}" if kind == "haproxy" else "listen 127.0.0.1:{};"
    text, listens = _LISTEN[kind].subn(lambda m: m[1] + listen.format(port), text)
    if (fleets, listens) != (1, 1):
        raise ValueError(f"{CONFIGS[kind]}: expected one fleet block and one listen line, found {fleets} and "
                         f"{listens}")
    return text


@dataclass
class Proxy:
    kind: str
    process: Process
    servers: list[str]  # the fleet's URLs

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def ws(self) -> str:
        return self.url.replace("http", "ws", 1)

    def server_of(self, headers: Mapping[str, str]) -> str:
        """The URL of the server that answered, from the x-lyre-server header the proxy adds.

        HAProxy names the server's `server` line; nginx every address it tried, the last one answering."""
        said = headers["x-lyre-server"]
        if self.kind == "haproxy":
            return next(url for url in self.servers if _name(url) == said)
        return "http://" + said.split(",")[-1].strip()


def start_proxy(kind: str, servers: list[str], folder: Path) -> Proxy:
    """``kind`` (haproxy or nginx) in front of ``servers``, its files in ``folder`` (started; wait for it with
    fleet_processes.wait_ready)."""
    exe = binary(kind)
    if exe is None:
        raise FileNotFoundError(f"{kind} is not installed (apt-get install {kind})")
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    if kind == "haproxy":
        config = folder / "haproxy.cfg"
        config.write_text(render(kind, servers, port))
        cmd = [exe, "-db", "-f", str(config)]  # -db: in the foreground, so stopping it is a signal to this process
    else:
        (folder / "lyre.conf").write_text(render(kind, servers, port))
        config = folder / "nginx.conf"
        config.write_text(_NGINX_MAIN.format(dir=folder))
        cmd = [exe, "-p", str(folder), "-c", str(config), "-e", str(folder / "error.log")]
    return Proxy(kind, Process(cmd, f"http://127.0.0.1:{port}").start(), list(servers))
