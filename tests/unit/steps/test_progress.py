"""The live progress board: verdicts (judged by the controller) per check, the caller's
outcome per node, "ran" where nobody judged, colour only on a terminal, node text cleaned."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from rackready.steps.progress import Board, check_verdict
from validation.profile import load_profile, scope, with_site

REAL_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def finished(check: str, status: str = "ok", **extra) -> dict:
    return {"event": "check_finished", "check": check,
            "result": {"check": check, "status": status, "duration_s": 0.25, "measurements": [],
                       "message": "", "needs": []}, **extra}


def test_plain_stream_without_judges_says_ran_not_a_verdict():
    buf = io.StringIO()
    board = Board(["gpu01", "gpu02"], stream=buf)
    board.event("gpu01", {"event": "check_started", "check": "gpu_inventory"})
    board.event("gpu01", {"event": "progress", "check": "gemm", "fraction": 0.5, "eta_s": 12})
    board.event("gpu01", finished("gpu_inventory"))
    board.event("gpu01", finished("gpu.health", "error"))
    board.finish("gpu02", "INCOMPLETE", "gpu02: unreachable at 192.0.2.9")
    assert buf.getvalue().splitlines() == [
        "gpu01  gpu_inventory ran ok (0.2s)",
        "gpu01  gpu.health ran error (0.2s)",
        "gpu02  INCOMPLETE: gpu02: unreachable at 192.0.2.9",
    ]
    assert "\x1b" not in buf.getvalue()  # not a terminal: no colour


def test_progress_line_has_bar_and_time_left():
    buf = io.StringIO()
    board = Board(["n1"], stream=buf)
    board.event("n1", {"event": "progress", "check": "gemm_burnin", "fraction": 0.25,
                       "eta_s": 90, "label": "gpu 0-7"})
    assert board.lines["n1"] == "gemm_burnin [#####...............]  25% 90s left gpu 0-7"


def test_judged_checks_show_the_verdict_word_never_the_status():
    seen = []

    def judge(result: dict) -> str:
        seen.append(result["check"])
        return {"gpu.health": "FAIL", "fabric.state": "N/A", "hbm": "ERROR"}.get(
            result["check"], "PASS")

    buf = io.StringIO()
    board = Board(["gpu01", "gpu02"], stream=buf, judges={"gpu01": judge})
    for check in ("gpu.inventory", "gpu.health", "fabric.state", "hbm"):
        board.event("gpu01", finished(check))
    board.event("gpu01", finished("gpu.xid", resumed=True))
    board.event("gpu02", finished("gpu.health"))  # no judge for gpu02
    board.finish("gpu01", "FAIL", "GPU 1: health.delta.pcie_replay")
    board.finish("gpu02", "PARTIAL")
    assert buf.getvalue().splitlines() == [
        "gpu01  gpu.inventory PASS (0.2s)",
        "gpu01  gpu.health FAIL (0.2s)",  # the check ran ok; its verdict is FAIL
        "gpu01  fabric.state N/A (0.2s)",
        "gpu01  hbm ERROR (0.2s)",
        "gpu01  gpu.xid PASS (0.2s, resumed)",
        "gpu02  gpu.health ran ok (0.2s)",
        "gpu01  FAIL: GPU 1: health.delta.pcie_replay",
        "gpu02  PARTIAL",
    ]
    assert seen == ["gpu.inventory", "gpu.health", "fabric.state", "hbm", "gpu.xid"]


def test_a_judge_that_breaks_or_answers_nonsense_is_no_pass():
    def broken(result: dict) -> str:
        raise KeyError("measurements")

    buf = io.StringIO()
    board = Board(["a", "b"], stream=buf, judges={"a": broken, "b": lambda r: "ok"})
    board.event("a", finished("gpu.health"))
    board.event("b", finished("gpu.health"))
    assert buf.getvalue().splitlines() == ["a  gpu.health ERROR (0.2s)",
                                           "b  gpu.health ERROR (0.2s)"]


@pytest.mark.parametrize("word,code", [("PASS", "32"), ("FAIL", "31"), ("N/A", "33"),
                                       ("ERROR", "31")])
def test_verdicts_are_coloured_on_a_terminal(monkeypatch, word, code):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    buf = Tty()
    board = Board(["n1"], stream=buf, judges={"n1": lambda r: word})
    board.event("n1", finished("gpu.health"))
    assert f"gpu.health \x1b[{code}m{word}\x1b[0m (0.2s)" in buf.getvalue()
    assert board.lines["n1"] == f"gpu.health {word} (0.2s)"  # plain text stays plain


@pytest.mark.parametrize("outcome,code", [("PASS", "32"), ("FAIL", "31"),
                                          ("INCOMPLETE", "33"), ("PARTIAL", "33")])
def test_node_outcome_is_coloured_on_a_terminal(monkeypatch, outcome, code):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    buf = Tty()
    board = Board(["n1"], stream=buf)
    board.finish("n1", outcome, "why")
    board.close()
    assert f"n1  \x1b[{code}m{outcome}\x1b[0m: why" in buf.getvalue()


def test_no_colour_with_no_color_set(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    buf = Tty()
    board = Board(["n1"], stream=buf, judges={"n1": lambda r: "FAIL"})
    board.event("n1", finished("gpu.health"))
    board.finish("n1", "FAIL")
    text = buf.getvalue().replace("\x1b[2K", "").replace("\x1b[1F", "")
    assert "\x1b" not in text and "gpu.health FAIL" in text


def test_node_text_cannot_drive_the_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    evil = "gpu\x1b[2J\x1b]0;owned\x07.health\r\x9b31m\u202e"
    buf = io.StringIO()
    board = Board(["n1"], stream=buf, judges={"n1": lambda r: "PASS"})
    board.event("n1", {"event": "check_started", "check": evil})
    assert board.lines["n1"] == "gpu[2J]0;owned.health31m ..."
    board.event("n1", {"event": "progress", "check": evil, "fraction": 0.5,
                       "label": "gpu\x1b[1A 0\nnext"})
    assert "\x1b" not in board.lines["n1"] and "gpu[1A 0 next" in board.lines["n1"]
    board.event("n1", finished(evil))
    board.finish("n1", "FAIL", "detail\x1b[5A\r\nnext line")
    out = buf.getvalue()
    assert "\x1b" not in out and "\r" not in out and "\x9b" not in out and "\u202e" not in out
    assert out.splitlines()[-1] == "n1  FAIL: detail[5A next line"


def test_terminal_lines_are_cut_to_the_width(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    buf = Tty()
    board = Board(["n1"], stream=buf)
    board.update("n1", "x" * 200)
    drawn = [line.replace("\x1b[2K", "") for line in buf.getvalue().split("\n") if line]
    assert drawn and all(len(line) <= 39 for line in drawn)


# -- check_verdict: the controller's judge on one check ----------------------------------

def real_run() -> tuple[dict, object]:
    """The real 2x H200 quick run and its profile, narrowed as that run was and to the
    metrics its suite emitted (tests/unit/real_run_suite.py)."""
    from dataclasses import replace

    from tests.unit.real_run_suite import NOT_YET_EMITTED

    res = json.loads(gzip.decompress(REAL_RUN.read_bytes()))
    sc = res["scope"]
    profile = with_site(scope(load_profile(res["profile"]), sc["gpus"], tuple(sc["without"])),
                        {})
    return res, replace(profile, thresholds=tuple(t for t in profile.thresholds
                                                  if t.metric not in NOT_YET_EMITTED))


def test_check_verdicts_of_the_real_run():
    res, profile = real_run()
    words = {c["check"]: check_verdict(c, profile) for c in res["checks"]}
    # the run failed on these two (NCCL version pin, a missing kernel parameter)
    assert sorted(k for k, w in words.items() if w == "FAIL") == ["kernel.cmdline",
                                                                   "nccl.version"]
    # what the narrowed profile does not require was skipped: not applicable, never a pass
    skipped = {c["check"] for c in res["checks"] if c["status"] == "skipped"}
    assert skipped and {k for k, w in words.items() if w == "N/A"} == skipped
    assert words["gpu.health"] == words["collectives"] == words["health.delta"] == "PASS"


def result(check: str, status: str = "ok", needs=("gpu",), **meas) -> dict:
    return {"check": check, "status": status, "duration_s": 1.0, "message": "",
            "needs": list(needs),
            "measurements": [{"name": k.replace("_", "."), "value": v, "unit": "",
                              "labels": {}} for k, v in meas.items()]}


def test_check_verdict_rules():
    profile = load_profile("xe9680-h200")
    nouveau = result("kernel.nouveau")
    for loaded, word in ((False, "PASS"), (True, "FAIL")):
        nouveau["measurements"] = [{"name": "kernel.nouveau_loaded", "value": loaded,
                                    "unit": "", "labels": {}}]
        assert check_verdict(nouveau, profile) == word
    # a GPU count alone: the rest gpu.inventory measures (model, memory...) went missing
    assert check_verdict(result("gpu.inventory", gpu_count=8), profile) == "FAIL"
    # a required check that could not run fails; one that crashed or hung is ERROR
    assert check_verdict(result("gpu.inventory", "skipped"), profile) == "FAIL"
    assert check_verdict(result("gpu.inventory", "error"), profile) == "ERROR"
    assert check_verdict(result("gpu.inventory", "timeout"), profile) == "ERROR"
    # not required by this profile: not applicable, whatever its status
    nvl = load_profile("dl380a-gen12-h200nvl")
    assert check_verdict(result("fabric.state", "skipped", ("gpu", "nvswitch")), nvl) == "N/A"
    assert check_verdict(result("fabric.state", "error", ("gpu", "nvswitch")), nvl) == "N/A"
    # ran ok but measured nothing a limit applies to: not measured, a failure (never a pass)
    assert check_verdict(result("gpu.inventory", gpu_serial="1654"), profile) == "FAIL"
    # a result the controller cannot read
    assert check_verdict({"status": "ok"}, profile) == "ERROR"


def test_check_verdict_counts_a_missing_labelled_part_against_the_check():
    profile = with_site(scope(load_profile("xe9680-h200"), 3), {})
    links = [{"name": "nvlink.pair_links", "value": 18, "unit": "", "labels": {"pair": p}}
             for p in ("0-1", "0-2")]  # pair 1-2 never reported
    r = {"check": "nvlink.topology", "status": "ok", "duration_s": 1.0, "message": "",
         "needs": ["gpu", "nvlink", "multi-gpu"], "measurements": links}
    assert check_verdict(r, profile) == "FAIL"
    r["measurements"] = [*links, {**links[0], "labels": {"pair": "1-2"}}]
    assert check_verdict(r, profile) == "PASS"


class _StrictTty(io.TextIOWrapper):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_text_no_stream_can_write_never_breaks_the_board(encoding):
    """A lone surrogate (valid JSON, no UTF-8 form) or text the terminal's encoding lacks,
    from one node: the board redraws every node's line, and none of them raises."""
    stream = _StrictTty(io.BytesIO(), encoding=encoding, errors="strict", write_through=True)
    board = Board(["good", "bad"], stream=stream)
    board.event("bad", {"event": "check_started", "check": "gpu\ud800 ✓"})
    board.event("bad", {"event": "progress", "check": "x", "fraction": 0.5,
                        "label": "\udfff"})
    board.update("good", "fetching results")  # redraws the bad node's line too
    board.finish("bad", "INCOMPLETE", "reason \ud800")
    board.close()
    assert "fetching results" in stream.buffer.getvalue().decode(encoding)


