"""Do the CPU-dispatch variables change which kernels run here? Prints one line per setting.

The suite must pass on any x86-64 CPU, and CI's may dispatch other kernels
than a developer's (AVX-512 against AVX2 only). Pinning the dispatch down
(``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
CT2_FORCE_CPU_ISA=AVX2``) tries CI's kernels on a bigger machine; this script
shows whether a setting takes effect: each line gives torch's capability and a
fingerprint of the exact bits of a few results (a batched matmul, softmax,
exp, an RMS norm, Whisper's int8 encoder through CTranslate2 when it is
installed). Same fingerprint: the same kernels, or kernels that agree bit for
bit.

    .venv/bin/python scripts/kernel_pins.py
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

SETTINGS = {
    "native": {},
    "pinned to AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                       "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"},
    "torch default, CT2 AVX": {"ATEN_CPU_CAPABILITY": "default", "CT2_FORCE_CPU_ISA": "AVX"},
}


def _fingerprint(values: object) -> str:
    return hashlib.sha1(repr(values).encode() if not hasattr(values, "tobytes") else values.tobytes()).hexdigest()[:8]


def probe() -> str:
    """Run in a child: the capability and the fingerprint of each result."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    a, w, x = torch.randn(64, 576), torch.randn(576, 1536), torch.randn(7, 333)
    results = {
        "matmul": (a @ w).numpy(),
        "softmax": torch.softmax(x, -1).numpy(),
        "exp": torch.exp(x).numpy(),
        "rmsnorm": (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)).numpy(),
    }
    line = [torch.backends.cpu.get_cpu_capability()] + [f"{k}={_fingerprint(v)}" for k, v in results.items()]
    row = (a[:1] @ w) - (a @ w)[:1]
    line.append(f"row0 alone-vs-batched={float(row.abs().max()):.1e}")
    try:
        import ctranslate2

        from lyre.stt.model import demo_whisper

        model = ctranslate2.models.Whisper(str(demo_whisper()), device="cpu", compute_type="int8")
        features = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)
        encoded = model.encode(ctranslate2.StorageView.from_array(features))
        line.append(f"whisper-encoder={_fingerprint(np.array(encoded))}")
    except ImportError:
        line.append("whisper-encoder=(ctranslate2 not installed)")
    return "  ".join(line)


def main() -> int:
    if sys.argv[1:] == ["--probe"]:
        print(probe())
        return 0
    for name, extra in SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if k not in SETTINGS["pinned to AVX2"]} | extra
        out = subprocess.run([sys.executable, __file__, "--probe"], env=env, capture_output=True, text=True)
        print(f"{name:24s} {out.stdout.strip() or out.stderr.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
