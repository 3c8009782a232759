"""The Slurm submit host's commands (rackready.remote.slurm.SubmitHost) are bounded as every
remote command is: stdout and stderr drained together, each capped, one line when a cap
or the time limit is hit. The host is a real SSH server (tests/unit/fake_node.py)."""

from __future__ import annotations

import time

import pytest
from fake_node import FakeNode

from rackready.remote.slurm import SlurmError, SubmitHost
from rackready.site.slurm import SlurmSite


@pytest.fixture()
def host(tmp_path):
    node = FakeNode(tmp_path / "submit")
    h = SubmitHost(SlurmSite(submit=node.node, partition="", admin_become=False),
                   timeout_s=20)
    yield h
    h.close()
    node.close()


def _flood(stream: str, mib: int) -> list[str]:
    """A command that writes `mib` MiB on stream, then 'done' on stdout."""
    redirect = ">&2" if stream == "stderr" else ""
    return ["sh", "-c", f"head -c {mib << 20} /dev/zero | tr '\\0' x {redirect}; echo done"]


def test_a_command_answers_as_before(host):
    assert host.run(["sh", "-c", "echo 'JobState=RUNNING Reason=None'"]) == \
        "JobState=RUNNING Reason=None\n"
    with pytest.raises(SlurmError, match=r"^sh -c exited 3: nope$"):
        host.run(["sh", "-c", "echo nope >&2; exit 3"])


def test_a_flood_on_stderr_neither_hangs_nor_is_kept(host):
    # 3 MiB on stderr before stdout's first byte: read one stream at a time, the host
    # blocks on a full window while we wait for stdout's end (until the time limit)
    start = time.monotonic()
    with pytest.raises(SlurmError) as err:
        host.run(_flood("stderr", 3))
    assert time.monotonic() - start < 10
    assert str(err.value) == ("sh -c on 127.0.0.1: sent more than 64 KiB on stderr "
                              f"({(3 << 20) - (64 << 10)} bytes not kept)")


def test_a_flood_on_stdout_is_refused_at_the_cap(host):
    with pytest.raises(SlurmError, match=r"^sh -c on 127\.0\.0\.1: sent more than 1 MiB on "
                                         r"stdout$"):
        host.run(_flood("stdout", 3))


def test_a_command_that_does_not_end_is_stopped_at_its_time_limit(host):
    host.timeout_s = 1
    start = time.monotonic()
    with pytest.raises(SlurmError, match=r"^sleep 30 on 127\.0\.0\.1: (no end within 1 s|"
                                         r"stalled: no output for 1 s)$"):
        host.run(["sleep", "30"])
    assert time.monotonic() - start < 5
