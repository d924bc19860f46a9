#!/usr/bin/env python3
"""Median ncu time of each backward kernel (prepare, dk_dv, dq_convert) of each problem in a
call's ncu-*.csv (gpu__time_duration.sum, one line a launch, three launches a backward call).
The bench times the mode's problem first, then its dense twin: the first half of the calls is the
mode's, the second the twin's.

    python3 docs/results/2026-12-02-hopper-bwd-schedule-h200/kernel_times.py call4/ncu-*.csv
"""
import csv
import statistics
import sys


def calls(path):
    us = [float(r[-1].replace(",", "")) / 1e3 for r in csv.reader(open(path))]
    return [us[i : i + 3] for i in range(0, len(us) - len(us) % 3, 3)]


def main(paths):
    print("| file | problem | calls | prepare µs | dk_dv µs | dq_convert µs | sum µs |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in paths:
        cs = calls(path)
        half = len(cs) // 2
        for name, part in (("mode", cs[:half]), ("twin", cs[half:])):
            med = [statistics.median(c[i] for c in part) for i in range(3)]
            cells = " | ".join(f"{x:.1f}" for x in med)
            print(f"| {'/'.join(path.split('/')[-2:])} | {name} | {len(part)} | {cells} | {sum(med):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
