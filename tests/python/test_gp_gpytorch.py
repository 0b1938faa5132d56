"""GPyTorch's KeOps kernels (gpytorch.kernels.keops) run unchanged on tessel through
tessel.compat: the marginal likelihood, its gradient and the kernel's products equal GPyTorch's
own dense kernels'. In a process of its own, so that GPyTorch imports pykeops after install()."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("gpytorch", reason="scripts/python_env.sh installs GPyTorch 1.11")

SCRIPT = r"""
import json
import tessel.compat
tessel.compat.install()
import torch, gpytorch
import pykeops.torch
from gpytorch.kernels import keops

torch.manual_seed(0)
n = 1200  # above GPyTorch's max_cholesky_size (800): its KeOps kernels take the KeOps path
x = torch.rand(n, 3, dtype=torch.float64)
y = torch.sin(4 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(n, dtype=torch.float64)


class Model(gpytorch.models.ExactGP):
    def __init__(self, kernel):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean = gpytorch.means.ConstantMean()
        self.kernel = gpytorch.kernels.ScaleKernel(kernel)

    def forward(self, z):
        return gpytorch.distributions.MultivariateNormal(self.mean(z), self.kernel(z))


out = {"lazytensor": pykeops.torch.LazyTensor.__module__}
pairs = {"matern12": (keops.MaternKernel(nu=0.5, ard_num_dims=3), gpytorch.kernels.MaternKernel(nu=0.5, ard_num_dims=3)),
         "matern52": (keops.MaternKernel(nu=2.5, ard_num_dims=3), gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=3)),
         "rbf": (keops.RBFKernel(ard_num_dims=3), gpytorch.kernels.RBFKernel(ard_num_dims=3))}
v = torch.randn(n, 2, dtype=torch.float64)
for name, kernels in pairs.items():
    rows = []
    for kernel in kernels:
        with torch.no_grad():
            kernel.lengthscale = torch.tensor([[0.3, 0.6, 1.2]], dtype=torch.float64)
        m = Model(kernel).double()
        m.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(m.likelihood, m)
        torch.manual_seed(1)  # the same probe vectors for both
        value = mll(m(x), y)
        value.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(0):
            kv = m.kernel(x, x) @ v
        rows.append((float(value), grad.tolist(), kv))
    (va, ga, ka), (vb, gb, kb) = rows
    out[name] = dict(value=[va, vb], grad=[ga, gb], product=float((ka - kb).abs().max() / kb.abs().max()))
print(json.dumps(out))
"""


def test_gpytorch_keops_kernels_run_on_tessel_compat():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res.pop("lazytensor").startswith("tessel.compat")
    for name, r in res.items():
        # The kernel's product through tessel's LazyTensor against GPyTorch's dense matrix.
        assert r["product"] < 1e-12, (name, r["product"])
        # The same CG and Lanczos on the same probes (seeded): what differs is the products'
        # rounding, which CG's tolerance (GPyTorch's 1 in training) lets grow to about 1e-6.
        (va, vb), (ga, gb) = r["value"], r["grad"]
        assert abs(va - vb) <= 1e-5 * abs(vb), (name, va, vb)
        scale = max(abs(g) for g in gb)
        assert max(abs(a - b) for a, b in zip(ga, gb)) <= 1e-4 * scale, (name, ga, gb)


def test_a_tessel_kernel_in_a_gpytorch_model_equals_gpytorchs_own():
    # Above GPyTorch's preconditioning size (2000), where its preconditioner reads the kernel's
    # diagonal and rows: the marginal likelihood with the same probes, its gradient in every
    # parameter (raw, softplus in both) and the predictions.
    import gpytorch
    from tessel.gp import GPyTorchKernel, Matern, Scale

    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    n, ell = 2100, [0.3, 0.6, 1.2]
    x = torch.rand(n, 3, generator=g, dtype=torch.float64)
    y = torch.sin(4 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    xt = torch.rand(7, 3, generator=g, dtype=torch.float64)

    class Model(gpytorch.models.ExactGP):
        def __init__(self, kernel):
            super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
            self.mean, self.kernel = gpytorch.means.ConstantMean(), kernel

        def forward(self, z):
            return gpytorch.distributions.MultivariateNormal(self.mean(z), self.kernel(z))

    theirs = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=3))
    with torch.no_grad():
        theirs.base_kernel.lengthscale = torch.tensor([ell], dtype=torch.float64)
        theirs.outputscale = 1.3
    ours = GPyTorchKernel(Scale(Matern(2.5, lengthscale=ell), outputscale=1.3))
    out = []
    for kernel in (ours, theirs):
        model = Model(kernel).double()
        model.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        torch.manual_seed(1)
        value = mll(model(x), y)
        grads = torch.autograd.grad(value, list(model.parameters()))
        model.eval()
        with torch.no_grad():
            pred = model.likelihood(model(xt))
        out.append((float(value), torch.cat([t.reshape(-1) for t in grads]), pred.mean,
                    pred.variance))
    (va, ga, ma, sa), (vb, gb, mb, sb) = out
    assert abs(va - vb) <= 1e-6 * abs(vb), (va, vb)
    assert float((ga - gb).abs().max()) <= 1e-4 * float(gb.abs().max()), (ga, gb)
    assert float((ma - mb).abs().max()) <= 1e-7 and float((sa - sb).abs().max()) <= 1e-7
    with pytest.raises(TypeError, match="kernel must be a tessel.gp kernel"):
        GPyTorchKernel(theirs)


def test_wide_products_go_in_blocks_of_one_width(tmp_path, monkeypatch):
    # GPyTorch's dense path multiplies by the identity (n columns): blocks of one width, the last
    # padded, give K V and its gradients for every width, from one product kernel for every n.
    import glob

    from tessel.gp import GPyTorchKernel, Matern, Scale

    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(3)
    kernel = GPyTorchKernel(Scale(Matern(2.5, lengthscale=[0.4, 0.9]), outputscale=1.7))
    kernel.double()
    compiled = []
    for n in (40, 45):
        for width in (70, 64, 5):
            x = torch.rand(n, 2, generator=g, dtype=torch.float64, requires_grad=True)
            v = torch.randn(n, width, generator=g, dtype=torch.float64, requires_grad=True)
            w = torch.randn(n, width, generator=g, dtype=torch.float64)
            got = kernel(x, x) @ v
            want = kernel.kernel.dense(x, x) @ v
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            params = [x, v] + list(kernel.parameters())
            ga = torch.autograd.grad((got * w).sum(), params)
            gb = torch.autograd.grad((want * w).sum(), params)
            for a, b in zip(ga, gb):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        dense = kernel(x, x).to_dense()
        torch.testing.assert_close(dense, kernel.kernel.dense(x, x), rtol=1e-12, atol=1e-12)
        compiled.append(len(glob.glob(str(tmp_path / "kernels" / "*" / "*.so"))))
    # Another n, the same widths: no kernel compiled again (each width did before).
    assert compiled[0] > 0 and compiled[1] == compiled[0], compiled
