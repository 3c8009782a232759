"""NVLink: links between every GPU pair (topo -m), every link up at speed, error counters."""

from __future__ import annotations

import re
from collections.abc import Iterator

from validation.checks.common import gpu_labels, labels_by_index, m, smi, topo_text
from validation.checks.registry import CheckSkipped, Context, check
from validation.model import Measurement
from validation.probes.nvidia_smi import (
    ParseError,
    parse_nvlink_errors,
    parse_topo,
    read_nvlink_status,
)

_KINDS = {"replay": "nvlink.replay_errors", "recovery": "nvlink.recovery_errors",
          "crc": "nvlink.crc_errors"}


@check("nvlink.topology", emits=("nvlink.pair_links",),
       needs=("gpu", "nvlink", "multi-gpu"), timeout_s=60,
       title="NVLinks bonded between every GPU pair (nvidia-smi topo -m)")
def nvlink_topology(ctx: Context) -> Iterator[Measurement]:
    from validation.probes.nvidia_smi import nv_links

    topo = parse_topo(topo_text(ctx))
    index = {name: int(re.sub(r"\D", "", name)) for name in topo.gpus}
    for a in topo.gpus:
        for b in topo.gpus:
            if index[a] < index[b]:
                cell = topo.matrix.get((a, b), "")
                yield m("nvlink.pair_links", nv_links(cell),
                        {"pair": f"{index[a]}-{index[b]}", "path": cell},
                        "artifacts/nvidia-smi-topo-m.txt")


def nvlink_error_counters(ctx: Context) -> dict[int, dict[int, dict[str, int]]]:
    return parse_nvlink_errors(ctx.run(["nvidia-smi", "nvlink", "-e"],
                                       artifact="nvidia-smi-nvlink-e.txt"))


def _labels(ctx: Context, uuids: dict[int, str]) -> dict[int, dict[str, str]]:
    """nvlink's GPU N -> that GPU's labels, by the UUID nvlink prints beside N (then by
    nvidia-smi's index), so a result lands on the right serial."""
    by_uuid = {g.uuid: gpu_labels(g) for g in smi(ctx).gpus}
    labels = labels_by_index(ctx)
    return {i: by_uuid.get(u) or labels.get(i) or {"gpu": str(i)} for i, u in uuids.items()}


@check("nvlink.links", emits=("nvlink.links_up", "nvlink.link_speed", *_KINDS.values()),
       needs=("gpu", "nvlink"), timeout_s=60,
       title="every NVLink up at full speed, error counters")
def nvlink_links(ctx: Context) -> Iterator[Measurement]:
    state = read_nvlink_status(ctx.run(["nvidia-smi", "nvlink", "-s"],
                                       artifact="nvidia-smi-nvlink-s.txt"))
    if state.no_nvlink_any:
        # nvidia-smi states that no GPU has NVLink: 0 links on each GPU the node has, judged
        # by the profile (one expecting NVLink fails; one without NVLink sets no limit)
        gpus = smi(ctx).gpus
        if not gpus:
            raise ParseError(f"nvidia-smi nvlink -s says {state.no_nvlink_any!r} and "
                             "nvidia-smi -q lists no GPU")
        for g in gpus:
            yield m("nvlink.links_up", 0, {**gpu_labels(g), "nvlink": "none"})
        return
    if not state.links and not state.unknown and not state.note:
        raise CheckSkipped("nvidia-smi nvlink -s lists no NVLink on any GPU")
    labels = _labels(ctx, state.uuids)
    for gpu, links in state.links.items():
        lab = labels.get(gpu, {"gpu": str(gpu)})
        if gpu in state.no_nvlink:  # "Device does not have or support Nvlink": 0 links
            lab = {**lab, "nvlink": "none"}
        # all links inactive: nvidia-smi's message, read as 0 up (the judge fails it)
        yield m("nvlink.links_up", sum(v is not None for v in links.values()), lab)
        for link, speed in links.items():
            if speed is not None:
                yield m("nvlink.link_speed", speed, {**lab, "link": str(link)})
    for gpu, link_counters in nvlink_error_counters(ctx).items():
        lab = labels.get(gpu, {"gpu": str(gpu)})
        for link, counters in link_counters.items():
            for kind, value in counters.items():
                if kind in _KINDS:
                    yield m(_KINDS[kind], value, {**lab, "link": str(link)})
    if state.note or state.unknown:
        # MIG mode, "not supported", a wording we do not know: the state is unknown.
        # Neither "0 links up" (a hardware fault) nor a skip: the check errors.
        why = state.note or "; ".join(f"GPU {g}: {w}" for g, w in sorted(state.unknown.items()))
        raise ParseError(f"NVLink state unknown: nvidia-smi says {why!r}")
