"""sign-file stand-in (the kernel's scripts/sign-file): signs one stand-in module."""

from __future__ import annotations

import sys

from .common import run
from .dkms import sign_file as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run(main))
