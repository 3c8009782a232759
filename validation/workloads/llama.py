"""A Llama-style decoder: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention via SDPA.

Shapes follow the published Llama 3 configurations; "tiny" is for CPU/CI.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

# the shapes live in a torch-free module so the checks can plan a job without torch
from validation.workloads.shapes import SHAPES, Shape, count_params

__all__ = ["SHAPES", "Shape", "count_params", "Llama", "flops_per_token", "init_weights"]

# torchtitan v0.2.2's per-op selective AC (llama3 parallelize.py _op_sac_save_list): keep
# the outputs of matmuls (all but every second one) and of attention, recompute the rest
_SAC_SAVE = {
    getattr(torch.ops.aten, name).default
    for name in (
        "mm",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_fused_attention_overrideable",
    )
    if hasattr(torch.ops.aten, name)
}


def _sac_context() -> Any:
    """torchtitan's op policy: save listed ops, except every second mm (counted per pass)."""
    count = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            count[mode] += 1
        save = func in _SAC_SAVE and not (
            func == torch.ops.aten.mm.default and count[mode] % 2 == 0
        )
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        # torch's fused kernel (F.rms_norm, torchtitan's nn.RMSNorm) where the input is fp32
        # anyway: the same function, but it keeps only the input and 1/rms for backward, not
        # the normalized fp32 copy that the formula below saves (64 MiB at llama3-1b, seq 8192)
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(
            x
        ) * self.weight


def rope_tables(
    head_dim: int, seq: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (b, s, h, hd), interleaved pairs as in the Llama reference code
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).type_as(x)


# torchtitan v0.2.2's SDPA order (models/attention.py): cuDNN's fused attention first, then
# flash, then math (the only one on CPU). torch 2.11 already picks cuDNN on H200, where flash
# is 1.8x slower (bench/sdpa_backends.py); the order keeps it so under any torch default
SDPA_BACKENDS = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention, (b, heads, s, hd); k and v may have fewer heads (grouped-query):
    SDPA reads each kv head for its query heads (enable_gqa), so no expanded copy of k and
    v is made or saved for backward."""
    with sdpa_kernel(SDPA_BACKENDS, set_priority=True):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1]
        )


class Attention(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.h, self.kvh, self.hd = s.n_heads, s.n_kv_heads, s.dim // s.n_heads
        self.wq = nn.Linear(s.dim, self.h * self.hd, bias=False)
        self.wk = nn.Linear(s.dim, self.kvh * self.hd, bias=False)
        self.wv = nn.Linear(s.dim, self.kvh * self.hd, bias=False)
        self.wo = nn.Linear(self.h * self.hd, s.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = apply_rope(self.wq(x).view(b, n, self.h, self.hd), cos, sin)
        k = apply_rope(self.wk(x).view(b, n, self.kvh, self.hd), cos, sin)
        v = self.wv(x).view(b, n, self.kvh, self.hd)
        o = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))


class FeedForward(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.w1 = nn.Linear(s.dim, s.ffn_dim, bias=False)
        self.w2 = nn.Linear(s.ffn_dim, s.dim, bias=False)
        self.w3 = nn.Linear(s.dim, s.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(s.dim, s.norm_eps)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.dim, s.norm_eps)
        self.feed_forward = FeedForward(s)
        # activation checkpointing for this block: "" (none), "full" or "op" (selective)
        self.recompute = ""

    def _fwd(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            kw: dict[str, Any] = {"context_fn": _sac_context} if self.recompute == "op" else {}
            return checkpoint(
                self._fwd, x, cos, sin, use_reentrant=False, preserve_rng_state=False, **kw
            )
        return self._fwd(x, cos, sin)


class Llama(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.shape = s
        self.tok_embeddings = nn.Embedding(s.vocab, s.dim)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.n_layers))
        self.norm = RMSNorm(s.dim, s.norm_eps)
        self.output = nn.Linear(s.dim, s.vocab, bias=False)
        self._rope: torch.Tensor | None = None  # (cos, sin) stacked, for the last length

    def rope(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables for n positions, made once per length and device (torchtitan
        precomputes its freqs_cis too), as one (2, n, head_dim / 2) tensor. At seq 8192 that
        is one 2 MiB block in the caching allocator's large pool; the two 1 MiB tables made
        in every forward sat in its small pool, live at the step's peak, and took one 2 MiB
        page more of it than torchtitan (22 against 20 MiB reserved there;
        bench/results/h200-2026-12-02-titan-memory.md). The values are the same."""
        t = self._rope
        if t is None or t.shape[1] != n or t.device != device:
            s = self.shape
            t = torch.stack(rope_tables(s.dim // s.n_heads, n, s.rope_theta, device))
            self._rope = t
        return t[0], t[1]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope(tokens.shape[1], tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def flops_per_token(s: Shape, seq: int) -> float:
    """torchtitan's count (v0.2): 6 * non-embedding params + 12 * L * H * head_dim * seq.

    The attention term is not halved for the causal mask, as in torchtitan, so
    MFU here compares one to one with its published 49.7% / 52.2%.
    """
    n, emb = count_params(s)
    return 6 * (n - emb) + 12 * s.n_layers * s.n_heads * (s.dim // s.n_heads) * seq


@torch.no_grad()
def init_weights(model: Llama, seed: int, rank: int) -> None:
    """Seeded init of each rank's local shard (so it works on sharded DTensors too)."""
    s = model.shape
    depth_std = 0.02 / math.sqrt(2 * s.n_layers)
    for i, (name, p) in enumerate(model.named_parameters()):
        local = p.to_local() if hasattr(p, "to_local") else p
        g = torch.Generator(device=local.device).manual_seed(seed * 1_000_003 + rank * 10_007 + i)
        if name.endswith("norm.weight"):
            local.fill_(1.0)
        elif name.endswith(("wo.weight", "w2.weight")):
            local.normal_(0.0, depth_std, generator=g)
        elif name == "tok_embeddings.weight":
            local.normal_(0.0, 1.0, generator=g)
        else:
            local.normal_(0.0, 0.02, generator=g)
