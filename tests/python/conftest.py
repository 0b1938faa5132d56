"""pytest setup: the package under test is the one built in <build>/python (see scripts/test.sh)."""
import os

import pytest

os.environ.setdefault("TESSEL_NUM_THREADS", "2")


@pytest.fixture(autouse=True)
def _seed():
    import numpy as np
    import torch

    np.random.seed(0)
    torch.manual_seed(0)
