"""SnapshotLevels: snapshots spread over device memory, host RAM and disk with small budgets; the
gradients still equal unrolled autograd, files really land on disk and are removed."""
import gc
import pathlib

import pytest
import torch

from tessel.loops.checkpoint import checkpoint_loop
from tessel.loops.online_checkpoint import checkpoint_while
from tessel.loops.snapshot_levels import LevelStore
from tessel.torch import SnapshotLevels

TOL = 1e-10
D = torch.float64


def close(got, ref):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)


def files(root):
    return sorted(pathlib.Path(root).glob("*/*"))


def problem(seed=0):
    """A two-tensor state of 80 float64 values (640 bytes) and a closure parameter."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, generator=g, dtype=D, requires_grad=True)
    u0 = torch.randn(64, generator=g, dtype=D, requires_grad=True)
    v0 = torch.randn(16, generator=g, dtype=D)

    def step(state, k):
        u, v = state
        u = torch.tanh(u * 0.9 + 0.1 * w) + 0.01 * v.sum()
        return u, 0.95 * v + 0.05 * u[:16]

    return w, (u0, v0), step


def unrolled(step, state, n):
    for k in range(n):
        state = step(state, k)
    return state


STATE = 640


@pytest.mark.parametrize("n, s", [(40, 6), (200, 6), (7, 6)])
def test_checkpoint_loop_three_levels(tmp_path, n, s):
    w, state, step = problem()
    seen = []

    def counting(st, k):
        seen.append(len(files(tmp_path)))
        return step(st, k)

    levels = SnapshotLevels(device_bytes=2 * STATE, host_bytes=2 * STATE + 100, disk_bytes=None,
                            disk_dir=tmp_path)
    stats = {}
    u, v = checkpoint_loop(counting, state, n, s, stats=stats, storage=levels)
    assert len(files(tmp_path)) >= 1  # held on disk between forward and backward
    got = torch.autograd.grad(u.sum() + (v ** 2).sum(), [w, state[0]])
    ru, rv = unrolled(step, state, n)
    close(got, torch.autograd.grad(ru.sum() + (rv ** 2).sum(), [w, state[0]]))
    st = stats["storage"]
    assert st["state_bytes"] == STATE
    assert [st[lv]["capacity"] for lv in ("device", "host", "disk")] == [2, 2, s]
    for lv in ("device", "host", "disk"):
        assert st[lv]["puts"] >= 1 and st[lv]["max_held"] <= st[lv]["capacity"]
    assert st["device"]["max_held"] == 2 and st["host"]["max_held"] == 2
    assert max(seen) == st["disk"]["max_held"] == min(n, s) - 4
    # Revolve's slots are a stack whose top is read most: the fastest level gets the most reads
    assert st["device"]["gets"] >= st["host"]["gets"] >= st["disk"]["gets"]
    assert st["moves"] == 0  # the plan came before the first snapshot
    assert list(tmp_path.iterdir()) == []  # the directory went with the backward


@pytest.mark.parametrize("s", [3, 5])
def test_checkpoint_while_three_levels(tmp_path, s):
    w, state, step = problem(1)
    seen = []

    def counting(st, k):
        seen.append(len(files(tmp_path)))
        return step(st, k)

    levels = SnapshotLevels(device_bytes=STATE, host_bytes=STATE, disk_bytes=(s - 2) * STATE,
                            disk_dir=tmp_path)
    stats = {}
    u, v = checkpoint_while(lambda st, k: k < 57, counting, state, s, stats=stats,
                            storage=levels)
    assert len(files(tmp_path)) >= 1
    got = torch.autograd.grad(u.pow(2).sum() + v.sum(), [w, state[0]])
    ru, rv = unrolled(step, state, 57)
    close(got, torch.autograd.grad(ru.pow(2).sum() + rv.sum(), [w, state[0]]))
    st = stats["storage"]
    assert stats["n_steps"] == 57
    assert 1 <= max(seen) <= s - 2
    for lv in ("device", "host", "disk"):
        assert st[lv]["puts"] >= 1 and st[lv]["gets"] >= 1
        assert st[lv]["max_held"] <= st[lv]["capacity"]
    assert list(tmp_path.iterdir()) == []


def test_level_store_plan_swaps_full_levels(tmp_path):
    levels = SnapshotLevels(device_bytes=8, host_bytes=8, disk_bytes=8, disk_dir=tmp_path)
    stats = {}
    store = levels.open("test", (torch.zeros(1, dtype=D),), 3, stats)
    assert isinstance(store, LevelStore)
    for slot in range(3):
        store.put(slot, (torch.full((1,), float(slot), dtype=D),))
    # unplanned: x_0 (slot 0) to the slowest level, the others to the fastest with room
    assert [store._slots[s][0] for s in range(3)] == ["disk", "device", "host"]
    store.plan({0: 1, 1: 5, 2: 9})  # every level full: slots 1 and 2 swap
    assert [store._slots[s][0] for s in range(3)] == ["disk", "host", "device"]
    assert [float(store.get(s)[0]) for s in range(3)] == [0.0, 1.0, 2.0]
    assert stats["storage"]["moves"] == 2 and len(files(tmp_path)) == 1
    store.put(2, (torch.ones(1, dtype=D),))  # planned slot, its level's room reused
    assert store._slots[2][0] == "device" and len(store) == 3
    store.drop(0)
    assert len(files(tmp_path)) == 0
    store.clear()
    assert list(tmp_path.iterdir()) == []


def test_directory_removed_when_collected(tmp_path):
    w, state, step = problem()
    levels = SnapshotLevels(device_bytes=0, host_bytes=0, disk_bytes=None, disk_dir=tmp_path)
    u, v = checkpoint_loop(step, state, 30, 4, storage=levels)
    assert len(files(tmp_path)) == 4  # every snapshot on disk, no backward yet
    del u, v
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_no_grad_and_reused_levels(tmp_path):
    w, state, step = problem()
    levels = SnapshotLevels(device_bytes=STATE, host_bytes=0, disk_bytes=None, disk_dir=tmp_path)
    with torch.no_grad():
        u, _ = checkpoint_loop(step, state, 10, 3, storage=levels)
    close([u], [unrolled(step, state, 10)[0].detach()])
    for _ in range(2):  # one SnapshotLevels, two loops, each its own directory
        u, _ = checkpoint_while(lambda st, k: k < 12, step, state, 3, storage=levels)
        close(torch.autograd.grad(u.sum(), [w]),
              torch.autograd.grad(unrolled(step, state, 12)[0].sum(), [w]))
    assert list(tmp_path.iterdir()) == []


def test_errors(tmp_path):
    w, state, step = problem()
    with pytest.raises(ValueError, match=r"checkpoint_loop: one state takes 640 bytes, more than "
                                         r"the host level's budget of 600 bytes"):
        checkpoint_loop(step, state, 5, 2, storage=SnapshotLevels(None, host_bytes=600))
    with pytest.raises(ValueError, match=r"checkpoint_while: the storage budgets hold 3 states of "
                                         r"640 bytes \(device 1 .*\), fewer than snapshots=5"):
        checkpoint_while(lambda st, k: k < 3, step, state, 5,
                         storage=SnapshotLevels(700, host_bytes=1300, disk_bytes=0))
    with pytest.raises(TypeError, match="checkpoint_loop: storage must be None or a "
                                        "tessel.torch.SnapshotLevels"):
        checkpoint_loop(step, state, 5, 2, storage={"device_bytes": 1})
    with pytest.raises(ValueError, match="SnapshotLevels: host_bytes must be None"):
        SnapshotLevels(host_bytes=-1)
    with pytest.raises(ValueError, match="SnapshotLevels: device_bytes must be None"):
        SnapshotLevels(device_bytes=1.5)
    with pytest.raises(ValueError, match="SnapshotLevels: disk_dir must be None or an existing"):
        SnapshotLevels(disk_dir=tmp_path / "missing")
