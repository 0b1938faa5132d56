"""The ring of ranks under tessel.distributed: neighbours, overlapped shifts, and the check that
every rank makes the same call (one all_gather of three integers on the common path)."""
import hashlib

import torch
import torch.distributed as dist

__all__ = ["Ring", "exchange", "TAG_BLOCK", "TAG_GRAD"]

# Distinct tags keep a block and a gradient sent to the same neighbour apart (gloo matches
# messages by source and tag, in order).
TAG_BLOCK, TAG_GRAD = 7301, 7302
# What a rank sends in place of its descriptor's digest when its own arguments failed its checks:
# every rank still joins the exchange (no one waits for it forever), then every rank raises.
_FAILED = -1


def digest_of(parts):
    """A 56-bit digest of a descriptor: it fits an int64 and compares in one all_gather."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=7).digest(), "big")


def exchange(red, ring, args, who):
    """Every rank's i- and j-counts, after checking (one all_gather of three integers) that all
    ranks call the same reduction on arguments of the same kinds, dims and dtype."""
    error, parts, ni, nj = None, None, 0, 0
    try:
        parts, ni, nj = red._descriptor(args)
        digest = digest_of(parts)
    except (TypeError, ValueError, NotImplementedError) as e:
        error, digest = e, _FAILED
    device = args[0].device if args and isinstance(args[0], torch.Tensor) else "cpu"
    if ring.backend == "gloo":
        device = "cpu"
    mine = torch.tensor([digest, ni, nj], dtype=torch.int64, device=device)
    every = [torch.empty_like(mine) for _ in range(ring.size)]
    _stopped_waiting(who, "the ranks' check of the call",
                     lambda: dist.all_gather(every, mine, group=ring.group))
    every = torch.stack(every).cpu()
    if error is not None:
        raise error
    failed = [r for r in range(ring.size) if every[r, 0] == _FAILED]
    if failed:
        raise RuntimeError(f"{who}: rank {failed[0]} of the group refused its arguments (its "
                           "own error says why); every rank stops")
    if bool((every[:, 0] != digest).any()):
        _explain_mismatch(ring, parts, every[:, 0].tolist(), who)
    return every[:, 1].tolist(), every[:, 2].tolist()


def _stopped_waiting(who, what, step):
    """Runs a step that needs the other ranks; when one never comes (the process group's
    timeout ran out) or has gone, says which call was waiting and why, not only gloo's or NCCL's
    words about a buffer."""
    try:
        step()
    except RuntimeError as e:
        raise RuntimeError(f"{who}: {what} did not complete ({str(e).strip()}). Every rank of the "
                           "group must make the same calls in the same order; when one skips "
                           "this call or fails in it, the others stop here once it exits or the "
                           "process group's timeout runs out (init_process_group(timeout=...))"
                           ) from e


def _explain_mismatch(ring, parts, digests, who):
    """Raises naming the first rank whose call differs from rank 0's and how (this second
    exchange runs only on the error path, so the common one stays three integers)."""
    every = [None] * ring.size
    dist.all_gather_object(every, parts, group=ring.group)
    bad = next(r for r in range(ring.size) if digests[r] != digests[0])
    ref, other = every[0], every[bad]
    if ref[0] != other[0]:
        raise ValueError(f"{who}: rank {bad} built a different reduction than rank 0 "
                         f"({other[0]} vs {ref[0]})")
    names = ("argument", "kind", "dims", "dtype", "device", "requires_grad")
    for a, b in zip(ref[1:], other[1:]):
        for name, u, v in zip(names[2:], a[2:], b[2:]):
            if u != v:
                raise ValueError(f"{who}: rank {bad} disagrees with rank 0 on argument {a[0]} "
                                 f"({a[1]}): {name} {v} vs {u}")
    raise ValueError(f"{who}: rank {bad} called with arguments unlike rank 0's")


def check_group(who, group):
    """group must be None (the default group) or a torch.distributed ProcessGroup: anything else
    would fail deep in torch.distributed with an AttributeError that names neither."""
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{who}: group must be None (the default process group) or a "
                        "torch.distributed.ProcessGroup (from dist.new_group(...)), got "
                        f"{type(group).__name__} {group!r}")
    return group


class Ring:
    """The group, this rank in it, and its neighbours' global ranks (what isend/irecv take)."""

    def __init__(self, group, who):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise RuntimeError(f"{who}: this process is not a member of the given group")
        self.backend = dist.get_backend(group)
        self.who = who
        # get_global_rank is the public name from torch 1.13 on, _get_global_rank the older one
        # (deprecated, with a warning at every call, where both exist).
        to_global = (getattr(dist, "get_global_rank", None)
                     or dist.distributed_c10d._get_global_rank)
        glob = (lambda r: r) if group is None or group is dist.group.WORLD else (
            lambda r: to_global(group, r))
        self.next = glob((self.rank + 1) % self.size)
        self.prev = glob((self.rank - 1) % self.size)

    @staticmethod
    def of(group, who):
        check_group(who, group)
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"{who}: no process group is initialized; call "
                               "torch.distributed.init_process_group(...) on every rank first")
        return Ring(group, who)

    def owner(self, step):
        """Whose block this rank holds at a step of the ring (its own at step 0)."""
        return (self.rank - step) % self.size

    def gather(self, t):
        """Every rank's t (the same shape on every rank), in rank order, on every rank; on the
        host under gloo, which moves host tensors only."""
        mine = t.contiguous()
        if self.backend == "gloo":
            mine = mine.cpu()
        every = [torch.empty_like(mine) for _ in range(self.size)]
        dist.all_gather(every, mine, group=self.group)
        return every

    def sum_in_order(self, t):
        """The sum of t over the ranks, added in rank order: every rank gets the same bits, so
        every rank takes the same branches of an iteration (ranks that disagreed on when to stop
        would wait for each other forever), which an all_reduce does not promise."""
        every = self.gather(t)
        total = every[0].clone()
        for e in every[1:]:
            total += e
        return total

    def shift(self, send, shape, like, tag):
        """Starts sending `send` to the next rank and receiving a tensor of `shape` from the
        previous one; returns (the receive buffer, a function that waits for both). Empty
        tensors are not sent: both sides know the sizes, so neither waits for them."""
        works = []
        if send is not None and send.numel():
            works.append(dist.isend(send, self.next, group=self.group, tag=tag))
        buf = torch.empty(shape, dtype=like.dtype, device=like.device)
        if buf.numel():
            works.append(dist.irecv(buf, self.prev, group=self.group, tag=tag))

        def wait(keep=send):  # `send` stays alive until its message is out
            for w in works:
                _stopped_waiting(self.who, f"a block's exchange with ranks {self.prev} and "
                                 f"{self.next}", w.wait)
        return buf, wait
