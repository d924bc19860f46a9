#!/usr/bin/env python3
"""Summarise `ncu --page source --csv --print-source sass`: where the warps of one kernel wait.

Prints the stall-reason totals, the opcodes by stall samples, and the top instructions with their
three largest reasons, each with its address so it can be found in the kernel's SASS."""
import csv, sys, collections

rows = list(csv.reader(open(sys.argv[1], newline="")))
# The header is the first row that names the source column.
h = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
head = [c.strip() for c in rows[h]]
data = [r for r in rows[h + 1:] if len(r) == len(head)]
col = {n: i for i, n in enumerate(head)}
def num(r, n):
    try:
        return float(r[col[n]].replace(",", ""))
    except (KeyError, ValueError):
        return 0.0
total = next((n for n in head if n.startswith("Warp Stall Sampling (All")), None)
reasons = [n for n in head if n.lower().startswith("stall_") or n.startswith("smsp__pcsamp_warps_issue_stalled")]
if total is None:
    print("columns:", head)
    sys.exit(1)
src = col["Source"]
addr = col.get("Address", None)
all_samples = sum(num(r, total) for r in data)
print(f"{len(data)} instructions, {all_samples:.0f} stall samples ({total})")
tot = collections.Counter({n: sum(num(r, n) for r in data) for n in reasons})
print("\nreasons (share of the reason columns' sum):")
s = sum(tot.values()) or 1
for n, v in tot.most_common(14):
    print(f"  {n:60s} {v:10.0f} {100 * v / s:5.1f}%")
ops = collections.Counter()
for r in data:
    ops[r[src].split()[0] if r[src].split() else "?"] += num(r, total)
print("\nopcodes by samples:")
for o, v in ops.most_common(16):
    print(f"  {o:28s} {v:10.0f} {100 * v / all_samples:5.1f}%")
print("\ntop instructions:")
for r in sorted(data, key=lambda r: -num(r, total))[:45]:
    top = sorted(((num(r, n), n) for n in reasons), reverse=True)[:3]
    why = ", ".join(f"{n.replace('smsp__pcsamp_warps_issue_stalled_', '')} {v:.0f}" for v, n in top if v > 0)
    a = r[addr] if addr is not None else ""
    print(f"  {a:>6s} {num(r, total):8.0f} {100 * num(r, total) / all_samples:5.1f}%  {r[src][:70]:70s} {why}")
