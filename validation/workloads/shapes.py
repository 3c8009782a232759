"""Model shapes of the reference job (the published Llama 3 configurations; "tiny" for
CPU/CI) and their parameter counts: torch-free, so a check can size a job before it starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab: int
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5


SHAPES: dict[str, Shape] = {
    "llama3-8b": Shape(4096, 32, 32, 8, 14336, 128256),
    "llama3-1b": Shape(2048, 16, 32, 8, 8192, 128256),
    "small": Shape(1024, 8, 16, 4, 4096, 32768),
    "tiny": Shape(64, 2, 4, 2, 128, 256),
}


def count_params(s: Shape) -> tuple[int, int]:
    """(all parameters, embedding parameters) from the shape alone."""
    hd = s.dim // s.n_heads
    attn = s.dim * hd * (s.n_heads * 2 + s.n_kv_heads * 2)
    block = attn + 3 * s.dim * s.ffn_dim + 2 * s.dim
    emb = s.vocab * s.dim
    return emb + s.n_layers * block + s.dim + s.vocab * s.dim, emb
