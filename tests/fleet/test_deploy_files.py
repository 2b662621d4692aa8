"""docker-compose.yml and deploy/k8s: every lyre command and flag they use exists, every probe path is served."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lyre.cli import build_parser
from lyre.fleet.router import RouterConfig, create_router_app
from lyre.server import ServerConfig, create_app

ROOT = Path(__file__).resolve().parents[2]


def _compose_commands() -> list[list[str]]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return [s["command"] for s in services.values() if "build" in s]  # the ones built from lyre's Dockerfile


def _k8s_containers() -> list[dict]:  # type: ignore[type-arg]
    containers = []
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "Deployment":
                containers += doc["spec"]["template"]["spec"]["containers"]
    return containers


def test_the_image_runs_lyre() -> None:
    assert 'ENTRYPOINT ["lyre"]' in (ROOT / "Dockerfile").read_text()


def test_every_lyre_command_in_the_deployment_files_parses() -> None:
    commands = _compose_commands() + [c["args"] for c in _k8s_containers() if c["image"].startswith("lyre")]
    assert {c[0] for c in commands} == {"serve", "route"}
    assert len(commands) == 5  # two servers and a router in compose; a server and a router in k8s
    for command in commands:
        try:
            args = build_parser().parse_args(command)
        except SystemExit:
            pytest.fail(f"lyre {' '.join(command)}: not a valid command line")
        if args.command == "serve":
            assert args.register and args.advertise, command
        else:
            assert args.redis, command


def test_probe_paths_are_served() -> None:
    server = {getattr(r, "path", None) for r in create_app(ServerConfig()).routes}
    router = {getattr(r, "path", None) for r in create_router_app(RouterConfig(redis="redis://x")).routes}
    for container in _k8s_containers():
        paths = server if container["image"].startswith("lyre") and container["args"][0] == "serve" else router
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["path"] in paths, (container["name"], probe)


def test_lyre_route_without_redis_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from lyre.cli import main

    assert main(["route"]) == 2
    assert "--redis" in capsys.readouterr().err
