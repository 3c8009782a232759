"""Deterministic, learnable token sequences: an affine chain mod a prime with seeded resets.

Token t+1 = (a * token t + c) mod p, except at random reset positions (10%)
where a fresh random token starts a new chain. A model learns the map
quickly, so the loss falls by a known path; the same (seed, step, rank)
always gives the same batch, on any machine.
"""

from __future__ import annotations

import torch

_PRIMES = (4093, 251, 61)


def chain_prime(vocab: int) -> int:
    for p in _PRIMES:
        if p <= vocab:
            return p
    raise ValueError(f"vocab {vocab} too small")


def batch(
    seed: int, step: int, rank: int, rows: int, seq: int, vocab: int, reset_p: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (rows, seq) int64 on the CPU."""
    p = chain_prime(vocab)
    g = torch.Generator().manual_seed(seed * 7_919 + step * 104_729 + rank * 1_299_709)
    a, c = 5, 17  # a is a unit mod every prime used, so the map is a permutation
    n = seq + 1
    starts = torch.randint(0, p, (rows, n), generator=g)
    reset = torch.rand(rows, n, generator=g) < reset_p
    reset[:, 0] = True
    pos = torch.arange(n).expand(rows, n)
    last = torch.cummax(torch.where(reset, pos, torch.zeros_like(pos)), dim=1).values
    k = pos - last  # steps since the chain's start
    ak, sk = [1], [0]  # a^k mod p and sum_{i<k} a^i mod p
    for _ in range(n):
        sk.append((sk[-1] + ak[-1]) % p)
        ak.append(ak[-1] * a % p)
    ak_t, sk_t = torch.tensor(ak[:n]), torch.tensor(sk[:n])
    r = torch.gather(starts, 1, last)
    tok = (ak_t[k] * r + c * sk_t[k]) % p
    return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
