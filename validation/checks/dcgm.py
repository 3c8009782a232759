"""DCGM diagnostics: `dcgmi diag -r 2` (standard) or `-r 3` (burnin), one verdict per
plugin and GPU. dcgmi exits non-zero when a plugin fails; the JSON still says which."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.registry import Context, check
from validation.model import Measurement
from validation.probes.dcgm import parse_diag_json

DIAG_LEVEL = {"standard": 2, "burnin": 3}
# seconds dcgmi diag may take per run level (r3 runs the stress plugins: tens of minutes)
DIAG_TIMEOUT_S = {2: 900, 3: 3600}


@check("dcgm.diag", emits=("dcgm.diag_result",),
       needs=("gpu", "dcgm"), levels=("standard", "burnin"), timeout_s=3900,
       title="DCGM diagnostics (dcgmi diag -r 2 standard, -r 3 burn-in): every plugin, every GPU")
def dcgm_diag(ctx: Context) -> Iterator[Measurement]:
    r = DIAG_LEVEL.get(ctx.level, 2)
    name = f"dcgmi-diag-r{r}.json"
    # 226: dcgmi's exit status when a plugin failed (the report is complete)
    text = ctx.run(["dcgmi", "diag", "-r", str(r), "-j"], timeout_s=DIAG_TIMEOUT_S[r],
                   artifact=name, ok_codes=(0, 226))
    for res in parse_diag_json(text):
        labels = {"plugin": res.plugin, "gpu": res.gpu, "category": res.category}
        if res.warnings:
            labels["warning"] = "; ".join(res.warnings)[:200]
        yield m("dcgm.diag_result", res.status, labels, f"artifacts/{name}")
