"""The reference pages, made at build time from the code so they cannot drift from it.

reference/configuration.md: every command's settings, from the command-line parsers
(`lyre.cli.reference.reference_markdown`). reference/http-api.md: every HTTP route from the server's
OpenAPI schema, and the WebSocket routes (not in OpenAPI) from the app's routes. Building the app loads
no model: the schema is computed from the routes, and the lifespan, which loads the models, never runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from mkdocs.structure.files import File, Files

__all__ = ["http_api_markdown", "openapi_schema", "websocket_paths"]

_METHODS = ("get", "put", "post", "delete", "patch")


def _app() -> Any:
    from lyre.server import ServerConfig, create_app

    return create_app(ServerConfig())


def openapi_schema() -> dict[str, Any]:
    return _app().openapi()


def websocket_paths(app: Any | None = None) -> list[str]:
    """The app's WebSocket routes, through the routers it includes."""
    return sorted(set(_websockets((app or _app()).routes, "")))


def _websockets(routes: Iterable[Any], prefix: str) -> Iterator[str]:
    for route in routes:
        included = getattr(route, "include_context", None)
        if included is not None:
            yield from _websockets(included.included_router.routes, prefix + included.prefix)
        elif "WebSocket" in type(route).__name__:
            yield prefix + route.path


def _schema_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few words: ``string``, ``integer or null``, ``array of TextPart``..."""
    if "$ref" in schema:
        name = _schema_name(schema["$ref"])
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(dict.fromkeys(_type(s) for s in schema.get("anyOf", schema.get("oneOf", []))))
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(kind)


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(schema: dict[str, Any]) -> str:
    return f"`{json.dumps(schema['default'])}`" if "default" in schema else ""


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    lines = [f"## `{method.upper()} {path}`", ""]
    if op.get("summary"):
        lines += [f"**{op['summary']}**", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    if params := op.get("parameters"):
        lines += ["| parameter | in | required | type | default |", "|---|---|---|---|---|"]
        lines += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                  f"{_cell(_type(p.get('schema', {})))} | {_default(p.get('schema', {}))} |" for p in params]
        lines.append("")
    if body := op.get("requestBody"):
        for media, content in body.get("content", {}).items():
            lines += [f"Request body ({media}): {_type(content.get('schema', {}))}", ""]
    lines += ["| response | description | content |", "|---|---|---|"]
    for status, response in sorted(op.get("responses", {}).items()):
        media = ", ".join(f"`{m}`" for m in response.get("content", {}))
        lines.append(f"| {status} | {_cell(response.get('description', ''))} | {media} |")
    return lines + [""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", ()))
        lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
        lines += [f"| `{field}` | {_cell(_type(s))} | {'yes' if field in required else 'no'} | {_default(s)} | "
                  f"{_cell(s.get('description', ''))} |" for field, s in properties.items()]
    else:
        lines.append(f"Type: {_type(schema)}")
    return lines + [""]


def http_api_markdown(schema: dict[str, Any], websockets: list[str]) -> str:
    """The HTTP API page: per path and method its summary, description, parameters, body and responses."""
    lines = ["# HTTP API", "",
             f"{schema['info']['title']} {schema['info']['version']}: every route of `lyre serve`, made from its",
             "OpenAPI schema when this site was built (a running server serves the same schema at",
             "`/openapi.json`). Which routes answer depends on what the server serves: without `--stt` the",
             "transcription routes answer 404, without `--admin-key` the admin routes do.", ""]
    for path, item in schema["paths"].items():
        for method in _METHODS:
            if method in item:
                lines += _operation(path, method, item[method])
    lines += ["## WebSockets", "", "Not in the OpenAPI schema: they are described on their pages.", ""]
    lines += [f"- `{path}`" for path in websockets] + [""]
    lines += ["## Schemas", ""]
    for name, body in schema.get("components", {}).get("schemas", {}).items():
        lines += _schema(name, body)
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    from lyre.cli.reference import reference_markdown

    app = _app()
    pages = {"reference/configuration.md": reference_markdown(),
             "reference/http-api.md": http_api_markdown(app.openapi(), websocket_paths(app))}
    for page, content in pages.items():
        files.append(File.generated(config, page, content=content))
    return files
