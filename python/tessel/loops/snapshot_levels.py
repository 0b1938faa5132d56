"""Snapshots in several levels of storage: device memory, then host RAM, then disk, each with a
budget, for checkpointed loops whose states are large (3-D images, fine meshes).

`SnapshotLevels(device_bytes=..., host_bytes=..., disk_bytes=..., disk_dir=None)` is given as
`storage=` to tessel.torch.checkpoint_loop or checkpoint_while; each loop then keeps its snapshots
through a `LevelStore` (the put/get/drop/clear interface of tessel.loops.checkpoint.SnapshotStore).

Which snapshot goes where. In a binomial (Revolve) schedule the slots are used as a stack, and
the slots at its top (the states nearest the steps being reversed) are written and read far more
often than those at its bottom: for n = 1000 steps and 8 slots, slot 0 (x_0) is written once and
read 4 times, slot 7 written 258 times and read 400 times. Stumm & Walther ("MultiStage
approaches for optimal offline checkpointing", SIAM J. Sci. Comput. 31(3), 2009) distribute a
schedule's checkpoints over a fast and a slow level; for equal read and write costs their
distribution amounts to giving the fast level the slots with the most accesses. That is what
`LevelStore.plan` does: the driver counts each slot's snapshot and restore actions in the
schedule, and the slots, ranked by that count, fill the device level first, then host RAM, then
disk, each up to its budget in states. The assignment is per slot and fixed, so no level ever
holds more than its budget and no snapshot moves during the reversal.

Not implemented from that paper: schedules that move the checkpoints themselves when a disk
access costs as much as several steps (trading a few more recomputations for fewer disk writes),
and weighing reads against writes with measured level speeds; the schedule stays the one-level
optimum in step evaluations. For checkpoint_while the schedule is unknown until the loop stops:
during the forward sweep x_0 goes to the slowest level with room and every later snapshot to the
fastest with room; once n is known, the reversal schedule's plan is applied by moving the held
snapshots (swapping pairs when both levels are full), counted in stats.
"""
import os
import shutil
import tempfile
import weakref

import torch

__all__ = ["SnapshotLevels", "LevelStore"]

LEVELS = ("device", "host", "disk")


def _budget(name, value):
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"SnapshotLevels: {name} must be None (no limit) or an integer number "
                         f"of bytes >= 0, got {value!r}")
    return value


class SnapshotLevels:
    """Budgets, in bytes, for a checkpointed loop's snapshots in three levels of storage.

    Parameters
    ----------
    device_bytes
        the states' own device (GPU memory for CUDA tensors), stored as they are.
    host_bytes
        host RAM: tensors copied to the CPU (into pinned memory for CUDA tensors, so that copies
        back are fast); CPU tensors are kept as they are.
    disk_bytes
        files written with torch.save into a temporary directory made with tempfile (inside
        `disk_dir`, or the system's temporary directory when None), removed when the loop's
        backward is done, or when its store is garbage-collected.
    disk_dir
        the folder for those temporary directories (None: the system's temporary folder).

    Raises
    ------
    ValueError
        A budget that is neither None nor an integer >= 0, or ``disk_dir`` that is not a folder.

    Notes
    -----
    Each budget is an integer >= 0 or None (no limit), for the snapshots only (the loop's current
    state and the graph of the step being reversed live on the device besides them). A level
    holds floor(budget / state bytes) states; together they must hold `snapshots` states,
    checked when the loop starts. The slots that the schedule restores most often go to the
    fastest level (see the module's comment), and the loop's stats dict gets `storage`: per
    level its capacity in states, puts, gets and the most states held at once, and the moves
    between levels.

    One SnapshotLevels may serve many loops: each loop gets its own store and directory.

    Examples
    --------
    >>> import torch
    >>> from tessel.loops import SnapshotLevels, checkpoint_loop
    >>> w = torch.tensor(0.5, requires_grad=True)
    >>> levels = SnapshotLevels(device_bytes=2 * 4 * 10, host_bytes=None)  # 2 states on device
    >>> stats = {}
    >>> x = checkpoint_loop(lambda x, k: torch.tanh(w * x) + 1, torch.ones(10), 40, snapshots=4,
    ...                     storage=levels, stats=stats)
    >>> x.sum().backward()
    >>> stats["storage"]["device"]["capacity"], stats["storage"]["device"]["max_held"]
    (2, 2)
    """

    def __init__(self, device_bytes=None, host_bytes=0, disk_bytes=0, disk_dir=None):
        self.budgets = {"device": _budget("device_bytes", device_bytes),
                        "host": _budget("host_bytes", host_bytes),
                        "disk": _budget("disk_bytes", disk_bytes)}
        if disk_dir is not None:
            if not isinstance(disk_dir, (str, os.PathLike)) or not os.path.isdir(disk_dir):
                raise ValueError(f"SnapshotLevels: disk_dir must be None or an existing "
                                 f"directory, got {disk_dir!r}")
            disk_dir = os.fspath(disk_dir)
        self.disk_dir = disk_dir

    def __repr__(self):
        b = self.budgets
        return (f"SnapshotLevels(device_bytes={b['device']}, host_bytes={b['host']}, "
                f"disk_bytes={b['disk']}, disk_dir={self.disk_dir!r})")

    def open(self, name, states, snapshots, stats):
        """A store for one loop whose states are `states`, keeping up to `snapshots` of them."""
        return LevelStore(self, name, states, snapshots, stats)


