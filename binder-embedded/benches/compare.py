#!/usr/bin/env python3
"""Compares two builds of a benchmark, alternated in one sitting.

    compare.py BASE_BINARY NEW_BINARY [PAIRS]

Runs the two binaries one after the other PAIRS times (default 5; the order swaps each
pair), reads each run's table (`#  scenario  median/s ...`), and prints per scenario the
median and the min-max of the per-pair ratios new/base of the median rates, raw and with
each side divided by its own run's scenario 1 (the mpsc baseline). BENCH_MESSAGES,
BENCH_ROUNDS and BENCH_SCENARIOS pass through to both. Build each side with
`cargo bench -p binder-embedded --bench <name> --no-run` and copy the binary aside first.
"""

import os
import re
import statistics
import subprocess
import sys

# A result row: number, scenario name, then the median rate (the first rate column).
RATE = re.compile(r"^(\d+)\s+(.+?)\s{2,}([\d.]+)([kKM]?)\s+[\d.]+[kKM]?\s.*%$")
SCALE = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}


def run(binary):
    out = subprocess.run(
        [binary, "--bench"], capture_output=True, text=True, check=True, env=os.environ
    ).stdout
    rates = {}
    for line in out.splitlines():
        m = RATE.match(line.strip())
        if m:
            rates[(m.group(1), m.group(2).strip())] = float(m.group(3)) * SCALE[m.group(4)]
    if not rates:
        sys.exit(f"no result table in the output of {binary}:\n{out}")
    return rates


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    base, new = sys.argv[1], sys.argv[2]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    ratios, normal = {}, {}
    for i in range(pairs):
        order = [(base, "base"), (new, "new")]
        if i % 2:
            order.reverse()
        got = {side: run(binary) for binary, side in order}
        for key, rate in got["new"].items():
            if key in got["base"]:
                ratios.setdefault(key, []).append(rate / got["base"][key])
                # The same, each side first divided by its own run's scenario 1 (the mpsc
                # baseline), which takes out how fast the machine ran at that moment.
                first = lambda side: next(v for (n, _), v in got[side].items() if n == "1")
                normal.setdefault(key, []).append(
                    (rate / first("new")) / (got["base"][key] / first("base"))
                )
        print(f"pair {i + 1}/{pairs} done", file=sys.stderr)
    print(f"new/base of the median rates, median (min-max) of {pairs} pairs; 'per mpsc': each")
    print("side first divided by its own run's scenario 1")
    print(f"{'scenario':<40} {'new/base':>22} {'per mpsc':>22}")
    for key in sorted(ratios):
        row = "".join(
            f"{statistics.median(rs):>9.3f} ({min(rs):.3f}-{max(rs):.3f})"
            for rs in (ratios[key], normal[key])
        )
        print(f"{key[0] + ' ' + key[1]:<40}{row}")


if __name__ == "__main__":
    main()
