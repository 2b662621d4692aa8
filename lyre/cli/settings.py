"""Settings for ``lyre serve`` and ``lyre route`` from flags, ``LYRE_*`` environment variables and a TOML file.

Every flag of the two commands is a setting. Its environment variable is ``LYRE_`` and the flag's name in
capitals (``--max-streams``: ``LYRE_MAX_STREAMS``); its key in the file is the flag's name, with ``_`` or
``-`` (``max_streams = 8``). Where one is given in several places, the first of these wins:

    flag  >  environment  >  file  >  default

The file is ``--config PATH``, else ``$LYRE_CONFIG``, else ``~/.config/lyre/lyre.toml`` where it exists
(``$XDG_CONFIG_HOME`` moves it). Its keys may sit at the top (read by the command that loads it) or under
``[serve]`` and ``[route]`` (each command reads its own table), so one file can hold a fleet's settings.
Any setting's value can be read from a file instead: ``LYRE_API_KEY_FILE=/run/secrets/key`` or
``api_key_file = "..."`` (its text, the last line break dropped): secrets stay out of ``ps`` and the
environment.

    args = parse(build_parser(), sys.argv[1:])   # argparse's Namespace, with args.settings
    print(args.settings.report())               # --print-config: each value and where it came from

The parser stays the one description of the settings (names, types, choices, help): this module reads it,
so a flag added there is a variable, a key and a line of the reference (lyre.cli.reference) at once.
Bad input is a ValueError naming the key or variable, the file and line, what it takes and the closest
known name. (pydantic-settings would have needed the 85 flags written a second time as a model, beside the
parser that documents them, and would still not say which flag a variable stands for.)
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyre.cli.setting_values import from_text, from_toml, read_value_file, without_password

__all__ = ["COMMANDS", "Settings", "add_config_args", "default_config_path", "command_settings", "parse", "subparser"]

COMMANDS = ("serve", "route")  # the commands whose flags are settings
PREFIX = "LYRE_"
# Variables lyre reads that are not settings: the config file's path, the cache, and the test suite's and
# benchmarks' own knobs (an unknown LYRE_ variable is an error, so these are named here).
OTHER_VARIABLES = frozenset({"LYRE_CONFIG", "LYRE_CACHE_DIR", "LYRE_TEST_WORKERS", "LYRE_FUZZ_EXAMPLES",
                             "LYRE_FUZZ_RANDOM", "LYRE_SIP_FUZZ_MESSAGES", "LYRE_SIP_FUZZ_SEED", "LYRE_SWITCH_MS"})
# Earlier names still read: (command, variable) -> the setting's dest.
LEGACY_VARIABLES = {("route", "LYRE_ROUTER_API_KEY"): "api_key", ("route", "LYRE_ROUTER_ADMIN_KEY"): "admin_key"}
SECRETS = frozenset({"api_key", "admin_key", "llm_api_key", "twilio_auth_token", "sip_auth"})
_URLS = frozenset({"register", "redis", "llm_url", "advertise"})  # a password in them is masked
_NOT_SETTINGS = frozenset({"help", "config", "print_config", "action"})


@dataclass
class Settings:
    """The settings a command runs with: each value and where it came from."""

    command: str
    values: dict[str, Any]  # by setting name (the flag's, with _)
    sources: dict[str, str]  # "flag", "env LYRE_X", "file PATH:LINE", "default"
    file: str | None = None

    def shown(self, name: str) -> Any:
        """The value as it may be shown: secrets masked, a URL's password hidden."""
        value = self.values[name]
        if value is None or value == [] or value == "":
            return value
        if name in SECRETS:
            return "********"
        if name in _URLS and isinstance(value, str):
            return without_password(value)
        return value

    def as_json(self) -> dict[str, dict[str, Any]]:
        return {name: {"value": self.shown(name), "source": self.sources[name]} for name in self.values}

    def report(self) -> str:
        """TOML that would set the same values, each with its source (secrets masked)."""
        lines = [f"# lyre {self.command}: the settings in effect (flag > environment > file > default)",
                 f"# file: {self.file or 'none'}"]
        width = max(len(name) for name in self.values)
        for name in self.values:
            value = self.shown(name)
            if value is None:
                lines.append(f"# {name.ljust(width - 2)} = (unset){' ' * 19}  # {self.sources[name]}")
            else:
                lines.append(f"{name.ljust(width)} = {json.dumps(value).ljust(24)}  # {self.sources[name]}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Setting:
    name: str  # the flag without its dashes, with _: the key, and the variable after LYRE_
    action: argparse.Action

    @property
    def variable(self) -> str:
        return PREFIX + self.name.upper()

    @property
    def kind(self) -> str:
        """What it takes, in words."""
        a = self.action
        if isinstance(a, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
            return "true or false"
        what = {int: "an integer", float: "a number"}.get(a.type, "a string")  # type: ignore[arg-type]
        if a.choices:
            what = "one of " + ", ".join(map(str, a.choices))
        if isinstance(a, argparse._AppendAction):
            what = f"a list of {what.removeprefix('a ').removeprefix('an ')}s"
        return what


def command_settings(parser: argparse.ArgumentParser) -> dict[str, _Setting]:
    """The settings of one command's parser, by name."""
    found = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in _NOT_SETTINGS:
            continue
        flag = next(s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")
                    or s == action.option_strings[0])
        name = flag.lstrip("-").replace("-", "_")
        found[name] = _Setting(name, action)
    return found


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--print-config``, for a command whose flags are settings."""
    group = parser.add_argument_group("settings (flag > environment LYRE_<NAME> > file > default)")
    group.add_argument("--config", metavar="PATH",
                       help="a TOML file of settings (default: $LYRE_CONFIG, else ~/.config/lyre/lyre.toml where "
                            "it exists)")
    group.add_argument("--print-config", action="store_true",
                       help="print the settings in effect and where each came from (secrets masked), and exit")


def default_config_path(environ: dict[str, str] | None = None) -> Path:
    home = (os.environ if environ is None else environ).get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(home) / "lyre" / "lyre.toml"


def parse(parser: argparse.ArgumentParser, argv: list[str],
          environ: dict[str, str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)``; for ``serve`` and ``route``, each setting not given as a flag taken from the
    environment, then the file, then its default, and ``args.settings`` saying which."""
    environ = dict(os.environ if environ is None else environ)
    args = parser.parse_args(argv)
    command = getattr(args, "command", None)
    if command not in COMMANDS:
        return args
    sub = subparser(parser, command)
    settings = command_settings(sub)
    given = _given_flags(sub, argv[argv.index(command) + 1:], settings)
    file = _config_file(args.config, environ)
    from_file = _read_file(file, command, settings) if file is not None else {}
    from_env = _read_environment(environ, command, settings, parser)
    values, sources = {}, {}
    for name, setting in settings.items():
        dest = setting.action.dest
        if name in given:
            values[name], sources[name] = getattr(args, dest), "flag"
        elif name in from_env:
            values[name], sources[name] = from_env[name]
        elif name in from_file:
            values[name], sources[name] = from_file[name]
        else:
            values[name], sources[name] = getattr(args, dest), "default"
        setattr(args, dest, values[name])
    args.settings = Settings(command, values, sources, str(file) if file else None)
    return args


def _given_flags(sub: argparse.ArgumentParser, argv: list[str], settings: dict[str, _Setting]) -> set[str]:
    """The settings given as flags: ``argv`` parsed again with every default None (argparse's own matching)."""
    saved = {name: s.action.default for name, s in settings.items()}
    try:
        for s in settings.values():
            s.action.default = None
        bare = sub.parse_args(argv)
    finally:
        for name, s in settings.items():
            s.action.default = saved[name]
    return {name for name, s in settings.items() if getattr(bare, s.action.dest) is not None}


def _config_file(flag: str | None, environ: dict[str, str]) -> Path | None:
    if flag:
        path = Path(flag).expanduser()
        if not path.is_file():
            raise ValueError(f"--config {flag}: no such file")
        return path
    if environ.get("LYRE_CONFIG"):
        path = Path(environ["LYRE_CONFIG"]).expanduser()
        if not path.is_file():
            raise ValueError(f"LYRE_CONFIG={environ['LYRE_CONFIG']}: no such file")
        return path
    path = default_config_path(environ)
    return path if path.is_file() else None


def _read_file(path: Path, command: str, settings: dict[str, _Setting]) -> dict[str, tuple[Any, str]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from None
    lines = text.splitlines()
    table: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in COMMANDS:
                raise ValueError(f"{path}:{_line_of(lines, key, None, table=True)}: unknown table [{key}]; "
                                 f"the tables are {', '.join(f'[{c}]' for c in COMMANDS)}")
            if key == command:
                table.update({k: (v, key) for k, v in value.items()})
        else:
            table[key] = (value, None)
    found = {}
    for key, (value, section) in table.items():
        line = _line_of(lines, key, section)
        where = f"{path}:{line}"
        name, from_file = _name_of(key.replace("-", "_"), settings, f"{where}: unknown setting {key!r}",
                                   command, style="key")
        if from_file:
            if not isinstance(value, str):
                raise ValueError(f"{where}: {key} takes a path to a file, got {value!r}")
            text = read_value_file(value, f"{where}: {key}")
            found[name] = (from_text(settings[name], text, f"{where}: {name}"), f"file {where}, read from {value}")
            continue
        found[name] = (from_toml(settings[name], value, f"{where}: {key}"), f"file {where}")
    return found


def _read_environment(environ: dict[str, str], command: str, settings: dict[str, _Setting],
                      parser: argparse.ArgumentParser) -> dict[str, tuple[Any, str]]:
    known_elsewhere = _other_commands_variables(command, parser)
    found: dict[str, tuple[Any, str]] = {}
    for variable in sorted(environ):
        if not variable.startswith(PREFIX) or variable in OTHER_VARIABLES:
            continue
        value = environ[variable]
        if (command, variable) in LEGACY_VARIABLES:
            name, from_file = LEGACY_VARIABLES[(command, variable)], False
            if PREFIX + name.upper() in environ:
                continue  # the current name wins
        elif variable in known_elsewhere and not _stands_for(variable[len(PREFIX):].lower(), settings):
            continue  # the other command's
        else:
            name, from_file = _name_of(variable[len(PREFIX):].lower(), settings,
                                       f"unknown environment variable {variable}", command, style="variable")
        if value == "" and not from_file:
            continue  # set to nothing: not given
        if from_file:
            if PREFIX + name.upper() in environ and environ[PREFIX + name.upper()] != "":
                raise ValueError(f"{variable} and {PREFIX + name.upper()} are both set: set one")
            value = read_value_file(value, variable)
        found[name] = (from_text(settings[name], value, variable), f"env {variable}")
    return found


def _other_commands_variables(command: str, parser: argparse.ArgumentParser) -> set[str]:
    variables = {variable for (other, variable) in LEGACY_VARIABLES if other != command}
    for other in COMMANDS:
        if other != command:
            for setting in command_settings(subparser(parser, other)).values():
                variables |= {setting.variable, setting.variable + "_FILE"}
    return variables


def _stands_for(name: str, settings: dict[str, _Setting]) -> bool:
    return name in settings or (name.endswith("_file") and name[:-5] in settings)


def _name_of(name: str, settings: dict[str, _Setting], unknown: str, command: str,
             style: str) -> tuple[str, bool]:
    """The setting ``name`` stands for, and whether it names a file holding the value (``..._file``)."""
    if name in settings:
        return name, False
    if name.endswith("_file") and name[:-5] in settings:
        return name[:-5], True
    shown = {s: (PREFIX + s.upper() if style == "variable" else s) for s in settings}
    wanted = PREFIX + name.upper() if style == "variable" else name
    close = difflib.get_close_matches(wanted, list(shown.values()), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ValueError(f"{unknown}: lyre {command} has no such setting{hint} "
                     f"(lyre {command} --help lists them)")


def _line_of(lines: list[str], key: str, section: str | None, table: bool = False) -> int | str:
    """The line of ``key`` (in ``[section]``), counted from 1; "?" where it cannot be found."""
    pattern = re.compile(rf"^\s*\[\s*{re.escape(key)}\s*\]" if table
                         else rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    current = None
    for number, line in enumerate(lines, 1):
        header = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if header and not table:
            current = header.group(1)
            continue
        if pattern.match(line) and (table or current == section):
            return number
    return "?"