def check_storage(name, storage):
    """storage= of a checkpointed loop: None (every snapshot on the device) or SnapshotLevels."""
    if storage is not None and not isinstance(storage, SnapshotLevels):
        raise TypeError(f"{name}: storage must be None or a tessel.torch.SnapshotLevels, got "
                        f"{type(storage).__name__}")
    return storage


def _remove_dir(path):
    shutil.rmtree(path, ignore_errors=True)


class LevelStore:
    """One loop's snapshots spread over the levels of a SnapshotLevels, by slot."""

    def __init__(self, levels, name, states, snapshots, stats):
        self.name = name
        self.spec = [(s.dtype, s.device) for s in states]
        self.state_bytes = sum(s.numel() * s.element_size() for s in states)
        self.capacity = {}
        for level in LEVELS:
            budget = levels.budgets[level]
            if budget is None or self.state_bytes == 0:
                self.capacity[level] = snapshots  # more is never used
                continue
            if 0 < budget < self.state_bytes:
                raise ValueError(
                    f"{name}: one state takes {self.state_bytes} bytes, more than the {level} "
                    f"level's budget of {budget} bytes ({level}_bytes of SnapshotLevels): that "
                    "level could hold no snapshot; raise its budget or set it to 0")
            self.capacity[level] = min(budget // self.state_bytes, snapshots)
        total = sum(self.capacity.values())
        if total < snapshots:
            held = ", ".join(f"{lv} {self.capacity[lv]} ({levels.budgets[lv]} bytes)"
                             for lv in LEVELS)
            raise ValueError(
                f"{name}: the storage budgets hold {total} states of {self.state_bytes} bytes "
                f"({held}), fewer than snapshots={snapshots}; raise a budget or lower snapshots")
        self.disk_parent = levels.disk_dir
        self.disk_path = None  # made at the first write to disk
        self._finalizer = None
        self._slots = {}  # slot -> (level, data): data the states, or a file path on disk
        self._want = {}  # slot -> level, from plan()
        self.counts = {lv: dict(capacity=self.capacity[lv], puts=0, gets=0, max_held=0)
                       for lv in LEVELS}
        self.counts["moves"] = 0
        self.counts["state_bytes"] = self.state_bytes
        stats["storage"] = self.counts

    # -- the SnapshotStore interface ---------------------------------------------------------
    def put(self, slot, states):
        self.drop(slot)
        level = self._want.get(slot)
        if level is None or self._held(level) >= self.capacity[level]:
            # Unplanned (checkpoint_while's forward sweep): slot 0 holds x_0 in both drivers'
            # schedules, written once and the least read of all, so it takes the slowest level
            # with room; the others, recent states the reversal reads first, the fastest.
            order = LEVELS[::-1] if slot == 0 else LEVELS
            level = next((lv for lv in order if self._held(lv) < self.capacity[lv]), None)
            if level is None:
                raise RuntimeError(f"{self.name}: no storage level has room for slot {slot} "
                                   f"({len(self._slots)} snapshots held)")
        self._write(slot, level, states)

    def get(self, slot):
        level, data = self._slots[slot]
        return self._read(level, data)

    def drop(self, slot):
        entry = self._slots.pop(slot, None)
        if entry is not None and entry[0] == "disk":
            os.remove(entry[1])

    def clear(self):
        self._slots.clear()
        if self._finalizer is not None:
            self._finalizer()  # removes the directory and every file in it
            self._finalizer = None
            self.disk_path = None

    def __len__(self):
        return len(self._slots)

    # -- placement --------------------------------------------------------------------------
    def plan(self, weights):
        """Fixes each slot's level from `weights` (slot -> accesses in the schedule to come): the
        most accessed fill the device level, then host, then disk. Held snapshots planned
        elsewhere than where they are move now."""
        slots = set(weights) | set(self._slots)
        ranked = sorted(slots, key=lambda s: (-weights.get(s, 0), -s))
        self._want = {}
        it = iter(ranked)
        for level in LEVELS:
            for _, slot in zip(range(self.capacity[level]), it):
                self._want[slot] = level
        self._rebalance()

    def _rebalance(self):
        while True:
            wrong = [s for s, (lv, _) in self._slots.items() if self._want[s] != lv]
            if not wrong:
                return
            progress = False
            for s in wrong:
                target = self._want[s]
                if self._held(target) < self.capacity[target]:
                    level, data = self._slots.pop(s)
                    self._move(s, level, data, target)
                    progress = True
            if progress:
                continue
            # Every target is full: the plan gives a level no more slots than it holds, so the
            # first misplaced snapshot's target holds one planned elsewhere; they swap.
            s = wrong[0]
            target = self._want[s]
            o = next(o for o, (lv, _) in self._slots.items()
                     if lv == target and self._want[o] != target)
            (ls, ds), (lo, do) = self._slots.pop(s), self._slots.pop(o)
            self._move(s, ls, ds, target)
            self._move(o, lo, do, ls)

    def _move(self, slot, level, data, target):
        states = self._read(level, data)
        if level == "disk":
            os.remove(data)
        self._write(slot, target, states)
        self.counts["moves"] += 1

    def _held(self, level):
        return sum(1 for lv, _ in self._slots.values() if lv == level)

    # -- the levels themselves --------------------------------------------------------------
    def _write(self, slot, level, states):
        if level == "device":
            data = states
        elif level == "host":
            data = tuple(_to_host(t) for t in states)
        else:
            data = os.path.join(self._dir(), f"slot{slot}.pt")
            torch.save(tuple(t.detach().cpu() for t in states), data)
        self._slots[slot] = (level, data)
        c = self.counts[level]
        c["puts"] += 1
        c["max_held"] = max(c["max_held"], self._held(level))

    def _read(self, level, data):
        self.counts[level]["gets"] += 1
        if level == "device":
            return data
        if level == "disk":
            data = torch.load(data)
        return tuple(t.to(device, non_blocking=True) if t.device != device else t
                     for t, (_, device) in zip(data, self.spec))

    def _dir(self):
        if self.disk_path is None:
            self.disk_path = tempfile.mkdtemp(prefix="tessel-snapshots-", dir=self.disk_parent)
            self._finalizer = weakref.finalize(self, _remove_dir, self.disk_path)
        return self.disk_path


def _to_host(t):
    if t.device.type == "cpu":
        return t
    # A blocking copy: the host copy may be saved to disk (read by the CPU) right after.
    host = torch.empty(t.shape, dtype=t.dtype, device="cpu",
                       pin_memory=torch.cuda.is_available())
    return host.copy_(t)
