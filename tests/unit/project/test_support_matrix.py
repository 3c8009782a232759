"""README.md's support matrix covers every role and every release os_support accepts,
and every role's README says on what its OS claims rest."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
ROLES = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/main.yml"))
HEADING = "## Support matrix"


def matrix(readme: str) -> tuple[list[str], list[str]]:
    """(the header's release columns, the first cell of every row) of the section's first table."""
    section = readme.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    firsts = [line.strip("|").split("|")[0].strip() for line in rows[2:]]
    return header[1:], firsts


def releases() -> list[str]:
    defaults = yaml.safe_load((ROOT / "roles/os_support/defaults/main.yml").read_text())
    return [r.replace("-", " ") for r in defaults["os_support_releases"]]


def test_every_accepted_release_is_a_column():
    columns, _ = matrix((ROOT / "README.md").read_text())
    assert columns == releases()


def test_every_role_has_a_row():
    _, firsts = matrix((ROOT / "README.md").read_text())
    named = {re.split(r"[ ,(:]", cell, maxsplit=1)[0] for cell in firsts}
    assert set(ROLES) <= named, sorted(set(ROLES) - named)


def test_every_role_readme_says_where_its_os_claims_rest():
    lacking = [r for r in ROLES
               if "## Sources and OS status" not in (ROOT / "roles" / r / "README.md").read_text()]
    assert lacking == []


def test_the_matrix_reader_sees_a_missing_role_and_release(tmp_path: Path):
    readme = (f"{HEADING}\n\n| role | Debian 12 |\n| --- | --- |\n"
              "| os_support (refuse) | lab |\n\n| claim | proof |\n| --- | --- |\n"
              "| H200 | real |\n\n## Layout\n")
    columns, firsts = matrix(readme)
    assert columns == ["Debian 12"] and columns != releases()
    assert firsts == ["os_support (refuse)"]
