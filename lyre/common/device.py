"""Where models run: ``auto`` picks the first CUDA device torch sees, else the CPU.

Resolved once, before any config is built, so every later check (bf16 on
CUDA, CUDA graphs need CUDA, the codec's batching policy) reads a concrete
device string and nothing downstream ever sees ``auto``.
"""

from __future__ import annotations

import re

__all__ = ["AUTO", "resolve_device"]

AUTO = "auto"

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda:0`` when torch sees a CUDA device, else ``cpu``; ``cpu``/``cuda``/``cuda:N`` as given.

    Raises ValueError for any other name, and for a CUDA device this machine
    lacks: asking for the GPU and silently getting the CPU would be the worst
    outcome for a 3B model, so it is refused before anything loads.
    """
    if name != AUTO and not _DEVICE.fullmatch(name):
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {name!r}")
    if name == "cpu":
        return name
    # Imported here: the server's config resolves devices and must not pull torch in at import time.
    import torch

    if name == AUTO:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available on this machine (torch sees no CUDA device); "
                         "use cpu, or auto to take a GPU only where there is one")
    index = int(name.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return name
