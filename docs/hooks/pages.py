"""Pages made at build time from files outside docs/: the README as the front page, ARCHITECTURE.md.

The README in the repository's root stays the one copy; its links into docs/ are rewritten to be relative
to the site's root.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# (file in the repository's root, the page it becomes)
_PAGES = (("README.md", "index.md"), ("ARCHITECTURE.md", "architecture/overview.md"))
_DOCS_LINK = re.compile(r"\]\(docs/")


def _root(config: Any) -> Path:
    return Path(config.config_file_path).resolve().parent


def front_page(readme: str) -> str:
    """The README as the site's index.md: ``](docs/x.md)`` becomes ``](x.md)``."""
    return _DOCS_LINK.sub("](", readme)


def on_files(files: Files, config: Any) -> Files:
    root = _root(config)
    for source, page in _PAGES:
        text = (root / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=front_page(text) if page == "index.md" else text))
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    for source, _ in _PAGES:  # mkdocs serve rebuilds when they change, as it does for docs/
        server.watch(str(_root(config) / source))
    return server
