#!/usr/bin/env bash
# Sets up rackready on a fresh Debian 12 controller (an Ubuntu controller is untested) (as root): the Python
# venv in .venv with every dependency. Quiet when it works (one line); when a step fails,
# the tail of its log and one line saying which step. The Debian packages the lab and the
# reports need are installed by the tasks that use them (`invoke demo`, `invoke test`).
set -euo pipefail
cd "$(dirname "$0")"
started=$SECONDS
mkdir -p .venv
log=.venv/bootstrap.log
: >"$log"

fail() {
    tail -n 25 "$log" >&2
    echo "bootstrap: $1 failed (whole log: $PWD/$log)" >&2
    exit 1
}

# step WHAT CMD...: CMD's output goes to the log; a failure shows its tail and one line.
step() {
    local what=$1
    shift
    echo "== $what: $*" >>"$log"
    "$@" >>"$log" 2>&1 || fail "$what"
}

if ! command -v python3 >/dev/null; then
    echo "bootstrap: python3 not found; install Python 3.10 or newer first" >&2
    exit 2
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "bootstrap: $(python3 -V 2>&1) is too old; rackready needs Python 3.10 or newer" >&2
    exit 2
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "bootstrap: python3-venv is missing; install it (apt-get install python3-venv)" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    step "apt-get update" apt-get update
    step "apt-get install python3-venv" apt-get install -y python3-venv python3-pip
fi
[ -x .venv/bin/python ] || step "creating the venv" python3 -m venv .venv

pip=(.venv/bin/python -m pip --disable-pip-version-check)
# Editable installs from pyproject.toml need pip 21.3 (PEP 660); newer pips are left alone.
if ! .venv/bin/python -c 'import sys, pip
sys.exit(tuple(int(x) for x in pip.__version__.split(".")[:2]) < (21, 3))' 2>>"$log"; then
    step "upgrading pip" "${pip[@]}" install --upgrade pip
fi

# Installed already from this very pyproject.toml: nothing to do (code is installed editable).
stamp=.venv/.bootstrap-pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import rackready' \
        2>>"$log" || [ ! -x .venv/bin/invoke ]; then
    rm -f "$stamp"
    step "pip install -e .[dev]" "${pip[@]}" install -e '.[dev]'
    echo "$want" >"$stamp"
fi
echo "rackready installed in .venv in $((SECONDS - started)) s (tasks: .venv/bin/invoke --list)"
