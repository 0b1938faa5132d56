"""Generates src/algos/online_rep3_table.cpp: the placement moves that keep the online schedule
within one recomputation of offline Revolve between C(s+2, 2) and C(s+3, 3) steps.

    python scripts/gen_online_rep3_table.py > src/algos/online_rep3_table.cpp

The model (see tessel/online_checkpoint.hpp). All s slots hold states; the segment at position
p (p = 1 the newest) has length p+1+u_p, and the schedule is optimal exactly when every
0 <= u_p <= C(p+1, 2) (u_1 = -1, a segment of length 1, costs one recomputation). A step either
skips (u_1 += 1) or stores x_k in place of the state between positions p and p-1 ("merge p": the
two segments join at position p, the ones below move up a position, keeping their lengths, and a
new segment of length 1 starts).

The range is written as s-1 regions, one per q = s-1, ..., 1. A region starts with merge 2 (a
pin, kept to the end), and grows at the bottom while the region above it gives up its slots one
at a time, always its lowest (an "expansion": merge b+2 when the new region has b positions; the
region above stays valid because its lowest segment is then exactly full). A region ends with q
segments at their shortest lengths, which is where the next region starts. Writing a region is a
search: a region with E expansions to go keeps every u_p <= E (a value only grows, by merges,
and each expansion lowers it by one: at the end each must be exactly 0), so the values equal to E
above the others are frozen and drop out of the state. The search runs backwards from the end
for the last E <= --backward levels (every state that can still finish), then forwards with that
set as the oracle. The forward walk's time grows 18- to 55-fold per region at the end (with
--backward 14: q = 22 takes 17 s, q = 23 five minutes, after a backward pass of about twelve),
hence the table's q <= 23 (s <= 24). The moves do not depend on --backward, only the time.

Moves per region: '.' skip, 'x' expansion, 'B' + (p - 2) merge p.
"""
import argparse
import math
import sys
import time

sys.setrecursionlimit(1_000_000)


def cap(p):
    return math.comb(p + 1, 2)


def valid(u, e):
    """Every value within its position's range and at most e (one unit of slack below 0)."""
    slack = 0
    for p, x in enumerate(u, 1):
        if x < 0:
            slack -= x
        if x > cap(p) or (p >= 2 and x > e):
            return False
    return slack <= 1


def norm(u, e):
    """Drops the frozen values (equal to e) on top; keeps position 1."""
    u = list(u)
    while len(u) > 1 and u[-1] == e:
        u.pop()
    return tuple(u)


def successors(u, e, frozen):
    """Moves from state u (e expansions to go; `frozen`: values equal to e stand above u)."""
    out = []
    if all(x >= 1 for x in u):
        out.append(("x", (-1,) + tuple(x - 1 for x in u), e - 1))
    out.append((".", (u[0] + 1,) + u[1:], e))
    for p in range(len(u), 1, -1):
        v = list(u)
        v[p - 1] = u[p - 1] + u[p - 2] + p
        v[1:p - 1] = [x - 1 for x in u[0:p - 2]]
        v[0] = -1
        out.append((chr(ord("B") + p - 2), tuple(v), e))
    return [(m, norm(v, e2), e2, frozen or len(norm(v, e2)) < len(v))
            for m, v, e2 in out if valid(v, e2)]


def plausible(u, e, frozen):
    """The lowest frozen value (e at position len(u)+1) must fit there."""
    return not frozen or e <= cap(len(u) + 1)


def predecessors(v, e, frozen):
    """The states with (v, e, frozen) among their successors."""
    cands = [((v[0] - 1,) + v[1:], e, frozen)]
    if v[0] == -1:
        if len(v) > 1:
            cands.append((tuple(x + 1 for x in v[1:]), e + 1, frozen))
        elif frozen:  # the lowest frozen value moves back to position 1
            cands += [((e + 1,), e + 1, True), ((e + 1,), e + 1, False)]
        for p in range(2, len(v) + (2 if frozen else 1)):
            vp = v[p - 1] if p <= len(v) else e
            below = [x + 1 for x in v[1:p - 1]]
            for a in range(-1, min(cap(p - 1), e) + 1):
                u = tuple(below + [a, vp - a - p] + list(v[p:]))
                # a merge that froze its result may have frozen the first value
                cands += [(u, e, frozen)] if p <= len(v) else [(u, e, True), (u, e, False)]
    out = []
    for u, e2, f in cands:
        if len(norm(u, e2)) != len(u) or not valid(u, e2) or not plausible(u, e2, f):
            continue
        if any((w, e3, g) == (v, e, frozen) for _, w, e3, g in successors(u, e2, f)):
            out.append((u, e2, f))
    return out


def backward(levels):
    done = {(u, 0, f) for u in ((-1,), (0,)) for f in (True, False)}
    stack = list(done)
    while stack:
        for u in predecessors(*stack.pop()):
            if u[1] <= levels and u not in done:
                done.add(u)
                stack.append(u)
    return done


class Search:
    def __init__(self, levels):
        self.levels = levels
        self.finishing = backward(levels)
        self.memo = {}

    def can_finish(self, u, e, frozen):
        key = (u, e, frozen)
        if e <= self.levels:
            return key in self.finishing
        if key not in self.memo:
            self.memo[key] = any(self.can_finish(*s[1:]) for s in successors(u, e, frozen))
        return self.memo[key]

    def region(self, q):
        u, e, frozen, moves = (-1,), q - 1, False, []
        while not (e == 0 and u in ((-1,), (0,))):
            for m, *s in successors(u, e, frozen):
                if self.can_finish(*s):
                    moves.append(m)
                    u, e, frozen = s
                    break
            else:
                raise RuntimeError(f"no region of size {q}")
        if u[0] == -1:
            moves.append(".")  # end at the shortest lengths: u_1 = 0
        return "".join(moves)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-q", type=int, default=23)
    ap.add_argument("--backward", type=int, default=14)
    args = ap.parse_args()
    search = Search(args.backward)
    rows = []
    for q in range(1, args.max_q + 1):
        t = time.time()
        rows.append(search.region(q))
        print(f"region {q}: {len(rows[-1])} moves, {time.time() - t:.1f} s", file=sys.stderr)
    print("// Generated by scripts/gen_online_rep3_table.py: the moves writing one region of the")
    print("// online schedule's repetition-3 range (see that script and tessel/online_checkpoint.hpp).")
    print('#include "algos/online_rep3_table.hpp"')
    print()
    print("namespace tessel::detail {")
    print()
    print("namespace {")
    print("constexpr std::string_view kRegions[] = {")
    for row in rows:  # as clang-format lays it out
        parts = [row[i:i + 80] for i in range(0, len(row), 80)]
        for i, part in enumerate(parts):
            print(f'    "{part}"' + ("," if i + 1 == len(parts) else ""))
    print("};")
    print("}  // namespace")
    print()
    print(f"int online_rep3_max_region() {{ return {args.max_q}; }}")
    print()
    print("std::string_view online_rep3_region(int q) {")
    print("  return q >= 1 && q <= online_rep3_max_region() ? kRegions[q - 1] : std::string_view{};")
    print("}")
    print()
    print("}  // namespace tessel::detail")


if __name__ == "__main__":
    main()
