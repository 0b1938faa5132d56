"""CUDA tensors faked on a machine without a GPU, over the stand-in CUDA driver (tests only).

With TESSEL_FAKE_CUDA=1 and TESSEL_LIBCUDA / TESSEL_NVRTC naming the stand-in libraries
(tests/standin), conftest.py installs this module before the tests import: `torch.cuda` says a
device is there, and `.cuda()`, `.to("cuda")` and `device="cuda"` give tensors that PyTorch and
tessel see as CUDA tensors. tessel then takes its real CUDA path: its host code, device copies,
streams, and the generated CUDA kernels, which the stand-in runs in its CPU emulator.

A fake CUDA tensor is a CPU tensor whose storage is registered here (and adopted by the stand-in
as device memory, device addresses equal to host addresses, so PyTorch's CPU kernels compute on
it). Being on the device is a property of the storage, not of the Python object, so views, saved
tensors that autograd unpacks and every other alias agree: `torch.Tensor`'s `is_cuda`, `is_cpu`,
`device`, `get_device`, `data_ptr`, `__dlpack__`, `cpu`, `cuda` and `to` are patched to read it.
A torch function mode, active for the whole process, gives every operation with a device input
device outputs, after waiting for the stand-in's streams (as a real operation is ordered after
tessel's work on the current stream). Registered storages stay alive until `forget()` (after each
test), so that the allocator cannot hand their memory to a plain CPU tensor that would then read
as device memory. Tensors the autograd engine computes in C++ (the seed of a backward pass, the
sum of two gradient contributions) are host tensors: tessel copies such inputs to the device, as
it does for any host array given to a GPU call.
"""
import contextlib
import ctypes
import os

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_KDL_CUDA = 2
_lib = None
_storages = {}  # storage base address -> (bytes, device index, the storage, kept alive)
_base = torch._C._TensorBase
_orig = {}


def _driver():
    global _lib
    if _lib is None:
        path = os.environ.get("TESSEL_LIBCUDA")
        if not path:
            raise RuntimeError("fake_cuda: TESSEL_LIBCUDA must name the stand-in CUDA driver")
        _lib = ctypes.CDLL(path)
        _lib.tessel_standin_adopt.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _lib.tessel_standin_release.argtypes = [ctypes.c_void_p]
        _lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        _lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        _check(_lib.cuInit(0), "cuInit")
    return _lib


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"fake_cuda: {what} failed with CUDA error {rc}")


