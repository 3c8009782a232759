"""The simulated sysroot is re-rendered in place: a file that still belongs never goes away,
so a node-side writer that takes no lock (the RoCE role's `echo 1 > .../ecn/...`) is not
lost to a render running at the same moment; what the state no longer has is removed."""

from __future__ import annotations

from pathlib import Path

from rackready_lab.hwsim.faults import apply_fault, heal
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import ROOT_REL, locked_node_state, write_node_state


def _ecn(node: Path, netdev: str, point: str = "roce_np", prio: int = 3) -> Path:
    return node / ROOT_REL / "sys/class/net" / netdev / "ecn" / point / "enable" / str(prio)


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for top in ("proc", "sys"):
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(root))] = path.read_bytes().hex()
            elif path.is_symlink():
                out[str(path.relative_to(root))] = "->" + str(path.readlink())
    return out


def _roce_node(tmp_path: Path) -> tuple[Path, dict, str]:
    state = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    write_node_state(state, tmp_path)
    netdev = next(n["netdev"] for n in state["nics"]
                  if n["role"] == "compute" and n["link_layer"] == "Ethernet")
    return tmp_path, state, netdev


def test_a_re_render_rewrites_no_file_whose_text_stays(tmp_path):
    node, state, netdev = _roce_node(tmp_path)
    f = _ecn(node, netdev)
    inode = f.stat().st_ino
    with locked_node_state(node):
        pass
    assert f.stat().st_ino == inode  # the same file: never removed and written again


def test_a_write_racing_a_render_is_kept_and_then_read_into_the_state(tmp_path):
    node, state, netdev = _roce_node(tmp_path)
    name = next(n["name"] for n in state["nics"] if n["netdev"] == netdev)
    with locked_node_state(node) as s:  # as on a node not yet set up: ECN off
        for key in ("ecn", "ecn_rp"):
            s["nic_config"][name]["qos"][key][3] = 0
    f = _ecn(node, netdev)
    assert f.read_text() == "0\n"
    with locked_node_state(node):
        # the node's echo lands after the state was read, before the render
        f.write_text("1\n")
    assert f.read_text() == "1\n"
    with locked_node_state(node) as later:
        assert later["nic_config"][name]["qos"]["ecn"][3] == 1


def test_a_change_the_state_makes_still_reaches_the_file(tmp_path):
    # the ecn-off fault clears the enables a healthy node's role set; heal puts them back
    node, state, netdev = _roce_node(tmp_path)
    for point in ("roce_np", "roce_rp"):
        _ecn(node, netdev, point).write_text("1\n")
    with locked_node_state(node) as s:
        faulty = apply_fault(s, "ecn-off")
        s.clear()
        s.update(faulty)
    assert [_ecn(node, netdev, p).read_text() for p in ("roce_np", "roce_rp")] == ["0\n"] * 2
    with locked_node_state(node) as s:
        healed = heal(s)
        s.clear()
        s.update(healed)
    assert [_ecn(node, netdev, p).read_text() for p in ("roce_np", "roce_rp")] == ["1\n"] * 2


def test_what_the_state_no_longer_has_is_removed_and_the_tree_matches_a_fresh_one(tmp_path):
    node, state, _ = _roce_node(tmp_path / "node")
    missing = apply_fault(state, "gpu-missing", "5")
    bdf = state["gpus"][5]["bdf"]
    gpu_dir = node / ROOT_REL / "sys/bus/pci/devices" / bdf
    assert gpu_dir.is_dir()
    write_node_state(missing, node)
    assert not gpu_dir.exists()
    write_node_state(missing, tmp_path / "fresh")
    assert _tree(node / ROOT_REL) == _tree(tmp_path / "fresh" / ROOT_REL)


def test_a_render_reading_an_echo_midway_keeps_what_the_echo_writes(tmp_path, monkeypatch):
    # `echo 1 > f` truncates f and then writes it: a read in between finds it empty
    node, state, netdev = _roce_node(tmp_path)
    name = next(n["name"] for n in state["nics"] if n["netdev"] == netdev)
    with locked_node_state(node) as s:
        s["nic_config"][name]["qos"]["ecn"][3] = 0
    f = _ecn(node, netdev)
    assert f.read_text() == "0\n"
    real_read = Path.read_text
    midway = []

    def read_text(self, *args, **kwargs):
        if self == f and not midway:
            midway.append(self)
            real_read(self)
            self.write_text("")  # truncated: this read lands here ...
            text = real_read(self)
            self.write_text("1\n")  # ... and the echo's write follows
            return text
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    with locked_node_state(node):
        pass
    monkeypatch.undo()
    assert midway and f.read_text() == "1\n"
    with locked_node_state(node) as later:
        assert later["nic_config"][name]["qos"]["ecn"][3] == 1
