#!/usr/bin/env python3
"""Summarize the Hopper backward's schedule from FLASHCORE_HOPPER_BWD_TRACE=2 output.

The traced build prints a line for every unit of every CTA of one launch:

    bwd-sched cta 17 sm 34 unit 17 steps 18 start 1764650000123456 end 1764650000180000

(globaltimer ns, one clock for all SMs). This reads such lines from files or stdin, ignoring every
other line, and prints where the launch's time went: how busy the SMs were, how long the tail is,
what a unit without steps costs and the gap between consecutive units on one SM.

    FLASHCORE_HOPPER_BWD_TRACE=2 xtask bench-all ... > run.log 2>&1
    python3 bench/bwd_schedule.py run.log

Lines more than a millisecond apart are taken as separate launches (a bench traces one launch of
each build it runs) and summarized one by one. On a grid of one CTA a unit (causal, windows, mixed
varlen) each CTA's prints at its end hold the grid: a traced launch spanned 8.5-9 ms against about
1.1 ms untraced (docs/results/2026-12-02-hopper-bwd-schedule-h200, call 1). There the step counts
hold, not the busy share, tail or gaps; ncu's kernel times are the measure of such a launch.
"""

import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(
    r"bwd-sched cta (\d+) sm (\d+) unit (-?\d+) steps (\d+) start (\d+) end (\d+)"
)


def parse(lines):
    units = []
    for line in lines:
        m = LINE.search(line)
        if m:
            cta, sm, unit, steps, start, end = map(int, m.groups())
            if end >= start > 0:
                units.append(dict(cta=cta, sm=sm, unit=unit, steps=steps, start=start, end=end))
    return units


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def fit_unit_cost(units):
    """The least-squares line unit time = fixed + slope * steps over units with steps."""
    if len(units) < 2:
        return float("nan"), float("nan")
    xs = [u["steps"] for u in units]
    ys = [u["end"] - u["start"] for u in units]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan"), my / mx
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def launches(units, gap_ns=1_000_000):
    """Splits the lines into launches: a unit starting over gap_ns after every earlier one ended
    begins the next launch (a bench traces one launch of each build it runs, milliseconds apart)."""
    out = []
    for u in sorted(units, key=lambda u: u["start"]):
        if out and u["start"] <= out[-1][1] + gap_ns:
            out[-1][0].append(u)
            out[-1][1] = max(out[-1][1], u["end"])
        else:
            out.append([[u], u["end"]])
    return [us for us, _ in out]


def summarize(units):
    if not units:
        return "no bwd-sched lines (was the build traced with FLASHCORE_HOPPER_BWD_TRACE=2?)"
    t0 = min(u["start"] for u in units)
    t1 = max(u["end"] for u in units)
    span = t1 - t0
    by_sm = defaultdict(list)
    for u in units:
        by_sm[u["sm"]].append(u)
    busy = sum(u["end"] - u["start"] for u in units)
    last_ends = sorted(max(u["end"] for u in us) - t0 for us in by_sm.values())
    gaps = []
    for us in by_sm.values():
        us.sort(key=lambda u: u["start"])
        gaps += [b["start"] - a["end"] for a, b in zip(us, us[1:])]
    empty = [u["end"] - u["start"] for u in units if u["steps"] == 0]
    full = [u for u in units if u["steps"] > 0]
    per_step = [(u["end"] - u["start"]) / u["steps"] for u in full]
    fixed, slope = fit_unit_cost(full)
    out = [
        f"units {len(units)} on {len(by_sm)} SMs ({len({u['cta'] for u in units})} CTAs), "
        f"makespan {span / 1e3:.1f} us",
        f"SMs busy {100 * busy / (len(by_sm) * span):.1f} % of the makespan",
        f"tail: the first SM idles for good at {last_ends[0] / 1e3:.1f} us, half of them at "
        f"{last_ends[len(last_ends) // 2] / 1e3:.1f} us",
        f"units with steps: {len(full)}, steps {sum(u['steps'] for u in full)}, "
        f"median {statistics.median(per_step) if per_step else float('nan'):.0f} ns a step "
        f"(unit time / steps, overheads included)",
        f"least-squares unit time = {fixed:.0f} ns + {slope:.0f} ns a step",
        f"units without steps: {len(empty)}, median {statistics.median(empty) if empty else 0:.0f} ns, "
        f"together {sum(empty) / 1e3:.1f} us of SM time ({100 * sum(empty) / busy:.1f} % of busy)",
        f"gap between a unit's end and the next unit's start on one SM: median "
        f"{statistics.median(gaps) if gaps else 0:.0f} ns, p90 {pct(gaps, 0.9):.0f} ns, "
        f"together {sum(gaps) / 1e3:.1f} us",
    ]
    return "\n".join(out)


def main(argv):
    lines = []
    if len(argv) > 1:
        for path in argv[1:]:
            with open(path, errors="replace") as f:
                lines += f.readlines()
    else:
        lines = sys.stdin.readlines()
    groups = launches(parse(lines))
    if len(groups) <= 1:
        print(summarize(groups[0] if groups else []))
        return
    for i, us in enumerate(groups):
        print(f"launch {i + 1} of {len(groups)}:")
        print(summarize(us))
        print()


if __name__ == "__main__":
    main(sys.argv)
