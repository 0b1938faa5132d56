"""What every tessel.gp regression model holds: its training points and targets (buffers that
follow the model's device), the kernel, the Gaussian noise (learned, fixed, or known per point) and
a zero or constant mean, with the checks that name bad input."""
import math

import numpy as np
import torch

from .kernels import Kernel, _inv_softplus

__all__ = ["GPData"]


def _as_tensor(value):
    """A tensor as it is; anything else through numpy, so that a list of Python floats is
    float64 (torch.as_tensor would make it float32)."""
    return value if torch.is_tensor(value) else torch.as_tensor(np.asarray(value))


class GPData(torch.nn.Module):
    """The data, kernel, noise and mean of a GP regression model (see ExactGP's parameters)."""

    _empty_ok = False  # no points: refused, except on a shard of a model spread over processes

    def __init__(self, x, y, kernel, noise, mean, fixed_noise, noise_min, who):
        super().__init__()
        x, y = _as_tensor(x), _as_tensor(y)
        for name, t in (("x", x), ("y", y)):
            if t.dtype in (torch.float16, torch.bfloat16):
                raise TypeError(f"{who}: {name} has dtype {t.dtype}; expected float32 or float64 "
                                "(half precision is too coarse for a GP's linear algebra)")
            if not t.is_floating_point():
                raise TypeError(f"{who}: {name} has dtype {t.dtype}; expected float32 or float64")
        if y.device != x.device:
            raise ValueError(f"{who}: x is on {x.device} and y on {y.device}; expected one device")
        if x.dim() != 2 or (x.shape[0] == 0 and not self._empty_ok):
            raise ValueError(f"{who}: x must be (n, d) with n >= 1, got shape {tuple(x.shape)}")
        if y.dim() != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"{who}: y must be ({x.shape[0]},) like x's rows, got shape "
                             f"{tuple(y.shape)}")
        if not bool(torch.isfinite(y).all()):
            raise ValueError(f"{who}: y holds a NaN or an infinity")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{who}: x holds a NaN or an infinity")
        if not isinstance(kernel, Kernel):
            raise TypeError(f"{who}: kernel must be a tessel.gp kernel, got "
                            f"{type(kernel).__name__}")
        if mean not in ("constant", "zero"):
            raise ValueError(f"{who}: mean must be 'constant' or 'zero', got {mean!r}")
        # Buffers, so that .to(device) moves them with the parameters; not in the state_dict,
        # which thus loads into a model of other points (another shard, all of them).
        self.register_buffer("x", x.detach(), persistent=False)
        self.register_buffer("y", y.detach().to(torch.float64), persistent=False)
        self.kernel = kernel
        self.mean_constant = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64)) \
            if mean == "constant" else None
        n = x.shape[0]
        noise_t = torch.as_tensor(noise, dtype=torch.float64).detach()
        if noise_t.dim() > 1 or (noise_t.dim() == 1 and noise_t.numel() not in (1, n)):
            raise ValueError(f"{who}: noise must be a number or ({n},) per-point variances, got "
                             f"shape {tuple(noise_t.shape)}")
        per_point = noise_t.dim() == 1 and noise_t.numel() == n and n > 1
        if fixed_noise is None:
            fixed_noise = per_point
        if per_point and not fixed_noise:
            raise ValueError(f"{who}: per-point noise is known, not learned (one variance per "
                             "point is not identifiable): leave fixed_noise at None or True, or "
                             "give one number to learn")
        if fixed_noise:
            values = noise_t.reshape(-1).clone()
            if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
                raise ValueError(f"{who}: noise must be finite and >= 0, got "
                                 f"{values[:8].tolist()}")
            self.register_buffer("_fixed_noise", values)
            self.raw_noise = None
        else:
            floor = float(noise_min)
            if not (math.isfinite(floor) and floor >= 0):
                raise ValueError(f"{who}: noise_min must be finite and >= 0, got {noise_min!r}")
            if not float(noise_t.reshape(())) > floor:
                raise ValueError(f"{who}: noise must be finite and > noise_min = {floor:g} (a "
                                 "learned noise starts above its floor), got "
                                 f"{float(noise_t.reshape(())):g}")
            self.noise_min = floor
            self.raw_noise = torch.nn.Parameter(_inv_softplus(noise_t.reshape(()) - floor, who,
                                                              "noise").reshape(1))
        if x.device.type != "cpu":  # the model lives where its points do (GPyTorch's .cuda())
            self.to(x.device)

    @property
    def n_data(self):
        """The number of training points."""
        return self.x.shape[0]

    @property
    def noise(self):
        """The noise variance: noise_min + softplus(raw_noise), or the fixed value."""
        if self.raw_noise is None:
            return self._fixed_noise
        return self.noise_min + torch.nn.functional.softplus(self.raw_noise)

    def _mean(self):
        if self.mean_constant is None:
            return torch.zeros(1, dtype=torch.float64, device=self.y.device)
        return self.mean_constant

    def _test_points(self, x_test, who):
        xt = _as_tensor(x_test)
        if not xt.is_floating_point() or xt.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(f"{who}: x_test has dtype {xt.dtype}; expected float32 or float64")
        if xt.dim() != 2 or xt.shape[1] != self.x.shape[1]:
            raise ValueError(f"{who}: x_test must be (m, {self.x.shape[1]}), got shape "
                             f"{tuple(xt.shape)}")
        if not bool(torch.isfinite(xt).all()):
            raise ValueError(f"{who}: x_test holds a NaN or an infinity")
        return xt.to(self.x.device)
