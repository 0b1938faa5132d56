"""Peak-memory measurement of a piece of code, in a fresh Python process (for tests and benchmarks).

PyTorch's CPU allocator keeps no statistics and `tracemalloc` does not see tensor storage, so the
honest CPU measure is the process's peak resident set (the kernel's high-water mark, VmHWM).
`run_isolated` runs `setup` in a fresh process, resets the mark to the current resident set
(Linux: /proc/self/clear_refs), runs `work`, and reports how far the mark rose above the resident
set at the start of `work` (bytes) and how long `work` took. Without the reset (a kernel that
refuses it) the mark is that of the whole process, whose transient peaks during imports and setup
can hide part of the rise. On a CUDA device the harness reports torch.cuda.max_memory_allocated.
"""
import json
import os
import subprocess
import sys
import textwrap

__all__ = ["run_isolated", "MeasureError"]

_MARK = "@@tessel-measure@@"

_TEMPLATE = """
import json, resource, sys, time
import torch
torch.set_num_threads({threads})
def _status(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
def _hwm():
    v = _status("VmHWM")
    return v if v is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
def _reset_hwm():
    # The mark then restarts from the current resident set: transient peaks of the imports and
    # the setup no longer hide the rise of `work`.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return _hwm()
    return _status("VmRSS") or _hwm()
{setup}
_cuda = {cuda}
if _cuda:
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    _base = torch.cuda.memory_allocated()
else:
    import gc; gc.collect()
    _base = _reset_hwm()
_t0 = time.perf_counter()
{work}
if _cuda:
    torch.cuda.synchronize()
_elapsed = time.perf_counter() - _t0
_peak = (torch.cuda.max_memory_allocated() if _cuda else _hwm()) - _base
_extra = globals().get("RESULT", None)
print({mark!r} + json.dumps(dict(peak_bytes=int(_peak), seconds=_elapsed, result=_extra)))
"""


class MeasureError(RuntimeError):
    """The measured code failed (its stderr is in the message) or ran out of time/memory."""


def run_isolated(setup, work, *, cuda=False, threads=None, timeout=None, env=None):
    """Runs `setup` then `work` (Python source) in a new interpreter and measures `work`.

    Peak memory is a property of a process: measuring it in a fresh one keeps the measure free
    of what the caller allocated before. The child sees this process's sys.path.

    Parameters
    ----------
    setup : str
        Python source run first, not measured (imports, data).
    work : str
        Python source measured; a global named RESULT it sets is returned.
    cuda : bool, default False
        Measure CUDA's peak allocation instead of the RSS.
    threads : int, optional
        The child's thread count (default: TESSEL_NUM_THREADS, else all cores).
    timeout : float, optional
        Seconds before the child is killed.
    env : dict, optional
        Extra environment variables for the child.

    Returns
    -------
    dict
        ``peak_bytes`` (rise of the peak RSS during `work`, or of CUDA's peak allocation),
        ``seconds`` (wall time of `work`) and ``result`` (RESULT, if JSON-serialisable).

    Raises
    ------
    TypeError
        setup or work is not a string.
    MeasureError
        The child failed (its output's tail is in the message) or ran past the timeout.

    Examples
    --------
    >>> from tessel.loops import run_isolated
    >>> r = run_isolated("import numpy as np", "a = np.ones(2**24); RESULT = float(a.sum())")
    >>> r["result"], r["peak_bytes"] > 100 * 2**20      # 128 MiB of float64
    (16777216.0, True)
    """
    if not isinstance(setup, str) or not isinstance(work, str):
        raise TypeError("run_isolated: setup and work must be Python source strings")
    threads = threads if threads is not None else int(os.environ.get("TESSEL_NUM_THREADS", "0")
                                                      or 0) or os.cpu_count() or 1
    code = _TEMPLATE.format(setup=textwrap.dedent(setup), work=textwrap.dedent(work),
                            cuda=bool(cuda), threads=int(threads), mark=_MARK)
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired as e:
        raise MeasureError(f"run_isolated: the measured code ran past {timeout} s") from e
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    tail = (proc.stderr or proc.stdout)[-3000:]
    raise MeasureError(f"run_isolated: the measured code failed (exit {proc.returncode}):\n{tail}")
