"""
Kernel Hamiltonian of shape analysis and its gradient
=====================================================

Kernel Hamiltonian H(q, p) = 1/2 <p, K_q p> of shape analysis and its gradient, N = 50,000 in 3-D.


K_q is the Gaussian kernel matrix of the points q (50,000 x 50,000: 10 GB in float32, more than
that for autograd's saved intermediates); tessel never forms it. The figure sets both gradients,
dH/dp and dH/dq, against their dense float64 formulas on a few hundred rows.
Run: PYTHONPATH=build/python python3 examples/python/hamiltonian.py [N]
"""
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.torch import Genred

# sum_j exp(-g |q_i - q_j|^2) <p_i, p_j>: the integrand of H, reduced over j.
_KERNEL = Genred("Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj)",
                 ["Qi = Vi(3)", "Qj = Vj(3)", "Pi = Vi(3)", "Pj = Vj(3)", "G = Pm(1)"])


def hamiltonian(q, p, sigma=0.1):
    g = torch.tensor([1.0 / sigma**2], dtype=q.dtype)
    return 0.5 * _KERNEL(q, q, p, p, g).sum()


def main(n=5_000):
    torch.manual_seed(0)
    q = torch.rand(n, 3, requires_grad=True)
    p = torch.randn(n, 3, requires_grad=True) / n**0.5
    t0 = time.perf_counter()
    h = hamiltonian(q, p)
    dq, dp = torch.autograd.grad(h, [q, p])
    elapsed = time.perf_counter() - t0
    print(f"N = {n}: H = {h.item():.6g}, value + gradients in {elapsed:.2f} s")
    # dH/dp = K_q p: check one row against the dense formula.
    with torch.no_grad():
        k0 = torch.exp(-((q[0] - q) ** 2).sum(-1) / 0.01)
        ref = k0 @ p
    err = ((dp[0] - ref).abs().max() / ref.abs().max()).item()
    print(f"dH/dp row 0 against dense torch: relative error {err:.1e}")
    assert err < 1e-4
    return q.detach(), p.detach(), dq, dp


def dense_gradients(q, p, rows, sigma=0.1):
    """dH/dp = K_q p and dH/dq_i = -2/sigma^2 sum_j k_ij <p_i, p_j> (q_i - q_j) on `rows`, in
    dense float64 (H counts each pair twice, which cancels the 1/2)."""
    q, p = q.double(), p.double()
    diff = q[rows, None, :] - q[None]
    k = torch.exp(-(diff**2).sum(-1) / sigma**2)
    dp = k @ p
    dq = -2 / sigma**2 * ((k * (p[rows] @ p.T))[..., None] * diff).sum(1)
    return dq, dp


def plot(q, p, dq, dp, shown=300):
    """tessel's gradients against the dense formulas, component by component, on `shown` rows."""
    rows = torch.linspace(0, len(q) - 1, shown).long()
    ref_q, ref_p = dense_gradients(q, p, rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, got, ref, name in ((axes[0], dp, ref_p, "dH/dp = K_q p"),
                               (axes[1], dq, ref_q, "dH/dq")):
        for c, label in enumerate("xyz"):
            ax.plot(ref[:, c], got[rows, c], ".", ms=3, label=f"{label} component")
        lim = float(ref.abs().max())
        err = float((got[rows].double() - ref).abs().max()) / lim
        ax.plot([-lim, lim], [-lim, lim], "k-", lw=0.6, label="equality")
        ax.set_xlabel("dense float64 formula")
        ax.set_ylabel("tessel (float32, autograd)")
        ax.set_title(f"{name}, {shown} of {len(q):,} rows\n"
                     f"largest error {err:.0e} of the largest entry")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    plot(*main(int(sys.argv[1]) if len(sys.argv) > 1 else 5_000))
    plt.show()
