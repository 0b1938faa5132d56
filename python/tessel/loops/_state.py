"""Checks of what a user's function returns against the state tensors it must match."""
import torch


def outputs_like(out, spec, is_tuple, who, like, mismatch):
    """`out` as a list of tensors, after checking it against `spec`, one (shape, dtype, device)
    per state tensor: a tuple or list of that many tensors when is_tuple, else one tensor.

    who: the function as messages name it ("odeint_reversible: f", "checkpoint_loop: step 3");
    like: what they call the state ("y0", "the state"); mismatch(j, o, shape, dtype, device): the
    message for tensor j of the wrong shape, dtype or device, in the terms of the caller's API
    (a vector field returns a derivative; a loop step changes its state)."""
    if is_tuple:
        if not isinstance(out, (tuple, list)) or len(out) != len(spec):
            raise ValueError(f"{who} returned a {type(out).__name__}; expected a tuple of "
                             f"{len(spec)} tensors like {like}")
        out = list(out)
    elif isinstance(out, (tuple, list)):
        raise ValueError(f"{who} returned a {type(out).__name__}; expected a tensor like {like}")
    else:
        out = [out]
    for j, (o, (shape, dtype, device)) in enumerate(zip(out, spec)):
        if not isinstance(o, torch.Tensor):
            raise ValueError(f"{who} returned a {type(o).__name__} for state {j}; "
                             "expected a tensor")
        if o.shape != shape or o.dtype != dtype or o.device != device:
            raise ValueError(mismatch(j, o, shape, dtype, device))
    return out