# -- a rack's worth of nodes on a terminal -------------------------------------------------

def test_a_terminal_is_redrawn_at_most_every_redraw_interval(monkeypatch):
    """Each redraw writes every node's line: one per event made a 256-node run's board
    quadratic (about 1 ms per event, under the lock every session thread waits on)."""
    monkeypatch.setenv("NO_COLOR", "1")
    nodes = [f"gpu{i:03d}" for i in range(64)]
    buf = Tty()
    board = Board(nodes, stream=buf)
    for k in range(500):
        board.event(nodes[k % 64], {"event": "progress", "check": "gemm", "fraction": k / 500})
    board.finish("gpu007", "PASS")
    board.close()
    redraws = buf.getvalue().count("\x1b[64F") + 1  # the first draw moves no cursor
    assert redraws < 50, redraws
    last = buf.getvalue().rsplit("\x1b[64F", 1)[-1]
    assert "gpu007  PASS" in last and "gpu063  gemm" in last  # the end state is drawn


def test_a_change_soon_after_a_redraw_is_drawn_without_another(monkeypatch):
    """The last change before a quiet spell (a long check that just started) is drawn
    once the interval has passed, not only when the next event comes."""
    import time

    from rackready.steps import progress

    monkeypatch.setenv("NO_COLOR", "1")
    buf = Tty()
    board = Board(["n1"], stream=buf)
    board.update("n1", "first")
    board.update("n1", "a long check ...")  # within the interval: not yet drawn
    assert "a long check" not in buf.getvalue()
    deadline = time.monotonic() + 10 * progress.REDRAW_S + 2
    while "a long check" not in buf.getvalue() and time.monotonic() < deadline:
        time.sleep(progress.REDRAW_S / 5)
    assert "n1  a long check ..." in buf.getvalue()
