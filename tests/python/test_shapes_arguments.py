"""tessel.shapes' arguments: defaults that work, and inputs that cannot be computed refused by a
ValueError naming the function, the argument, what was expected and what was given."""
import math

import pytest
import torch

from tessel.shapes import (LDDMM, Curve, GaussianKernel, Mesh, NormalizedLDDMM, PointCloud,
                           register)
from tessel.shapes.attachments import Varifold

pytestmark = pytest.mark.usefixtures("interpreted")

F64 = torch.float64


def test_varifold_defaults_to_the_binet_orientation():
    s = Mesh.icosphere(1)
    t = s.with_points(s.points * torch.tensor([1.2, 0.9, 1.0], dtype=F64))
    v = Varifold(0.5)
    assert v.orientation == "binet" and v.orientation_scale is None
    assert float(v(s, t)) == float(Varifold(0.5, orientation="binet")(s, t)) > 0
