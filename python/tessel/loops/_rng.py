"""Random-number states for recomputation: a function run again in backward (a checkpointed step,
a reversible block's branch) draws the numbers it drew in forward, as torch.utils.checkpoint's
preserve_rng_state does, without disturbing the caller's random stream."""
import torch


class RngStates:
    """Captures and restores the CPU generator and those of the CUDA devices of `tensors` (the
    devices torch.utils.checkpoint forks too). Disabled, every capture is None and fork() is a
    no-op."""

    def __init__(self, enabled, tensors):
        self.enabled = bool(enabled)
        self.devices = sorted({t.device.index for t in tensors if t.is_cuda}) if enabled else []

    def get(self):
        if not self.enabled:
            return None
        return torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in self.devices]

    def set(self, state):
        if state is None:
            return
        torch.set_rng_state(state[0])
        for d, s in zip(self.devices, state[1]):
            torch.cuda.set_rng_state(s, d)

    def fork(self):
        """A context that puts the generators back as they were when it exits."""
        return torch.random.fork_rng(devices=self.devices, enabled=self.enabled)

    @staticmethod
    def same(a, b):
        """Whether two captures are the same state (None: not captured, taken as the same)."""
        return a is None or b is None or (
            torch.equal(a[0], b[0]) and all(torch.equal(x, y) for x, y in zip(a[1], b[1])))
