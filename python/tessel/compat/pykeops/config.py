"""pykeops.config on tessel: what the layer runs on (CPU threads; CUDA when a GPU is usable)."""
import importlib.util

from ... import _core

numpy_found = importlib.util.find_spec("numpy") is not None
torch_found = importlib.util.find_spec("torch") is not None
gpu_available = _core.cuda_available()  # a CUDA driver and at least one GPU
use_cuda = gpu_available
cuda_available = gpu_available
use_OpenMP = True       # tessel's CPU kernels are multi-threaded


def get_build_folder():
    """tessel's compiled-kernel cache (TESSEL_CACHE_DIR), where pykeops keeps its build folder."""
    return _core.cache_dir()


def get_use_cuda():
    return use_cuda
