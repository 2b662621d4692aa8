"""``lyre serve`` and ``lyre route`` settings from flags, LYRE_* variables and a TOML file (lyre.cli.settings):
the precedence, every error, secrets from files and masked, the reference, and a real server started from them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lyre.cli import build_parser
from lyre.cli.reference import reference_markdown
from lyre.cli.settings import command_settings, parse, subparser
from serving import running_server


def _parse(argv: list[str], environ: dict[str, str] | None = None, toml: str | None = None,
           tmp_path: Path | None = None):  # type: ignore[no-untyped-def]
    environ = dict(environ or {})
    if toml is not None:
        assert tmp_path is not None
        (tmp_path / "lyre.toml").write_text(toml)
        environ.setdefault("LYRE_CONFIG", str(tmp_path / "lyre.toml"))
    environ.setdefault("XDG_CONFIG_HOME", "/nonexistent")  # no file at the default place unless a test puts one
    return parse(build_parser(), argv, environ)


def _error(argv: list[str], environ: dict[str, str] | None = None, toml: str | None = None,
           tmp_path: Path | None = None) -> str:
    with pytest.raises(ValueError) as caught:
        _parse(argv, environ, toml, tmp_path)
    return str(caught.value)


def test_a_flag_wins_over_the_environment_which_wins_over_the_file_which_wins_over_the_default(tmp_path: Path) -> None:
    toml = "max_streams = 3\nmax_queue = 5\nport = 9001\nscheduler = \"fcfs\"\n"
    args = _parse(["serve", "--port", "9003"], {"LYRE_PORT": "9002", "LYRE_MAX_QUEUE": "6"}, toml, tmp_path)
    assert (args.port, args.max_queue, args.max_streams, args.scheduler, args.max_seq_len) == (9003, 6, 3, "fcfs", 2048)
    sources = args.settings.sources
    assert sources["port"] == "flag"
    assert sources["max_queue"] == "env LYRE_MAX_QUEUE"
    assert sources["max_streams"] == f"file {tmp_path}/lyre.toml:1"
    assert sources["scheduler"] == f"file {tmp_path}/lyre.toml:4"
    assert sources["max_seq_len"] == "default"


def test_a_flag_given_its_default_value_still_counts_as_given(tmp_path: Path) -> None:
    args = _parse(["serve", "--max-streams", "8"], {"LYRE_MAX_STREAMS": "2"})
    assert (args.max_streams, args.settings.sources["max_streams"]) == (8, "flag")


def test_each_kind_of_setting_reads_from_the_environment_and_the_file(tmp_path: Path) -> None:
    environ = {"LYRE_PREFIX_CACHING": "off", "LYRE_STT": "yes", "LYRE_SIP_ALLOW": '["10.0.0.0/8", "192.0.2.7"]',
               "LYRE_VOICE_ALIAS": "alloy=tara", "LYRE_PLAYBACK_RATE": "0.5"}
    args = _parse(["serve"], environ)
    assert (args.prefix_caching, args.stt, args.sip_allow, args.voice_alias, args.playback_rate) == (
        False, True, ["10.0.0.0/8", "192.0.2.7"], ["alloy=tara"], 0.5)
    toml = 'no-tts = true\nstt = true\nadapter = ["a=/x", "b=/y"]\nkv_cache_gb = 2\n[serve]\nhost = "0.0.0.0"\n'
    args = _parse(["serve"], {}, toml, tmp_path)
    assert (args.no_tts, args.stt, args.adapter, args.kv_cache_gb, args.host) == (True, True, ["a=/x", "b=/y"], 2.0, "0.0.0.0")
    assert args.settings.sources["host"] == f"file {tmp_path}/lyre.toml:6"


def test_one_file_holds_a_fleet_each_command_reading_its_own_table(tmp_path: Path) -> None:
    toml = '[serve]\nport = 8001\nregister = "redis://r:6379/0"\n\n[route]\nport = 8081\nredis = "redis://r:6379/0"\n'
    serve = _parse(["serve"], {}, toml, tmp_path)
    route = _parse(["route", "status"], {}, toml, tmp_path)
    assert (serve.port, serve.register) == (8001, "redis://r:6379/0")
    assert (route.port, route.redis, route.action) == (8081, "redis://r:6379/0", "status")
    assert route.settings.sources["port"] == f"file {tmp_path}/lyre.toml:6"


def test_the_other_commands_variables_are_left_to_it() -> None:
    """One environment for a router and a server (a Compose env file): each takes its own."""
    environ = {"LYRE_REDIS": "redis://r:6379/0", "LYRE_REGISTER": "redis://r:6379/1", "LYRE_VNODES": "80"}
    assert _parse(["serve"], environ).register == "redis://r:6379/1"
    route = _parse(["route"], environ)
    assert (route.redis, route.vnodes) == ("redis://r:6379/0", 80)


def test_the_config_file_is_found_by_flag_variable_or_default_place(tmp_path: Path) -> None:
    (tmp_path / "lyre").mkdir()
    (tmp_path / "lyre" / "lyre.toml").write_text("port = 9100\n")
    (tmp_path / "other.toml").write_text("port = 9200\n")
    (tmp_path / "third.toml").write_text("port = 9300\n")
    home = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert _parse(["serve"], home).port == 9100
    assert _parse(["serve"], {**home, "LYRE_CONFIG": str(tmp_path / "other.toml")}).port == 9200
    assert _parse(["serve", "--config", str(tmp_path / "third.toml")],
                  {**home, "LYRE_CONFIG": str(tmp_path / "other.toml")}).port == 9300
    assert _parse(["serve"]).settings.file is None


def test_secrets_come_from_files_and_are_masked_wherever_they_are_shown(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("s3cret-key\n")
    (tmp_path / "token").write_text("tw-token")
    toml = f'twilio_auth_token_file = "{tmp_path / "token"}"\n'
    args = _parse(["serve"], {"LYRE_API_KEY_FILE": str(tmp_path / "key"),
                              "LYRE_REGISTER": "redis://:hunter2@redis:6379/0", "LYRE_ADMIN_KEY": "adm"},
                  toml, tmp_path)
    assert (args.api_key, args.twilio_auth_token, args.admin_key) == ("s3cret-key", "tw-token", "adm")
    assert args.settings.sources["api_key"] == "env LYRE_API_KEY_FILE"
    shown = args.settings.report() + str(args.settings.as_json())
    for secret in ("s3cret-key", "tw-token", "adm\"", "hunter2"):
        assert secret not in shown
    assert "redis://:********@redis:6379/0" in shown
    assert args.settings.as_json()["api_key"] == {"value": "********", "source": "env LYRE_API_KEY_FILE"}


def test_the_routers_earlier_variable_names_still_work() -> None:
    assert _parse(["route"], {"LYRE_ROUTER_API_KEY": "k"}).api_key == "k"
    assert _parse(["route"], {"LYRE_ROUTER_API_KEY": "old", "LYRE_API_KEY": "new"}).api_key == "new"


def test_a_variable_set_to_nothing_counts_as_not_set() -> None:
    args = _parse(["serve"], {"LYRE_API_KEY": "", "LYRE_MAX_STREAMS": ""})
    assert (args.api_key, args.max_streams, args.settings.sources["max_streams"]) == (None, 8, "default")


@pytest.mark.parametrize(("environ", "toml", "said"), [
    ({"LYRE_MAX_STREAM": "3"}, None, "unknown environment variable LYRE_MAX_STREAM: lyre serve has no such setting; "
                                     "did you mean LYRE_MAX_STREAMS?"),
    ({"LYRE_PORT": "eighty"}, None, "LYRE_PORT takes an integer, got 'eighty'"),
    ({"LYRE_SCHEDULER": "fifo"}, None, "LYRE_SCHEDULER takes one of deadline, fcfs, got 'fifo'"),
    ({"LYRE_STT": "maybe"}, None, "LYRE_STT takes true or false"),
    ({"LYRE_SIP_ALLOW": "[1, 2]"}, None, "LYRE_SIP_ALLOW takes one value or a JSON array of strings"),
    ({"LYRE_SIP_ALLOW": "[oops"}, None, "LYRE_SIP_ALLOW takes one value or a JSON array of them"),
    ({"LYRE_API_KEY": "a", "LYRE_API_KEY_FILE": "/x"}, None, "LYRE_API_KEY_FILE and LYRE_API_KEY are both set"),
    ({"LYRE_API_KEY_FILE": "/nonexistent/key"}, None, "LYRE_API_KEY_FILE: cannot read /nonexistent/key"),
    ({}, "port = 8000\nmax_stream = 3\n", "lyre.toml:2: unknown setting 'max_stream': lyre serve has no such "
                                           "setting; did you mean max_streams?"),
    ({}, "\n[serve]\nportt = 1\n", "lyre.toml:3: unknown setting 'portt': lyre serve has no such setting; "
                                   "did you mean port?"),
    ({}, 'max_streams = "4"\n', "lyre.toml:1: max_streams takes an integer, got '4'"),
    ({}, "playback_rate = true\n", "lyre.toml:1: playback_rate takes a number, got True"),
    ({}, "stt = 1\n", "lyre.toml:1: stt takes true or false, got 1"),
    ({}, "adapter = [1]\n", "lyre.toml:1: adapter takes a list of strings, got [1]"),
    ({}, "[serv]\nport = 1\n", "lyre.toml:1: unknown table [serv]; the tables are [serve], [route]"),
    ({}, "port = \n", "lyre.toml: not TOML"),
    ({}, "api_key_file = 3\n", "lyre.toml:1: api_key_file takes a path to a file, got 3"),
    ({"LYRE_CONFIG": "/nonexistent/lyre.toml"}, None, "LYRE_CONFIG=/nonexistent/lyre.toml: no such file"),
])
def test_each_mistake_is_an_error_naming_it(environ: dict[str, str], toml: str | None, said: str,
                                            tmp_path: Path) -> None:
    assert said in _error(["serve"], environ, toml, tmp_path)


def test_a_key_of_the_other_command_at_the_top_of_the_file_is_an_error_there(tmp_path: Path) -> None:
    said = _error(["route"], {}, "max_streams = 4\n", tmp_path)
    assert said.endswith("lyre.toml:1: unknown setting 'max_streams': lyre route has no such setting "
                         "(lyre route --help lists them)")


def test_the_reference_lists_every_flag_of_both_commands_with_its_variable() -> None:
    page = reference_markdown()
    parser = build_parser()
    for command in ("serve", "route"):
        settings = command_settings(subparser(parser, command))
        assert len(settings) > 10
        for setting in settings.values():
            row = next((line for line in page.splitlines() if f"`{setting.variable}` · `{setting.name}`" in line), None)
            assert row is not None, setting.name
            assert all(f"`{flag}`" in row for flag in setting.action.option_strings)


def _lyre(*argv: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lyre.cli", *argv], capture_output=True, text=True, timeout=120,
                          env={**environ, "XDG_CONFIG_HOME": "/nonexistent"})


def test_print_config_shows_each_value_and_its_source_and_a_mistake_ends_the_process_clearly(tmp_path: Path) -> None:
    import os

    (tmp_path / "lyre.toml").write_text('[serve]\nmax_streams = 3\napi_key = "from-the-file"\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LYRE_")}
    done = _lyre("serve", "--config", str(tmp_path / "lyre.toml"), "--host", "0.0.0.0", "--print-config",
                 environ={**environ, "LYRE_PORT": "8123"})
    assert done.returncode == 0, done.stderr
    lines = {line.split("=")[0].strip(): line for line in done.stdout.splitlines() if not line.startswith("#")}
    assert lines["host"].split("#")[-1].strip() == "flag"
    assert "8123" in lines["port"] and lines["port"].endswith("# env LYRE_PORT")
    assert "3" in lines["max_streams"] and lines["max_streams"].endswith(f"# file {tmp_path}/lyre.toml:2")
    assert "from-the-file" not in done.stdout and '"********"' in lines["api_key"]
    done = _lyre("serve", environ={**environ, "LYRE_MAX_STREEMS": "2"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "LYRE_MAX_STREEMS" in done.stderr and "did you mean LYRE_MAX_STREAMS?" in done.stderr


@pytest.mark.slow
def test_a_server_runs_on_settings_from_the_environment_and_a_file_and_shows_them_to_the_admin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "admin-key").write_text("the-admin-key\n")
    (tmp_path / "lyre.toml").write_text('[serve]\nmax_streams = 2\nmax_seq_len = 512\n')
    monkeypatch.setenv("LYRE_CONFIG", str(tmp_path / "lyre.toml"))
    monkeypatch.setenv("LYRE_ADMIN_KEY_FILE", str(tmp_path / "admin-key"))
    monkeypatch.setenv("LYRE_MAX_QUEUE", "3")
    with running_server() as server:
        plain = httpx.get(f"{server.url}/health", timeout=10).json()
        admin = httpx.get(f"{server.url}/health", headers={"Authorization": "Bearer the-admin-key"}, timeout=10).json()
        summary = admin["summary"]
    assert "settings" not in plain
    settings = admin["settings"]
    assert settings["max_streams"] == {"value": 2, "source": f"file {tmp_path}/lyre.toml:2"}
    assert settings["max_queue"] == {"value": 3, "source": "env LYRE_MAX_QUEUE"}
    assert settings["admin_key"] == {"value": "********", "source": "env LYRE_ADMIN_KEY_FILE"}
    assert settings["port"]["source"] == "flag"
    assert "the-admin-key" not in str(admin)
    assert "2" in str(summary)  # the server took them: its summary's streams
