"""FP8 weights: e4m3 projections with per-output-channel scales, matmuls through torch's scaled matmul.

Each projection's weight (out, in) is stored as e4m3 with one float32 scale
per output row; activations are quantised per token on the fly (what
torchao's rowwise float8 does inside). The embeddings and the output
projection stay in the model's dtype: they are lookups or a slice of the
vocabulary, and Orpheus's 156,940 rows are not a multiple of 16.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FP8_PROJECTIONS", "Fp8Linear", "quantize_fp8"]

FP8 = torch.float8_e4m3fn
_FP8_MAX = torch.finfo(FP8).max  # 448
FP8_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, K) -> (e4m3 (N, K), float32 scale (N, 1)) with x ~= q * scale."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / _FP8_MAX
    return (x.float() / scale).clamp(-_FP8_MAX, _FP8_MAX).to(FP8), scale


class Fp8Linear(nn.Module):
    """A bias-free linear layer with e4m3 weights and per-output-channel scales."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Fp8Linear takes bias-free layers")
        q, scale = _rowwise(linear.weight.detach())
        self.in_features, self.out_features = linear.in_features, linear.out_features
        if self.in_features % 16 or self.out_features % 16:
            raise ValueError(f"fp8 needs dimensions that are multiples of 16, got {self.out_features}x{self.in_features}")
        self.register_buffer("weight", q)  # (out, in) e4m3
        self.register_buffer("scale", scale.T.contiguous())  # (1, out) float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        q, scale = _rowwise(x.reshape(-1, self.in_features))  # per-token scales: (N, 1)
        # mat2 must be column-major: the transpose of the row-major (out, in) weight is.
        y = torch._scaled_mm(q, self.weight.T, scale_a=scale, scale_b=self.scale, out_dtype=x.dtype)
        return y.reshape(*shape[:-1], self.out_features)


def _check_support(device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, naming why, a device whose torch has no scaled matmul for e4m3 into ``dtype``.

    The probe asks for exactly what `Fp8Linear.forward` asks for: row-wise
    scales and output in the model's dtype. The output dtype matters: torch's
    row-wise kernels (CUTLASS ``f8f8bf16_rowwise``) write bfloat16, and it
    refuses float32 output with row-wise scales outside SM90, so a float32
    probe turned away Ada GPUs (L4, L40S) that serve a bf16 model fine.
    """
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        name = torch.cuda.get_device_name(device)
        raise ValueError(f"--quantize fp8 needs a GPU with FP8 support (compute capability 8.9+, e.g. Ada, Hopper); "
                         f"{name} has {torch.cuda.get_device_capability(device)}")
    try:
        a = torch.ones(16, 16, device=device).to(FP8)
        rows, columns = torch.ones(16, 1, device=device), torch.ones(1, 16, device=device)  # per token, per channel
        torch._scaled_mm(a, a.T, scale_a=rows, scale_b=columns, out_dtype=dtype)
    except (RuntimeError, NotImplementedError) as exc:
        hint = "" if dtype == torch.bfloat16 else "; --dtype bfloat16 is the output its row-wise form takes most widely"
        raise ValueError(f"--quantize fp8: this build of torch has no FP8 matmul with row-wise scales into "
                         f"{str(dtype).removeprefix('torch.')} on {device} ({exc}){hint}") from None


def quantize_fp8(model: nn.Module) -> int:
    """Replace every attention and MLP projection of ``model`` in place; returns how many."""
    weight = next(model.parameters())
    _check_support(weight.device, weight.dtype)  # the forward's activations, hence its output, are in this dtype
    replaced = 0
    for parent in list(model.modules()):
        for name in FP8_PROJECTIONS:
            child = getattr(parent, name, None)
            if isinstance(child, nn.Linear):
                setattr(parent, name, Fp8Linear(child))
                replaced += 1
    return replaced
