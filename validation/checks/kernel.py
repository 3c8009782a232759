"""Kernel: required command line tokens present, nouveau absent."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.registry import Context, check
from validation.model import Measurement
from validation.probes.system import parse_cmdline, parse_modules


@check("kernel.cmdline", emits=("kernel.cmdline_token",),
       timeout_s=15, title="kernel command line tokens the profile requires")
def kernel_cmdline(ctx: Context) -> Iterator[Measurement]:
    tokens = set(parse_cmdline(ctx.read("/proc/cmdline")))
    for want in ctx.profile.inventory.get("kernel_cmdline") or ():
        yield m("kernel.cmdline_token", str(want) in tokens, {"token": str(want)})


@check("kernel.nouveau", emits=("kernel.nouveau_loaded",),
       needs=("gpu",), timeout_s=15, title="nouveau not loaded")
def kernel_nouveau(ctx: Context) -> Iterator[Measurement]:
    yield m("kernel.nouveau_loaded", "nouveau" in parse_modules(ctx.read("/proc/modules")))
