"""tessel.distributed: kernel reductions and the algorithms on them, sharded over processes.

Each rank of a process group holds some rows of x (the outer index) and of y (the reduced index);
a reduction returns the rank's rows of the result, and gradients reach every rank's rows. The
blocks travel around a ring of the ranks with torch.distributed's own send / receive (NCCL between
GPUs, gloo on CPUs), overlapped with the reduction of the block at hand.
"""
from ._genred import Genred
from ._lazy import LazyTensor, Pm, Vi, Vj

__all__ = ["Genred", "LazyTensor", "Vi", "Vj", "Pm"]
