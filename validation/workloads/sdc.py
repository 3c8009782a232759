"""Silent data corruption screen: which GPU's result differs from the others'.

Pure (torch tensors in, counts out) so the blame rule is tested on its own.
"""

from __future__ import annotations

import torch


def sdc_blame(results: list[torch.Tensor], stable: list[bool] | None = None) -> dict[int, int]:
    """Mismatching elements per rank against the reference result.

    The reference is the result held by the most ranks. On a tie (2 GPUs that
    disagree) a group whose GPUs all reproduced their own first result
    (`stable`) is the reference if it is the only such group; otherwise no
    GPU can be cleared and every rank gets its count against the others.
    """
    n = len(results)
    groups: list[list[int]] = []
    for r, t in enumerate(results):
        for g in groups:
            if torch.equal(results[g[0]], t):
                g.append(r)
                break
        else:
            groups.append([r])
    groups.sort(key=len, reverse=True)
    if len(groups) == 1:
        return {r: 0 for r in range(n)}
    ref_group: list[int] | None = None
    if len(groups[0]) > len(groups[1]):
        ref_group = groups[0]
    elif stable is not None:
        top = [g for g in groups if len(g) == len(groups[0]) and all(stable[r] for r in g)]
        if len(top) == 1:
            ref_group = top[0]
    if ref_group is not None:
        ref = results[ref_group[0]]
        return {r: int((results[r] != ref).sum()) for r in range(n)}
    return {
        r: max(int((results[r] != results[s]).sum()) for s in range(n) if s != r) for r in range(n)
    }
