"""Level budgets (validation/budgets.yml): shares fit, every check has one, timeouts derive."""

from __future__ import annotations

import copy
from pathlib import Path

from validation import budgets, runner
from validation.checks.catalog import all_checks
from validation.checks.registry import LEVELS, Context
from validation.checks.workload_checks import BURNIN_OVERHEAD_S
from validation.checks.workload_checks import LEVELS as WORKLOAD_LEVELS
from validation.profile import load_profile, scope


def _levels() -> dict[str, list[str]]:
    checks = all_checks()
    return {lv: [n for n, c in checks.items() if lv in c.levels] for lv in LEVELS}


def test_every_level_fits_its_budget_and_every_check_has_a_share():
    assert budgets.problems(_levels()) == []


def test_shares_over_the_budget_are_caught():
    raw = copy.deepcopy(budgets.load())
    raw["levels"]["quick"]["checks"]["hbm"] = {2: 60, 8: 60}
    found = budgets.problems(_levels(), raw=raw)
    assert any(p.startswith("quick on 2 GPUs: shares add up to") for p in found), found
    del raw["levels"]["standard"]["checks"]["collectives"]
    assert "standard: collectives has no share" in budgets.problems(_levels(), raw=raw)


def test_issue_targets_hold():
    # quick <= 90 s on 2 GPUs, <= 120 s on 8; standard <= 8 min on 2, <= 10 min on 8
    assert budgets.level_budget_s("quick", 2) <= 90
    assert budgets.level_budget_s("quick", 8) <= 120
    assert budgets.level_budget_s("standard", 2) <= 480
    assert budgets.level_budget_s("standard", 8) <= 600


def test_burnin_duration_fits_its_share_at_every_level():
    for level, p in WORKLOAD_LEVELS["gemm_burnin"].items():
        for gpus in (2, 8):
            share = budgets.share_s(level, "gemm_burnin", gpus)
            assert share is not None
            assert p["duration_s"] + BURNIN_OVERHEAD_S <= share, (level, gpus)


def _ctx(tmp: Path, level: str, site: dict) -> Context:
    return Context(profile=scope(load_profile("xe9680-h200"), gpus=2), level=level, out=tmp,
                   site=site)


def test_check_timeout_is_never_shorter_than_the_burnin_it_runs(tmp_path):
    spec = all_checks()["gemm_burnin"]
    t = runner.check_timeout_s(spec, _ctx(tmp_path, "burnin", {}))
    assert t >= 4 * 3600 + 60
    # a site that lengthens the burn-in lengthens the check's timeout with it
    long = {"workloads": {"gemm_burnin": {"duration_s": 8 * 3600}}}
    assert runner.check_timeout_s(spec, _ctx(tmp_path, "burnin", long)) >= 8 * 3600 + 60
    # quick: derived from its share, far below the registered 5 h ceiling
    quick = runner.check_timeout_s(spec, _ctx(tmp_path, "quick", {}))
    assert quick == budgets.timeout_s("quick", "gemm_burnin", 2, 15 + BURNIN_OVERHEAD_S)
    assert quick < 300


def test_a_check_outside_its_levels_keeps_its_registered_timeout(tmp_path):
    spec = all_checks()["dcgm.diag"]  # not a quick check: run there only with --only
    assert runner.check_timeout_s(spec, _ctx(tmp_path, "quick", {})) == spec.timeout_s
