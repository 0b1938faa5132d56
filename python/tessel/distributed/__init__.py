"""tessel.distributed: kernel reductions and the algorithms on them, sharded over processes.

Each rank of a process group holds some rows of x (the outer index) and of y (the reduced index);
a reduction returns the rank's rows of the result, and gradients reach every rank's rows. The
blocks travel around a ring of the ranks with torch.distributed's own send / receive (NCCL between
GPUs, gloo on CPUs), overlapped with the reduction of the block at hand.

Every call is collective: all ranks of the group make it, in the same order. A rank whose own
arguments are wrong stops every rank at once (each raises); a rank that skips a call, or dies in
it, stops the others with a RuntimeError naming the call once it exits or the process group's
timeout runs out (init_process_group(timeout=...): 30 minutes by default, so set a shorter one;
NCCL enforces it only with its blocking wait or async error handling on). Ranks that share a
kernel cache (TESSEL_CACHE_DIR) compile each kernel once: the others wait for it and load it.
"""
from ._genred import Genred
from ._gp import ExactGP
from ._lazy import LazyTensor, Pm, Vi, Vj
from ._ot import SamplesLoss
from ._solve import KernelSolve

__all__ = ["ExactGP", "Genred", "KernelSolve", "LazyTensor", "SamplesLoss", "Vi", "Vj", "Pm"]
