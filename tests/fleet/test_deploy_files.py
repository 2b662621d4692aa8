"""docker-compose.yml, deploy/k8s and deploy/systemd: every lyre command, with the settings the files give it
(flags, LYRE_* variables, the mounted TOML file, keys in files), resolves to a server or router that joins the
fleet; every probe path is served, the manifests match the Kubernetes schema, and the Compose fleet runs where
a container runtime does."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from lyre.cli import build_parser, settings
from lyre.fleet.router import RouterConfig, create_router_app
from lyre.server import ServerConfig, create_app
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
_OLDEST_KUBERNETES = "1.29.0"  # the oldest release the manifests are checked against


def _compose_services() -> dict[str, dict]:  # type: ignore[type-arg]
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return {name: s for name, s in services.items() if "build" in s}  # the ones built from lyre's Dockerfile


def _k8s_docs() -> list[dict]:  # type: ignore[type-arg]
    return [doc for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]


def _k8s_containers() -> list[dict]:  # type: ignore[type-arg]
    return [c for doc in _k8s_docs() if doc["kind"] == "Deployment" for c in doc["spec"]["template"]["spec"]["containers"]]


def test_the_image_runs_lyre() -> None:
    assert 'ENTRYPOINT ["lyre"]' in (ROOT / "Dockerfile").read_text()


def _settled(command: list[str], environ: dict[str, str]) -> argparse.Namespace:
    """The command line with the environment it is given, as lyre reads them: flags, LYRE_* and the file."""
    try:
        return settings.parse(build_parser(), command, environ)
    except SystemExit:
        pytest.fail(f"lyre {' '.join(command)}: not a valid command line")


def test_every_lyre_command_in_the_deployment_files_runs_with_the_settings_they_give_it(tmp_path: Path) -> None:
    """Compose's services (deploy/lyre.toml mounted where LYRE_CONFIG points, their environment) and the
    Kubernetes containers (the ConfigMap's file, their variables, the Secret's key files): each resolves, with
    lyre's own settings reader, to a server that joins the fleet at its own address or a router on its Redis."""
    settled = []
    for name, service in _compose_services().items():
        mounts = dict(v.split(":")[1::-1] for v in service["volumes"])  # where in the container: from where
        environ = {k: str(ROOT / mounts[v].removeprefix("./")) if k == "LYRE_CONFIG" else str(v)
                   for k, v in service["environment"].items()}
        settled.append((f"compose {name}", _settled(service["command"], environ)))
    config = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap")["data"]["lyre.toml"]
    (tmp_path / "lyre.toml").write_text(config)
    for container in _k8s_containers():
        if not container["image"].startswith("lyre"):
            continue
        environ = {}
        for variable in container["env"]:
            value = variable.get("value")
            if value is None:
                continue  # from the pod (POD_IP)
            if variable["name"] == "LYRE_CONFIG":
                value = str(tmp_path / "lyre.toml")
            elif variable["name"].endswith("_FILE"):  # the mounted Secret's key
                value = str(tmp_path / variable["name"])
                Path(value).write_text(f"key of {variable['name']}\n")
            environ[variable["name"]] = value.replace("$(POD_IP)", "10.0.0.7")
        args = _settled(container["args"], environ)
        assert args.api_key == "key of LYRE_API_KEY_FILE", container["name"]  # read from its file, line break dropped
        settled.append((f"k8s {container['name']}", args))
    assert sorted(args.command for _, args in settled) == ["route", "route", "serve", "serve", "serve"]
    for where, args in settled:
        if args.command == "serve":
            assert args.register and args.advertise, where
            assert args.settings.sources["advertise"].startswith("env LYRE_ADVERTISE"), where
            assert args.settings.sources["register"].startswith("file "), where
        else:
            assert args.redis and args.settings.sources["redis"].startswith("file "), where
    assert {args.advertise for _, args in settled if args.command == "serve"} == {
        "http://server1:8000", "http://server2:8000", "http://10.0.0.7:8000"}


def test_the_systemd_unit_runs_lyre_serve_with_its_settings_from_files(tmp_path: Path) -> None:
    unit = (ROOT / "deploy" / "systemd" / "lyre.service").read_text()
    lines = [line.partition("=") for line in unit.splitlines() if "=" in line and not line.startswith("#")]
    start = next(v for k, _, v in lines if k == "ExecStart").split()
    assert start[0].endswith("/lyre") and start[1] == "serve"
    environ = dict(v.partition("=")[::2] for k, _, v in lines if k == "Environment")
    credential = next(v for k, _, v in lines if k == "LoadCredential").split(":")[0]
    assert environ["LYRE_API_KEY_FILE"] == f"%d/{credential}"  # systemd's credentials folder
    (tmp_path / credential).write_text("the key")
    (tmp_path / "lyre.toml").write_text("[serve]\nport = 8123\n")
    environ.update(LYRE_API_KEY_FILE=str(tmp_path / credential), LYRE_CONFIG=str(tmp_path / "lyre.toml"))
    args = _settled(start[1:], environ)
    assert (args.api_key, args.port, args.settings.sources["port"]) == ("the key", 8123, f"file {tmp_path}/lyre.toml:2")


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
    assert checked == 6  # a Deployment and a Service for Redis and for the routers; the servers' Deployment;
    # the settings' ConfigMap
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
