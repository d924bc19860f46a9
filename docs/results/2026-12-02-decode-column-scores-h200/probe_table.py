#!/usr/bin/env python3
"""The decode rows of this folder's bench logs against the read probe of the same log.

Usage: probe_table.py LOG... (bench-all --suite decode logs, e.g. from callN/logs.tar.xz).
Prints, per log, each (case, µs) line of persistent-hopper with its K/V bytes
(2 * B * Hkv * Sk * D * 2) and the fastest read probe of those bytes timed in the same process:
% of probe = probe µs / row µs.
"""
import re
import sys

ROW = re.compile(r"^\s+(b(\d+)-hq(\d+)-hkv(\d+)-sq(\d+)-sk(\d+)-d(\d+)/\S+) persistent-hopper: ([\d.]+) us")
PROBE = re.compile(r"read probe (\S+) (\d+) MiB: ([\d.]+) us")


def table(path):
    probes, rows = {}, []
    for line in open(path, errors="replace"):
        m = PROBE.search(line)
        if m:
            mib, us = int(m.group(2)), float(m.group(3))
            probes[mib] = min(us, probes.get(mib, us))
            continue
        m = ROW.match(line)
        if m:
            b, hkv, sk, d = (int(m.group(i)) for i in (2, 4, 6, 7))
            rows.append((m.group(1), 2 * b * hkv * sk * d * 2 >> 20, float(m.group(8))))
    print(f"## {path}")
    print("| case | K/V MiB | µs | probe µs | % of probe |")
    print("|---|---:|---:|---:|---:|")
    for case, mib, us in rows:
        p = probes.get(mib)
        pct = f"{100 * p / us:.1f} %" if p else "—"
        print(f"| {case} | {mib} | {us:.1f} | {p if p else '—'} | {pct} |")
    print()


for path in sys.argv[1:]:
    table(path)
