"""The in-process SSH node the remote tests run against answers an exec request before the
command can end, as sshd does: a command that ends at once, on a server whose reply is
slow, still reads as its exit status, never as "Channel closed." (a loaded CI machine
once made a test see that)."""

from __future__ import annotations

import time

import paramiko
from fake_node import FakeNode, finish


def test_a_command_that_ends_before_the_reply_reads_as_its_exit_status(tmp_path, monkeypatch):
    send = paramiko.Transport._send_user_message

    def slow_reply(self, m):
        if self.server_mode and m.asbytes()[:1] == bytes([paramiko.common.MSG_CHANNEL_SUCCESS]):
            time.sleep(0.3)  # a server thread that a busy machine did not schedule
        send(self, m)

    monkeypatch.setattr(paramiko.Transport, "_send_user_message", slow_reply)

    def ends_at_once(command: str, channel) -> bool:
        finish(channel, 3)
        return True

    fake = FakeNode(tmp_path / "node", exec_hook=ends_at_once)
    client = fake.connect()
    try:
        for _ in range(3):
            channel = client.get_transport().open_session(timeout=5)
            channel.exec_command("true")
            assert channel.recv_exit_status() == 3
            channel.close()
    finally:
        client.close()
        fake.close()
