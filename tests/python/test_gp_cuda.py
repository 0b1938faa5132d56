"""tessel.gp.ExactGP on CUDA tensors: the model moves to its points' device, the BBMM likelihood
and its gradient run in PyTorch with tessel.torch reductions on the device (the core's GP
functions take host arrays), predictions too; against the same model on the host. The same
PyTorch BBMM is checked on the host first (it also serves tessel.distributed.ExactGP): with a
full-rank preconditioner its value is the exact one. CUDA tests run on a GPU, or on the stand-in
driver's fake CUDA tensors in the test command."""
import pytest
import torch

from tessel.gp import ExactGP, Matern, Scale
from tessel.gp import _torch_bbmm

N, D = 48, 2

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _model(device="cpu"):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(4 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    kernel = Scale(Matern(nu=2.5, lengthscale=[0.4, 0.6]), outputscale=1.2)
    return ExactGP(x.to(device), y.to(device), kernel, noise=0.05)


def test_the_pytorch_bbmm_is_exact_with_a_full_rank_preconditioner():
    gp = _model()
    exact = float(gp.log_marginal_likelihood(mode="exact"))
    stats = {}
    got = _torch_bbmm.log_marginal_likelihood(gp, _torch_bbmm.Rows(gp), 8, N, 0, 1e-10, 0, stats,
                                              "test")
    assert stats["rank"] == N
    assert float(got) == pytest.approx(exact, rel=1e-9)
    # Its gradient comes from surrogate terms: a second derivative is refused, not wrong.
    lml = _torch_bbmm.log_marginal_likelihood(gp, _torch_bbmm.Rows(gp), 4, 5, 0, 1e-8, 0, None,
                                              "test")
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(lml, gp.raw_noise, create_graph=True)
    # 7 test points in blocks of 4: the last block solved padded to 4 columns, reported as 3.
    stats = {}
    mean, var = _torch_bbmm.predict(gp, _torch_bbmm.Rows(gp), gp.x[:7] + 0.01, gp.y, True, N,
                                    1e-10, 4, stats)
    assert [len(r["converged"]) for r in stats["variance_solves"]] == [4, 3]
    assert stats["variance_solves"][1]["summary"].startswith("3 columns")
    want_mean, want_var = gp.predict(gp.x[:7] + 0.01, mode="exact")
    torch.testing.assert_close(mean, want_mean, rtol=1e-7, atol=1e-9)  # zero mean: r = y
    torch.testing.assert_close(var, want_var, rtol=1e-6, atol=1e-9)


@needs_cuda
def test_cuda_model_likelihood_gradient_and_predictions_match_the_host():
    host, dev = _model(), _model("cuda")
    assert dev.raw_noise.is_cuda and dev.kernel.raw_outputscale.is_cuda and dev.x.is_cuda
    for gp in (host, dev):
        gp.log_marginal_likelihood(mode="bbmm", probes=8, rank=N, tol=1e-10).backward()
    exact = _model()
    exact.log_marginal_likelihood(mode="exact").backward()
    # The value is exact at full rank on both; the mean's gradient has no trace term.
    lml = float(dev.log_marginal_likelihood(mode="bbmm", probes=8, rank=N, tol=1e-10))
    assert lml == pytest.approx(float(exact.log_marginal_likelihood(mode="exact")), rel=1e-8)
    assert float(dev.mean_constant.grad) == pytest.approx(float(exact.mean_constant.grad),
                                                          rel=1e-7)
    xt = torch.rand(7, D, dtype=torch.float64)
    mean, var = dev.predict(xt.cuda(), mode="bbmm", rank=N, tol=1e-10, chunk=4)
    assert mean.is_cuda and var.is_cuda
    want_mean, want_var = exact.predict(xt, mode="exact")
    torch.testing.assert_close(mean.cpu(), want_mean, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(var.cpu(), want_var, rtol=1e-6, atol=1e-9)
    history = dev.fit(max_iter=3, probes=8, rank=10)
    assert history[-1]["loss"] < history[0]["loss"]
    # LOVE on the device: at full rank (or an invariant Krylov space) the exact variances.
    stats = {}
    mean, var = dev.predict(xt.cuda(), mode="love", love_rank=N, love_check=3, stats=stats,
                            tol=1e-10, rank=N)
    assert var.is_cuda and stats["love_check"]["max_excess"] < 1e-7
    _, want_var = dev.predict(xt.cuda(), mode="exact")
    torch.testing.assert_close(var, want_var, rtol=0, atol=1e-7)
    cov = dev.predict_covariance(xt.cuda(), mode="bbmm", rank=N, tol=1e-10)
    torch.testing.assert_close(cov, dev.predict_covariance(xt.cuda(), mode="exact"), rtol=0,
                               atol=1e-7)
    # Samples: the host's draw (one generator), solved and multiplied on the device; the same
    # functions as the host model's, exactly in the exact mode and to CG's tol by BBMM.
    twin = _model()  # the fitted hyperparameters on the host
    twin.load_state_dict({k: v.cpu() for k, v in dev.state_dict().items()})
    for mode, tol in (("exact", 1e-10), ("bbmm", 1e-6)):
        paths = dev.sample(xt.cuda(), samples=20, features=256, seed=3, mode=mode, rank=N,
                           tol=1e-10)
        assert paths.is_cuda and paths.shape == (7, 20)
        want = twin.sample(xt, samples=20, features=256, seed=3, mode="exact")
        torch.testing.assert_close(paths.cpu(), want, rtol=0, atol=tol)


@needs_cuda
def test_prior_draws_of_exact_and_random_features_are_the_same_on_the_device():
    from tessel.gp import Linear, Polynomial, RBF
    from tessel.gp.samples import PriorSampler
    x = torch.rand(9, D, dtype=torch.float64)
    kernel = Polynomial(power=2) * RBF(lengthscale=0.5) + Linear()
    host = PriorSampler(kernel, D, 4, 64, torch.Generator().manual_seed(1), "test")
    dev = PriorSampler(kernel, D, 4, 64, torch.Generator().manual_seed(1), "test")
    got = dev(x.cuda())
    assert got.is_cuda
    torch.testing.assert_close(got.cpu(), host(x), rtol=1e-12, atol=1e-12)


@needs_cuda
def test_sparse_gp_runs_on_the_device_as_on_the_host():
    from tessel.gp import SparseGP
    results = []
    for device in ("cpu", "cuda"):
        gp = _model(device)
        sgp = SparseGP(gp.x, gp.y, Scale(Matern(nu=2.5, lengthscale=[0.4, 0.6])), inducing=12,
                       noise=0.05, chunk=20)
        assert sgp.inducing.device.type == device
        bound = sgp.log_marginal_likelihood()
        bound.backward()
        mean, var = sgp.predict(gp.x[:5] + 0.01)
        assert mean.device.type == device and var.device.type == device
        results.append((float(bound), sgp.inducing.grad.cpu(), mean.cpu(), var.cpu()))
    (b0, g0, m0, v0), (b1, g1, m1, v1) = results
    assert b1 == pytest.approx(b0, rel=1e-12)
    for a, b in ((g1, g0), (m1, m0), (v1, v0)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
