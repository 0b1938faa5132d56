"""tessel.ot at the edges of float32's range: clouds far from unit size, blurs tiny against
them, and kernel losses, against dense float64; and the messages of inputs it refuses."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample


def unequal_masses(dtype=torch.float64):
    a, x, b, y = weighted_clouds(12, 9, seed=4)
    return (a * (1 + 1e-6)).to(dtype), x.to(dtype), (b * (1 - 1e-6)).to(dtype), y.to(dtype)


@pytest.mark.parametrize("call", [
    lambda *t: SamplesLoss(blur=0.1)(*t),
    lambda *t: SamplesLoss(blur=0.1, backend="multiscale")(*t),
    lambda *t: SamplesLoss(blur=0.1, gradient="implicit")(*t),
    lambda *t: SamplesLoss(blur=0.1, cost=lambda u, v: ((u[:, :, None] - v[:, None]) ** 2)
                           .sum(-1) / 2)(*t),
    lambda *t: solve_sample(*t, blur=0.1)])
def test_unequal_masses_print_digits_that_tell_them_apart(call):
    # Before: "a sums to 1 and b to 0.999999" from the core (six digits, the core's name), and
    # no error at all with a cost function of dense tensors.
    with pytest.raises(ValueError, match=r"tessel\.ot\.(SamplesLoss|solve_sample): balanced OT "
                       r".* weights a sum to 1\.000001 and b to 0\.999999"):
        call(*unequal_masses())
