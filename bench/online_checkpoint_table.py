"""Online checkpointing (checkpoint_while) against offline Revolve: untaped step evaluations for
every loop length n <= --max-n and every snapshot count s <= --max-s.

    python bench/online_checkpoint_table.py            # one summary line per s
    python bench/online_checkpoint_table.py --full     # the whole table: n, s, online, offline
"""
import argparse
import math

from tessel import _core


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-n", type=int, default=10000)
    ap.add_argument("--max-s", type=int, default=20)
    ap.add_argument("--full", action="store_true", help="print every (n, s), CSV")
    args = ap.parse_args()
    if args.full:
        print("n,s,online,offline,ratio")
    else:
        print(f"{'s':>3} {'optimal up to n':>16} {'C(s+2,2)':>9} {'equal':>7} {'mean ratio':>11} "
              f"{'worst ratio':>12} {'at n':>6} {'excess rep 3':>13} {'mean rep 3':>11}")
    for s in range(1, args.max_s + 1):
        online = _core.online_recomputations_table(args.max_n, s)
        worst, worst_n, equal, total, first_worse = 1.0, 0, 0, 0.0, None
        # The largest excess over offline for C(s+2, 2) < n <= C(s+3, 3) (repetition number 3).
        rep3, rep3_total, rep3_count = 0, 0.0, 0
        for n in range(2, args.max_n + 1):
            off = _core.revolve_optimal_recomputations(n, s)
            r = online[n] / off if off else 1.0
            if args.full:
                print(f"{n},{s},{online[n]},{off},{r:.6f}")
            equal += online[n] == off
            if online[n] != off and first_worse is None:
                first_worse = n
            total += r
            if math.comb(s + 2, 2) < n <= math.comb(s + 3, 3):
                rep3 = max(rep3, online[n] - off)
                rep3_total += r
                rep3_count += 1
            if r > worst:
                worst, worst_n = r, n
        if not args.full:
            opt = (first_worse - 1) if first_worse else args.max_n
            print(f"{s:>3} {opt:>16} {math.comb(s + 2, 2):>9} {equal:>7} "
                  f"{total / (args.max_n - 1):>11.4f} {worst:>12.4f} {worst_n:>6} {rep3:>13} "
                  f"{rep3_total / max(rep3_count, 1):>11.4f}")


if __name__ == "__main__":
    main()
