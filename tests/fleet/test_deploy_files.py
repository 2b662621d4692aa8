"""docker-compose.yml and deploy/k8s: every lyre command and flag they use exists, every probe path is served, the
manifests match the Kubernetes schema, and the Compose fleet runs where a container runtime does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from lyre.cli import build_parser
from lyre.fleet.router import RouterConfig, create_router_app
from lyre.server import ServerConfig, create_app
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
_OLDEST_KUBERNETES = "1.29.0"  # the oldest release the manifests are checked against


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


@pytest.mark.parametrize("version", [_OLDEST_KUBERNETES, "latest"])
def test_the_kubernetes_manifests_match_the_kubernetes_schema(version: str) -> None:
    """Every manifest against the Kubernetes API's own schema for that version (kubernetes-validate's bundled
    copy, offline), strictly: a misspelt or misplaced field fails, not only a wrong type."""
    import kubernetes_validate

    version = kubernetes_validate.latest_version() if version == "latest" else version
    checked = 0
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {exc.message}")
            checked += 1
    assert checked == 5  # a Deployment and a Service for Redis and for the routers; the servers' Deployment
    # The check itself finds a field in the wrong place.
    server = next(c for c in _k8s_containers() if c["name"] == "lyre" and c["args"][0] == "serve")
    wrong = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
             "spec": {"containers": [{**server, "readinessProbe": {"path": "/ready"}}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, version, strict=True)


def _container_runtime() -> tuple[list[str] | None, str]:
    """The compose command that can run containers here, or None and why not."""
    why = []
    for compose in (["docker", "compose"], ["podman", "compose"], ["docker-compose"]):
        if shutil.which(compose[0]) is None:
            why.append(f"no {compose[0]}")
            continue
        version = subprocess.run([*compose, "version"], capture_output=True, text=True)
        if version.returncode != 0:
            said = (version.stderr or version.stdout).strip().splitlines()
            why.append(f"`{' '.join(compose)}` is missing ({said[0] if said else version.returncode})")
            continue
        info = subprocess.run([compose[0], "info"], capture_output=True, text=True)
        if info.returncode != 0:
            said = info.stderr.strip().splitlines()
            why.append(f"{compose[0]} has no engine to talk to ({said[-1] if said else info.returncode})")
            continue
        return compose, ""
    return None, "; ".join(why)


def test_the_compose_fleet_runs_where_a_container_runtime_does() -> None:
    """`docker compose up --build`: Redis, two servers on the demo model and a router; the router's ring holds
    both servers and a speech request through it is answered. Skipped, saying why, without a runtime."""
    compose, why = _container_runtime()
    if compose is None:
        pytest.skip(f"no container runtime to run docker-compose.yml: {why}")
    project = [*compose, "-f", str(ROOT / "docker-compose.yml"), "-p", "lyre-test"]
    try:
        subprocess.run([*project, "up", "--build", "--detach"], check=True, timeout=1800)
        assert eventually(lambda: len(httpx.get("http://127.0.0.1:8080/health", timeout=2).json()["ring"]) == 2,
                          timeout=600)
        r = httpx.post("http://127.0.0.1:8080/v1/audio/speech", timeout=120, json={
            "input": "Hello there.", "voice": "tara", "response_format": "pcm", "max_tokens": 28})
        assert r.status_code == 200 and r.headers["x-lyre-server"] in ("http://server1:8000", "http://server2:8000")
    finally:
        subprocess.run([*project, "down", "--volumes", "--timeout", "10"], timeout=300)
