"""Every committed capture of a tool still reads as recorded: a parser change that reads
any real output differently fails here, naming the capture. Where the change is meant,
rewrite the record (`PYTHONPATH=$PWD .venv/bin/python tests/unit/node/capture_readings.py`)
and say in the commit which readings moved and why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import capture_readings as cr  # noqa: E402

RECORD = cr.recorded()
READ = [p.relative_to(cr.FIXTURES).as_posix() for p in cr.captures()
        if cr.not_read(p.relative_to(cr.FIXTURES).as_posix()) is None]


def test_every_capture_is_read_by_a_parser_or_says_why_not() -> None:
    for path in cr.captures():
        rel = path.relative_to(cr.FIXTURES).as_posix()
        parser, why = cr.parser_for(rel), cr.not_read(rel)
        assert (parser is None) != (why is None), \
            f"{rel}: name its parser in capture_readings._parsers, or why none, in NOT_READ"
    assert sorted(RECORD) == sorted(READ), "the record and the captures differ: rewrite it"


@pytest.mark.parametrize("rel", READ)
def test_the_capture_reads_as_recorded(rel: str) -> None:
    assert cr.reading(cr.FIXTURES / rel) == RECORD[rel], \
        f"{rel} now reads differently (diff the reading against the record)"


def test_a_parser_that_reads_a_capture_differently_is_caught(monkeypatch) -> None:
    """The record is what stops a change: a topo parser that lost one GPU's NUMA node (the
    kind of slip an earlier cell-splitting change made) reads the real capture apart."""
    from validation.probes import nvidia_smi

    real = nvidia_smi.parse_topo

    def slipped(text: str):
        topo = real(text)
        topo.numa[topo.gpus[0]] = None
        return topo

    monkeypatch.setattr(nvidia_smi, "parse_topo", slipped)
    rel = "hgx-h200-2gpu/nvidia-smi-topo-m.txt"
    assert cr.reading(cr.FIXTURES / rel) != RECORD[rel]
