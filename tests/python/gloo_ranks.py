"""Runs a test's worker on spawned processes joined in a gloo process group on loopback, and
gathers what each rank returns (or fails with the first trace a rank sends back)."""
import os
import pickle
import socket
import traceback
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(work, rank, world, port, wait_s, queue):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=timedelta(seconds=wait_s))
        # Pickled to bytes here: a tensor put on a torch.multiprocessing queue travels as a file
        # descriptor that the parent fetches from this process, which may have exited by then.
        queue.put((rank, True, pickle.dumps(work(rank, world))))
    except BaseException:  # noqa: B902 -- any failure goes back to the test, with its trace
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(work, world, wait_s):
    """work(rank, world) on `world` spawned processes, in a process group whose timeout is
    wait_s; returns the results by rank. `work` must be a module-level function (spawn finds it
    by name) and its results picklable. The processes inherit the environment, so they share
    the kernel cache (TESSEL_CACHE_DIR) and compiler (TESSEL_CXX) of the test."""
    ctx = mp.get_context("spawn")
    queue, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_rank, args=(work, r, world, port, wait_s, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world):
            rank, ok, value = queue.get(timeout=wait_s + 30)
            assert ok, f"rank {rank} of {world} failed:\n{value}"
            results[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()
    return results
