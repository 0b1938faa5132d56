"""pykeops.config on tessel: what the layer runs on (the CPU; no CUDA backend yet)."""
import importlib.util

from ... import _core

numpy_found = importlib.util.find_spec("numpy") is not None
torch_found = importlib.util.find_spec("torch") is not None
gpu_available = False   # tessel has no CUDA backend yet: every reduction runs on the CPU
use_cuda = False
cuda_available = False
use_OpenMP = True       # tessel's CPU kernels are multi-threaded


def get_build_folder():
    """tessel's compiled-kernel cache (TESSEL_CACHE_DIR), where pykeops keeps its build folder."""
    return _core.cache_dir()


def get_use_cuda():
    return False
