#!/usr/bin/env bash
# Sets up rackready on a fresh Debian 12 / Ubuntu 22.04+ controller (as root):
# the Python venv in .venv with every dependency. The lab's Debian packages are
# installed by `invoke lab.up` / `invoke test` themselves.
set -euo pipefail
cd "$(dirname "$0")"
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
echo "rackready installed in .venv (run .venv/bin/invoke --list)"
