"""Point-cloud registration by gradient flow of the Sinkhorn divergence, with a figure.

A source cloud (a noisy ring) flows toward a target cloud (a crescent): x <- x - lr N grad_x S(x, y)
with S the debiased Sinkhorn divergence of tessel.ot.SamplesLoss (GeomLoss's signature, so the
loop is the one of GeomLoss's tutorials with the import changed). Every step costs a few
LogSumExp reductions and memory O(N + M). The figure shows the source, the target and the
flowed points; it is written as a PNG with no plotting library (a small rasteriser below).

Run: PYTHONPATH=build/python python3 examples/python/ot_registration.py [--n 5000] [--steps 60]
     [--png ot_registration.png]
"""
import argparse
import math
import struct
import sys
import time
import zlib

import torch

from tessel.ot import SamplesLoss


def clouds(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = 2 * math.pi * torch.rand(n, generator=g)
    r = 0.3 + 0.03 * torch.randn(n, generator=g)
    x = torch.stack([0.35 + r * t.cos(), 0.5 + r * t.sin()], 1)
    u = math.pi * torch.rand(n, generator=g)
    w = 0.05 * torch.randn(n, generator=g)
    y = torch.stack([0.6 + (0.25 + w) * u.sin(), 0.5 + (0.35 + w) * u.cos()], 1)
    return x, y


def write_png(path, layers, size=480):
    """Scatter plots on a white square: layers = [(points in [0, 1]^2, (r, g, b)), ...]."""
    img = bytearray(b"\xff" * (size * size * 3))
    for pts, color in layers:
        ij = (pts.clamp(0, 1) * (size - 3)).long() + 1
        for px, py in ij.tolist():
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    k = 3 * ((size - 1 - (py + dy)) * size + px + dx)
                    img[k:k + 3] = bytes(color)
    rows = b"".join(b"\x00" + bytes(img[3 * size * r:3 * size * (r + 1)]) for r in range(size))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2,
                                                                  0, 0, 0))
                 + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--png", default="ot_registration.png")
    args = ap.parse_args()
    x0, y = clouds(args.n)
    loss = SamplesLoss("sinkhorn", p=2, blur=0.01, scaling=0.8)
    x = x0.clone().requires_grad_()
    start = time.perf_counter()
    first = None
    for step in range(args.steps):
        value = loss(x, y)
        (grad,) = torch.autograd.grad(value, x)
        first = float(value) if first is None else first
        with torch.no_grad():
            x -= args.lr * len(x) * grad  # the gradient of a mean is 1/N per point
    final = float(loss(x, y))
    print(f"N = M = {args.n:,}: Sinkhorn divergence {first:.3e} -> {final:.3e} after "
          f"{args.steps} steps, {time.perf_counter() - start:.1f} s")
    write_png(args.png, [(x0, (170, 170, 170)), (y, (60, 110, 220)), (x.detach(), (220, 60, 40))])
    print(f"figure: {args.png} (grey: source, blue: target, red: source after the flow)")
    if not final < 0.05 * first:
        sys.exit("ot_registration: the flow did not bring the source onto the target")


if __name__ == "__main__":
    main()
