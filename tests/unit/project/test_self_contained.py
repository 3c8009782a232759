"""The repository stands alone: no file reaches outside it.

A user's clone has nothing beside it, so every path a file names must stay inside
the tree: no relative path to a `shared` folder beside the checkout, no absolute path
into the workspace it was written in, no `Path(__file__).parents[N]` / `.parent` chain /
`dirname "$0"/..` climbing above the repository root, no symlink leading out (or
nowhere), no markdown link to a file outside. The scan runs over every git-tracked
(and not ignored, not yet committed) file; without git it walks the tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
# what a walk without git leaves out: the same as .gitignore
SKIP_DIRS = {".git", ".venv", "runs", "artifacts", "__pycache__", ".pytest_cache", ".mypy_cache",
             ".ruff_cache", "build", "dist", ".whl", ".gl"}
MAX_BYTES = 2_000_000

# a folder beside the checkout: "shared" after one or more "../" (or "..\\")
BESIDE = re.compile(r"(?:\.\.[/\\])+shared\b")
# an absolute path into the workspace this repository was written in (not a URL's path);
# spelled in pieces so this file does not name it itself
WORKSPACE_DIR = "/" + "work" + "/"
WORKSPACE = re.compile(r"(?<![\w.~/-])" + re.escape(WORKSPACE_DIR))
# Path(__file__)[.resolve()].parent.parent / .parents[N] ...
PY_FILE_PATH = re.compile(
    r"Path\(\s*__file__\s*\)((?:\s*\.\s*(?:resolve\(\s*\)|absolute\(\s*\)|parent\b(?!s)"
    r"|parents\s*\[\s*\d+\s*\]))+)")
PY_STEP = re.compile(r"parent\b(?!s)|parents\s*\[\s*(\d+)\s*\]")
# os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY_DIRNAME = re.compile(r"((?:os\.path\.dirname\(\s*)+)(?:os\.path\.(?:abspath|realpath)\(\s*)?"
                        r"__file__")
# "$(dirname "$0")/../.." in shell
SH_DIRNAME = re.compile(r"dirname\s+\"?\$(?:0|\{BASH_SOURCE(?:\[0\])?\}|BASH_SOURCE)\"?\s*\)"
                        r"\"?((?:/\.\.(?![\w.]))+)")
# {{ role_path }}/../.. in Ansible
JINJA_DIR = re.compile(r"\{\{\s*(playbook_dir|role_path|inventory_dir)\s*\}\}((?:/\.\.(?![\w.]))+)")
MD_INLINE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)")
MD_REFDEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
MD_HTML = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def tracked_files(root: Path) -> list[str]:
    """Paths relative to root: git's view (tracked, and new files not ignored) or a walk."""
    if shutil.which("git") and (root / ".git").exists():
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                               "--exclude-standard"], cwd=root, capture_output=True, check=True)
        return sorted({p for p in proc.stdout.decode().split("\0") if p})
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
        out += [os.path.relpath(os.path.join(dirpath, d), root) for d in dirnames
                if os.path.islink(os.path.join(dirpath, d))]
    return sorted(p.replace(os.sep, "/") for p in out)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _outside(rel_dir: PurePosixPath, target: str) -> bool:
    """Does target, relative to rel_dir (both inside the repository), leave it?"""
    parts: list[str] = list(rel_dir.parts)
    for part in PurePosixPath(target).parts:
        if part == "..":
            if not parts:
                return True
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return False


def scan_text(rel: str, text: str) -> list[str]:
    """Every reference in one file's text that leaves the repository, as 'path:line: why'."""
    found = []
    path = PurePosixPath(rel)
    level = len(path.parts) - 1  # folders between the root and the file

    def hit(pos: int, why: str) -> None:
        found.append(f"{rel}:{_line(text, pos)}: {why}")

    for m in BESIDE.finditer(text):
        hit(m.start(), f"names a folder beside the repository ({m.group(0)})")
    for m in WORKSPACE.finditer(text):
        hit(m.start(), f"names an absolute workspace path ({WORKSPACE_DIR}...)")
    if path.suffix == ".py":
        for m in PY_FILE_PATH.finditer(text):
            up = sum(1 if s.group(1) is None else int(s.group(1)) + 1
                     for s in PY_STEP.finditer(m.group(1)))
            if up > level + 1:
                hit(m.start(), f"Path(__file__) climbs {up - level - 1} folder(s) above the "
                               "repository root")
        for m in PY_DIRNAME.finditer(text):
            up = m.group(1).count("dirname")
            if up > level + 1:
                hit(m.start(), "os.path.dirname(__file__) climbs above the repository root")
    for m in SH_DIRNAME.finditer(text):
        if m.group(1).count("..") > level:
            hit(m.start(), "dirname $0 climbs above the repository root")
    for m in JINJA_DIR.finditer(text):
        base = {"role_path": 2, "inventory_dir": 2}.get(m.group(1), level)
        if m.group(2).count("..") > base:
            hit(m.start(), f"{m.group(1)} climbs above the repository root")
    if path.suffix.lower() in (".md", ".markdown"):
        # links inside code blocks are code, not links; blank them keeping line numbers
        body = FENCE.sub(lambda f: re.sub(r"[^\n]", " ", f.group(0)), text)
        for rx in (MD_INLINE, MD_REFDEF, MD_HTML):
            for m in rx.finditer(body):
                target = m.group(1)
                if target.startswith("#") or (SCHEME.match(target)
                                              and not target.lower().startswith("file:")):
                    continue
                if target.lower().startswith("file:") or target.startswith(("/", "\\")):
                    hit(m.start(1), f"links to an absolute path ({target})")
                elif _outside(path.parent, target.split("#")[0].split("?")[0]):
                    hit(m.start(1), f"links outside the repository ({target})")
    return found


