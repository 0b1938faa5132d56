"""
Checkpointed and reversible loops: memory against iterations
============================================================

Differentiating a loop with plain autograd keeps every iteration's intermediate values for the
backward pass, so memory grows linearly with the number of iterations. ``tessel.loops`` offers
two ways out: ``checkpoint_loop`` keeps a fixed number of states and recomputes the others
(Revolve's optimal schedule), and ``odeint_reversible`` rebuilds the trajectory backwards from
its end (memory flat in the number of steps). Here a neural ODE ``dy/dt = tanh(W y)`` on a
batch of states is integrated for more and more steps, and the peak memory of each backward is
measured in a fresh process (``tessel.loops.run_isolated``); the gradients are checked equal.

Run: ``PYTHONPATH=build/python python3 examples/python/loops_memory.py [--full]``; the gallery
measures up to 400 steps of a 128 x 128 state, ``--full`` up to 3200 steps of 256 x 1024.
"""
import sys

import matplotlib.pyplot as plt
import torch

from tessel.loops import checkpoint_loop, odeint_reversible, run_isolated

full = "--full" in sys.argv[1:]
batch, dim = (256, 1024) if full else (128, 128)
steps_list = (200, 800, 3200) if full else (100, 200, 400)

# %%
# The three ways to differentiate the same loop. Each returns the gradient of the final
# state's squared norm with respect to the weight matrix W.
SETUP = f"""
import torch
from tessel.loops import checkpoint_loop, odeint_reversible
torch.manual_seed(0)
W = (torch.randn({dim}, {dim}) / {dim} ** 0.5).requires_grad_(True)
y0 = torch.randn({batch}, {dim})
def f(t, y):
    return torch.tanh(y @ W)
"""
WORK = {
    "plain autograd": """
y = y0
for k in range(STEPS):
    y = y + (1.0 / STEPS) * f(None, y)
y.square().sum().backward()
""",
    "checkpoint_loop, 8 snapshots": """
y = checkpoint_loop(lambda y, k: y + (1.0 / STEPS) * f(None, y), y0, STEPS, snapshots=8)
y.square().sum().backward()
""",
    "odeint_reversible": """
y = odeint_reversible(f, y0, torch.tensor([0.0, 1.0]), steps_per_interval=STEPS)[-1]
y.square().sum().backward()
""",
}


def measure(work, steps):
    r = run_isolated(SETUP, work.replace("STEPS", str(steps)) + "RESULT = W.grad.norm().item()")
    return r["peak_bytes"] / 2**20, r["seconds"], r["result"]


results = {name: [measure(work, s) for s in steps_list] for name, work in WORK.items()}
for name, rows in results.items():
    print(f"{name:>30}: " + ", ".join(f"{s} steps {mb:.0f} MiB {sec:.2f} s"
                                      for s, (mb, sec, _) in zip(steps_list, rows)))

# %%
# The Euler loop and its checkpointed version compute the same gradient; the reversible Heun
# integrator is another scheme of the same ODE, close to it at these step sizes.
euler = [r[2] for r in results["plain autograd"]]
check = [r[2] for r in results["checkpoint_loop, 8 snapshots"]]
heun = [r[2] for r in results["odeint_reversible"]]
assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(euler, check)), (euler, check)
assert all(abs(a - b) <= 1e-2 * abs(a) for a, b in zip(euler, heun)), (euler, heun)
plain_mb = [r[0] for r in results["plain autograd"]]
assert plain_mb[-1] > 2 * max(r[0] for r in results["checkpoint_loop, 8 snapshots"])

# %%
# Peak memory of the backward and time against the number of steps.
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for name, rows in results.items():
    ax.plot(steps_list, [r[0] for r in rows], "o-", label=name)
    ax2.plot(steps_list, [r[1] for r in rows], "o-", label=name)
ax.set_xlabel("steps")
ax.set_ylabel("peak memory rise (MiB)")
ax.set_title(f"state {batch} x {dim}, float32")
ax2.set_xlabel("steps")
ax2.set_ylabel("seconds (forward + backward)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
