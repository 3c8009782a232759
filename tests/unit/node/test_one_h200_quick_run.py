"""A real quick run on one H200 (tests/fixtures/h200-1gpu-quick), judged by the node's
judge against the profile scoped as that run was: the only failure is the VM's missing
`iommu=pt`. The limits the GPU quick plan and a one-GPU scope leave out read not
applicable by their stated reasons; a run that never stated whether it ran the checkpoint
round trip (captured before the job reported it) still fails those limits as not measured.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

from validation.judge import judge
from validation.model import CheckResult
from validation.profile import load_profile, scope

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "h200-1gpu-quick"
CKPT = {"fsdp.ckpt_write_gbps", "fsdp.ckpt_read_gbps", "fsdp.ckpt_resume_max_abs_diff"}


def _judged(name: str) -> dict[tuple[str, str], list[Any]]:
    result = json.loads(lzma.decompress((FIXTURE / name).read_bytes()))
    profile = scope(load_profile(result["profile"]), gpus=result["scope"]["gpus"],
                    without=tuple(result["scope"]["without"]))
    verdicts = judge([CheckResult.from_dict(c) for c in result["checks"]], profile)
    out: dict[tuple[str, str], list[Any]] = {}
    for v in verdicts:
        out.setdefault((v.metric, v.outcome), []).append(v)
    return out


def test_a_healthy_h200_fails_only_on_its_vms_kernel_command_line() -> None:
    judged = _judged("after-fix.result.json.xz")
    failed = {metric for metric, outcome in judged if outcome == "fail"}
    assert failed == {"kernel.cmdline_token"}
    assert "iommu=pt" in judged[("kernel.cmdline_token", "fail")][0].message
    for metric in CKPT:
        why = judged[(metric, "not_applicable")][0].message
        assert "fsdp.ckpt_round_trip = False" in why and "quick level" in why, why
    p2p = judged[("p2p.bandwidth", "not_applicable")][0].message
    assert "does not require multi-gpu" in p2p, p2p
    assert ("fsdp.tokens_per_s_per_gpu", "pass") in judged


def test_a_run_that_never_said_whether_it_saved_a_checkpoint_fails_those_limits() -> None:
    judged = _judged("before-fix.result.json.xz")
    failed = {metric for metric, outcome in judged if outcome == "fail"}
    assert failed == {"kernel.cmdline_token"} | CKPT
    for metric in CKPT:
        assert "not measured" in judged[(metric, "fail")][0].message