def scan_link(root: Path, rel: str) -> list[str]:
    """A symlink must point, relatively, at something that exists inside the repository."""
    target = os.readlink(root / rel)
    if os.path.isabs(target):
        return [f"{rel}: symlink to an absolute path ({target})"]
    if _outside(PurePosixPath(rel).parent, target):
        return [f"{rel}: symlink leads outside the repository ({target})"]
    resolved = (root / rel).resolve()
    if not resolved.exists():
        return [f"{rel}: symlink leads nowhere ({target})"]
    if not resolved.is_relative_to(root.resolve()):  # through another link that leaves
        return [f"{rel}: symlink resolves outside the repository ({resolved})"]
    return []


def scan(root: Path, files: list[str] | None = None) -> list[str]:
    found = []
    for rel in tracked_files(root) if files is None else files:
        p = root / rel
        if p.is_symlink():
            found += scan_link(root, rel)
            continue
        if not p.is_file():
            continue  # deleted in the working tree, not yet in git
        data = p.read_bytes()[:MAX_BYTES]
        if b"\0" in data[:8192]:
            continue  # binary
        found += scan_text(rel, data.decode("utf-8", errors="replace"))
    return found


def test_no_file_of_the_repository_reaches_outside_it():
    files = tracked_files(ROOT)
    assert len(files) > 100 and "README.md" in files  # the scan saw the tree
    found = scan(ROOT, files)
    assert found == [], "\n".join(found)


# -- the scan itself: planted references are found, look-alikes are not ----------------

W = WORKSPACE_DIR
# built, so this file's own text holds none of what it plants
S = ".." + "/shared"
UP = "/" + ".."
RP = "{{ role" + "_path }}"


def plant(root: Path) -> None:
    files = {
        "pkg/mod.py": (
            "from pathlib import Path\n"
            "ROOT = Path(__file__).resolve().parents[1]\n"          # the root: fine
            "FIX = Path(__file__).resolve().parents[2] / 'x'\n"     # above it
            "UP = Path(__file__).parent.parent.parent\n"            # above it
            "SIB = Path(__file__).resolve().parent.parents[0]\n"    # the root: fine
            f"DATA = ROOT / '{S}/fixtures/a.txt'\n"
            "import os\n"
            "D = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
        ),
        "tool.py": "HERE = Path(__file__).resolve().parent\n",     # the root: fine
        "docs/guide.md": (
            "Data shared by every test; the shared folder is ours.\n"
            "[design](design.md) [top](../README.md) [site](https://example.com/work/x)\n"
            "[beside](../../other/README.md) [anchor](#usage) ![img](img/a.png#x)\n"
            f"[abs]({W}shared/x.md) [f](file:///etc/passwd)\n"
            "```\n[not a link](../../../x)\n```\n"
            "[ref]: ../../outside.md\n"
            '<img src="../../logo.png">\n'
        ),
        "scripts/run.sh": f'cd "$(dirname "$0"){UP}"\nsrc="$(dirname "$0"){UP * 2}/x"\n',
        "roles/r/tasks/main.yml": f'src: "{RP}{UP * 3}/x"\nok: "{RP}{UP}/x"\n',
        "notes.txt": f"see {W}main/README.md and https://host{W}x and homework/ too\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "docs/link-in").symlink_to("guide.md")
    (root / "docs/link-out").symlink_to("../../elsewhere")
    (root / "docs/link-abs").symlink_to("/etc/hostname")
    (root / "docs/link-dead").symlink_to("missing.md")


EXPECTED = [
    "docs/guide.md:3: links outside the repository (../../other/README.md)",
    f"docs/guide.md:4: names an absolute workspace path ({W}...)",
    f"docs/guide.md:4: links to an absolute path ({W}shared/x.md)",
    "docs/guide.md:4: links to an absolute path (file:///etc/passwd)",
    "docs/guide.md:8: links outside the repository (../../outside.md)",
    "docs/guide.md:9: links outside the repository (../../logo.png)",
    "docs/link-abs: symlink to an absolute path (/etc/hostname)",
    "docs/link-dead: symlink leads nowhere (missing.md)",
    "docs/link-out: symlink leads outside the repository (../../elsewhere)",
    f"notes.txt:1: names an absolute workspace path ({W}...)",
    "pkg/mod.py:3: Path(__file__) climbs 1 folder(s) above the repository root",
    "pkg/mod.py:4: Path(__file__) climbs 1 folder(s) above the repository root",
    f"pkg/mod.py:6: names a folder beside the repository ({S})",
    "pkg/mod.py:8: os.path.dirname(__file__) climbs above the repository root",
    "roles/r/tasks/main.yml:1: role_path climbs above the repository root",
    "scripts/run.sh:2: dirname $0 climbs above the repository root",
]


def test_planted_references_are_found_and_nothing_else(tmp_path):
    plant(tmp_path)
    assert sorted(scan(tmp_path)) == sorted(EXPECTED)


def test_git_listing_is_what_is_scanned(tmp_path):
    if not shutil.which("git"):
        pytest.skip("git is not installed; the walk is tested above")
    plant(tmp_path)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored/x.py").write_text(f"P = '{S}'\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = tracked_files(tmp_path)
    assert "ignored/x.py" not in files and "pkg/mod.py" in files and "docs/link-out" in files
    assert any(f.startswith("pkg/mod.py:6:") for f in scan(tmp_path))
