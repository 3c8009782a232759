"""NVSwitch health: SXid (switch XID) events in the kernel log, per switch."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.fabric import NVSWITCH_DIR
from validation.checks.gpu_health import kernel_log
from validation.checks.registry import CheckSkipped, Context, check
from validation.model import Measurement
from validation.probes.nvswitch import bus_key, parse_nvswitch_information, parse_sxids


def nvswitches(ctx: Context) -> dict[str, str]:
    """bus id -> switch number (Device Minor) from the nvswitch driver's proc files."""
    d = ctx.path(NVSWITCH_DIR)
    out = {}
    for i, dev in enumerate(sorted(d.iterdir()) if d.is_dir() else ()):
        info = parse_nvswitch_information((dev / "information").read_text()
                                          if (dev / "information").is_file() else "")
        out[bus_key(info.get("Bus Location") or dev.name)] = info.get("Device Minor", str(i))
    return out


@check("nvswitch.sxid", emits=("nvswitch.sxid_fatal", "nvswitch.sxid_nonfatal"),
       needs=("nvswitch",), timeout_s=60,
       title="NVSwitch SXid events since boot (fatal and non-fatal), per switch")
def nvswitch_sxid(ctx: Context) -> Iterator[Measurement]:
    switches = nvswitches(ctx)
    events = parse_sxids(kernel_log(ctx))
    # an SXid from a bus id the driver no longer lists still names its switch
    known = {**switches, **{bus_key(e.bus): str(e.instance) for e in events
                            if bus_key(e.bus) not in switches}}
    if not known:  # nothing to count on: a skip (a failure where the profile needs NVSwitch)
        raise CheckSkipped(f"no NVSwitch listed in {NVSWITCH_DIR} nor named in the kernel log")
    for bus, minor in sorted(known.items(), key=lambda kv: int(kv[1])):
        mine = [e for e in events if bus_key(e.bus) == bus]
        fatal = [e for e in mine if e.severity != "non-fatal"]  # unknown counts as fatal
        nonfatal = [e for e in mine if e.severity == "non-fatal"]
        lab = {"nvswitch": minor, "bus_id": bus}
        yield m("nvswitch.sxid_fatal", len(fatal),
                {**lab, **({"sxids": ",".join(sorted({str(e.sxid) for e in fatal}))}
                           if fatal else {})})
        yield m("nvswitch.sxid_nonfatal", len(nonfatal),
                {**lab, **({"sxids": ",".join(sorted({str(e.sxid) for e in nonfatal}))}
                           if nonfatal else {})})
