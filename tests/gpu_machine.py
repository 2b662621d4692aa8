"""Run a script as if on the GPU test machine: only its packages and benchmarks/gpu_wheels.txt importable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "benchmarks" / "gpu_wheels.txt"

# DESIGN.md section 7: Python 3.12 with torch 2.11 (and triton), transformers, peft, onnxruntime, httpx and
# numpy; and what each of those requires.
MACHINE = {
    "torch", "triton", "filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
    "fsspec", "setuptools",
    "transformers", "huggingface-hub", "hf-xet", "packaging", "pyyaml", "regex", "safetensors", "tqdm", "requests",
    "urllib3", "charset-normalizer",
    "peft", "accelerate", "psutil",
    "onnxruntime", "coloredlogs", "humanfriendly", "flatbuffers", "protobuf",
    "httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi",
    "httpx2", "httpcore2", "truststore",  # what huggingface-hub 2 (the tests' version) requires in httpx's place
    "numpy",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_pins() -> dict[str, str]:
    """benchmarks/gpu_wheels.txt as {normalized name: version}."""
    pins = {}
    for line in WHEELS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalize(name)] = version
    return pins


# Imports of anything else fail as a missing module would; probes (importlib.util.find_spec, as torch
# uses for optional packages) find nothing.
_BLOCKER = """
import importlib.abc, importlib.metadata as md, importlib.util, json, re, runpy, sys
allowed = set(json.loads(sys.argv[1]))
owners = md.packages_distributions()
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
def absent(name):
    dists = owners.get(name.partition(".")[0])
    return bool(dists) and not any(norm(d) in allowed for d in dists)
class NotOnTheMachine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if absent(name):
            raise ModuleNotFoundError(f"No module named {name!r} on the GPU machine", name=name)
        return None
probe = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if absent(name) else probe(name, package)
sys.meta_path.insert(0, NotOnTheMachine())
script, sys.argv = sys.argv[2], sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def run_as_on_the_machine(script: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python script args`` with only the machine's packages, the wheels and lyre importable."""
    allowed = sorted(MACHINE | set(wheel_pins()) | {"lyre"})
    return subprocess.run([sys.executable, "-c", _BLOCKER, json.dumps(allowed), str(script), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