def _context():
    """Makes device 0's primary context current on this thread, as PyTorch's runtime does."""
    lib = _driver()
    ctx = ctypes.c_void_p()
    _check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        dev = ctypes.c_int()
        _check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def synchronize(stream=0):
    """Waits for the stand-in's work on `stream` (0: the legacy default stream, which waits for
    every blocking stream)."""
    _context()
    _check(_driver().cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")


def device_of(t):
    """The fake device index of tensor t, or None for a host tensor."""
    entry = _storages.get(_base._storage(t).data_ptr())
    return None if entry is None else entry[1]


def _record(t, index):
    """Puts t's storage on fake device `index` (adopted by the stand-in, kept alive)."""
    s = _base._storage(t)
    base, nbytes = s.data_ptr(), s.nbytes()
    if base in _storages or not nbytes:
        return t
    _check(_driver().tessel_standin_adopt(base, nbytes, index), "tessel_standin_adopt")
    _storages[base] = (nbytes, index, s)
    return t


def forget():
    """Drops every fake device storage (between tests): waits for the stand-in, then lets the
    memory go back to PyTorch's allocator."""
    if not _storages:
        return
    synchronize()
    for base in list(_storages):
        _driver().tessel_standin_release(ctypes.c_void_p(base))
    _storages.clear()


def _index(device):
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    return torch.device(device).index or 0


def _cuda_target(device):
    """The device index when `device` names CUDA, else None."""
    if device is None or isinstance(device, int):
        return None
    d = torch.device(device)
    return (d.index or 0) if d.type == "cuda" else None


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _to_device(t, index):
    """A device copy of t that autograd follows back to t (as a real copy to the device)."""
    return _record(t.clone(memory_format=torch.preserve_format), index)


_copying_to_host = [False]


def _to_host(t):
    synchronize()
    _copying_to_host[0] = True
    try:
        return t.clone(memory_format=torch.preserve_format)
    finally:
        _copying_to_host[0] = False


def _move(func, args, kwargs):
    """Tensor.to / Tensor.cuda / Tensor.cpu (func: the original method)."""
    t = args[0]
    here = device_of(t)
    if func is _orig["cpu"]:
        return _to_host(t) if here is not None else t
    if func is _orig["cuda"]:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        index = _index(device)
        return t if here == index else _to_device(t, index)
    # Tensor.to(device?, dtype?, ...), Tensor.to(other), Tensor.to(dtype)
    rest = list(args[1:])
    device = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    for k, a in enumerate(rest):
        if isinstance(a, (str, torch.device)):
            device = rest.pop(k)
            break
        if isinstance(a, torch.Tensor):
            other = rest.pop(k)
            kwargs.setdefault("dtype", other.dtype)
            device = other.device
            break
    if device is not None:
        # Module.to's form: to(device, dtype or None, non_blocking); with the device taken out,
        # what is left is an optional dtype and the flags.
        if rest and (rest[0] is None or isinstance(rest[0], torch.dtype)):
            dtype = rest.pop(0)
            if dtype is not None:
                kwargs.setdefault("dtype", dtype)
        if rest and isinstance(rest[0], bool):
            rest.pop(0)  # non_blocking: the fake device is synchronous
        if rest and isinstance(rest[0], bool):
            kwargs["copy"] = rest.pop(0)
    out = _orig["to"](t, *rest, **kwargs) if rest or kwargs else t
    target = None if device is None else _cuda_target(device)
    if device is None:
        return _record(out, here) if here is not None and out is not t else out
    if target is None:  # to the host
        return _to_host(out) if here is not None else out
    if here == target:
        return _record(out, target) if out is not t else t
    return _to_device(out, target) if out is t else _record(out, target)


# Backward passes running (the check below is left out there: the engine's C++ backward
# formulas make new tensors from their inputs' options, which here say CPU, and those reach the
# next Python backward as host tensors).
_in_backward = [0]
# Operations PyTorch lets mix a CUDA tensor with CPU ones (indices, masks).
_MIXED_OK = {"__getitem__", "__setitem__", "index", "index_select", "index_put", "index_add",
             "take", "gather", "scatter", "masked_fill", "where"}


def _same_device(name, args, kwargs):
    """Raises as PyTorch does when an operation mixes device and host tensors (0-dim host
    tensors excepted, as on a GPU)."""
    if name.split(".")[0] in _MIXED_OK:
        return
    devices = {device_of(t) for t in _tensors((args, kwargs)) if t.dim() > 0}
    if len(devices) > 1 and None in devices:
        raise RuntimeError(f"{name}: expected all tensors to be on the same device, but found at "
                           "least two devices, cuda:0 and cpu! (fake CUDA)")


def _on_device_of_inputs(func, args, kwargs, target=None):
    """func(*args, **kwargs), its tensor results on `target`, else on the device of its first
    device input (after the stand-in's streams are done), else on the host."""
    if target is None:
        target = next((i for i in map(device_of, _tensors((args, kwargs))) if i is not None),
                      None)
    if target is None:
        return func(*args, **kwargs)
    synchronize()
    out = func(*args, **kwargs)
    for t in _tensors(out):
        _record(t, target)
    return out


class _DeviceMode(TorchFunctionMode):
    """Every operation with a device input, or a factory given device="cuda", has device
    outputs, computed after the stand-in's streams are done."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if func in _DIRECT:
            return func(*args, **kwargs)
        if func in _RUNS_CODE:  # a backward pass runs tessel's Functions: the mode stays on
            _in_backward[0] += 1
            try:
                with _DeviceMode():
                    return _RUNS_CODE[func](*args, **kwargs)
            finally:
                _in_backward[0] -= 1
        if name in ("cpu", "cuda", "to") and args and isinstance(args[0], torch.Tensor):
            return _move(_MOVES[name], args, kwargs)
        if name == "_has_compatible_shallow_copy_type":
            # Module.to asks whether a parameter's .data may take the moved tensor: never across
            # devices on a GPU (their tensor types differ), so it makes new parameters.
            if device_of(args[0]) != device_of(args[1]):
                return False
        if name.endswith("_") and not name.endswith("__") and args and isinstance(
                args[0], torch.Tensor):  # in place: the destination keeps its device
            if device_of(args[0]) is not None:
                synchronize()
            return func(*args, **kwargs)
        target = _cuda_target(kwargs.get("device"))
        if target is not None:
            kwargs["device"] = "cpu"
            kwargs.pop("pin_memory", None)
        elif name not in _MIXED_OK and not _in_backward[0]:
            _same_device(name, args, kwargs)
        return _on_device_of_inputs(func, args, kwargs, target)


class _DeviceDispatch(TorchDispatchMode):
    """The same rule one level down, for the operations the autograd engine runs in C++ (the sum
    of two contributions to a gradient, a backward formula's products): a device input makes
    device outputs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _copying_to_host[0]:
            return func(*args, **kwargs)
        return _on_device_of_inputs(func, args, kwargs)


class _Stream:
    """torch.cuda.Stream on the stand-in: the legacy default stream (handle 0) unless created."""

    def __init__(self, device=None, priority=0, handle=None):
        self.device = torch.device("cuda", _index(device))
        if handle is None:
            h = ctypes.c_void_p()
            _context()
            _check(_driver().cuStreamCreate(ctypes.byref(h), 0), "cuStreamCreate")
            handle = h.value or 0
        self.cuda_stream = handle

    def synchronize(self):
        synchronize(self.cuda_stream)

    def wait_stream(self, other):
        other.synchronize()

    def query(self):
        return True


_current = {}


@contextlib.contextmanager
def _stream_scope(stream):
    old = _current.get(stream.device.index)
    _current[stream.device.index] = stream
    try:
        yield stream
    finally:
        _current[stream.device.index] = old


def _current_stream(device=None):
    index = _index(device)
    return _current.get(index) or _Stream(index, handle=0)


def _device_count():
    n = ctypes.c_int()
    _check(_driver().cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


def _dlpack(self, stream=None, **kwargs):
    index = device_of(self)
    if index is None:
        return _orig["dlpack"](self, stream=stream, **kwargs)
    if kwargs:  # unversioned capsules only (nanobind then asks without max_version)
        raise TypeError("fake CUDA tensors export unversioned DLPack only")
    capsule = torch.utils.dlpack.to_dlpack(self.detach())
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get(capsule, b"dltensor")
    # DLTensor: void* data, then DLDevice {int32 device_type, int32 device_id}
    device = (ctypes.c_int32 * 2).from_address(address + ctypes.sizeof(ctypes.c_void_p))
    device[0], device[1] = _KDL_CUDA, index
    return capsule


def _patch_tensor():
    T = torch.Tensor
    _orig.update(cpu=T.cpu, cuda=T.cuda, to=T.to, dlpack=T.__dlpack__,
                 device=_base.device.__get__, is_cuda=_base.is_cuda.__get__,
                 get_device=T.get_device)

    def device(self):
        i = device_of(self)
        return _orig["device"](self) if i is None else torch.device("cuda", i)

    T.device = property(device)
    T.is_cuda = property(lambda self: device_of(self) is not None)
    T.is_cpu = property(lambda self: device_of(self) is None and _orig["device"](self).type == "cpu")
    T.get_device = lambda self: -1 if device_of(self) is None else device_of(self)
    T.__dlpack__ = _dlpack
    T.__dlpack_device__ = lambda self: ((_KDL_CUDA, device_of(self)) if device_of(self) is not None
                                        else (1, 0))


def _patch_cuda():
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = _device_count
    c.current_device = lambda: 0
    c.set_device = lambda device: None
    c.synchronize = lambda device=None: synchronize()
    c.current_stream = _current_stream
    c.default_stream = lambda device=None: _Stream(device, handle=0)
    c.Stream = _Stream
    c.stream = _stream_scope
    c.get_rng_state = lambda device=None: torch.zeros(0, dtype=torch.uint8)
    c.set_rng_state = lambda state, device=None: None
    c.manual_seed = c.manual_seed_all = lambda seed: None
    for stat in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        setattr(c, stat, lambda device=None: 0)
    c.reset_peak_memory_stats = lambda device=None: None


_DIRECT = set()


def _grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
          only_inputs=True, allow_unused=False, is_grads_batched=False):
    """torch.autograd.grad's own work, without its dispatch to the mode (which would call the
    mode again): the engine runs under the mode, so tessel's backward sees device tensors."""
    if is_grads_batched:
        raise NotImplementedError("fake_cuda: is_grads_batched is not supported")
    A = torch.autograd
    outs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    ins = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    seeds = A._make_grads(outs, A._tensor_or_tensors_to_tuple(grad_outputs, len(outs)),
                          is_grads_batched=False)
    return A.Variable._execution_engine.run_backward(
        outs, seeds, create_graph if retain_graph is None else retain_graph, create_graph, ins,
        allow_unused, accumulate_grad=False)


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    torch.autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


_RUNS_CODE = {torch.autograd.grad: _grad, torch.Tensor.backward: _backward}
_MOVES = {}


def install():
    """Patches torch so that CUDA tensors are fake CUDA tensors over the stand-in, for the whole
    process: call it once, before the tests import."""
    if _orig:
        return
    _context()
    _patch_tensor()
    _patch_cuda()
    _DIRECT.update({_base._storage, _base.data_ptr, _base.storage_offset, torch.Tensor.storage})
    _MOVES.update(cpu=_orig["cpu"], cuda=_orig["cuda"], to=_orig["to"])
    _DeviceDispatch().__enter__()
    _DeviceMode().__enter__()
