"""`invoke verify` on a report nested past any real one (rackready.report.seal.canonical
.load_json, MAX_DEPTH): every file is read under the cap, so a rack.json 100,000 deep is
one FAILED line and exit 1, never a RecursionError traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_report_cli import run_cli, signed_run  # noqa: F401  (signed_run: a fixture)

from rackready.report.seal.canonical import MAX_DEPTH, json_depth, load_json

pytestmark = pytest.mark.integration  # the command line as a real process


@pytest.mark.parametrize("depth", [100_000, 900])
def test_verify_refuses_a_rack_json_nested_past_the_cap_in_one_line(
        signed_run: tuple[Path, Path], depth: int) -> None:  # noqa: F811
    run, key = signed_run
    (run / "report" / "rack.json").write_text("[" * depth + "]" * depth)
    node = next((run / "report").glob("node-*.json"))
    node.write_text('{"a":' * depth + "1" + "}" * depth)
    proc = run_cli("verify", "--report", str(run / "report"), "--pubkey", f"{key}.pub",
                   module="invoke")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "RecursionError" not in proc.stderr
    assert "no readable rack.json" in proc.stdout.splitlines()[0], proc.stdout
    cap = f"nested {depth} levels deep, more than the {MAX_DEPTH} a report may have"
    assert re.search(rf"^rack.json +FAILED +not readable JSON \({cap}\)", proc.stdout, re.M), \
        proc.stdout
    assert re.search(rf"^{node.name} +FAILED +not readable JSON \({cap}\)", proc.stdout, re.M)


def test_the_depth_counts_brackets_outside_strings_only() -> None:
    text = json.dumps({"a": [{"b": "[[[{{{\\\"]]]"}], "c": "\\\\["})
    assert json_depth(text) == 3
    assert load_json(text) == json.loads(text)
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match=f"more than the {MAX_DEPTH}"):
        load_json(deep)
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
