"""Summarise the decode kernel's timeline (FLASHCORE_DECODE_TRACE=1 printf lines) per launch:
when the split CTAs start, pass the grid-dependency wait, have their first tile, leave the key
loop and end, and when the combine's blocks start, are released and end, in µs from the first
split CTA's start. Usage: python3 timeline.py LOG..."""
import statistics as st
import sys

for path in sys.argv[1:]:
    split, comb = {}, {}
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) == 10 and f[0] == "dtrace":
            launch, cta, sm, ns0, ns4, c1, c2, c3, c4 = map(int, f[1:])
            split.setdefault(launch, []).append((cta, sm, ns0, ns4, c1, c2, c3, c4))
        elif len(f) == 6 and f[0] == "ctrace":
            launch, blk, n0, n1, n2 = map(int, f[1:])
            comb.setdefault(launch, []).append((blk, n0, n1, n2))
    print(f"== {path}")
    for launch, rows in sorted(split.items()):
        origin = min(r[2] for r in rows)
        cols = {k: [] for k in ("start", "waited", "tile0", "loop", "end", "ghz")}
        for cta, sm, ns0, ns4, c1, c2, c3, c4 in rows:
            ghz = c4 / max(ns4 - ns0, 1)
            s = (ns0 - origin) / 1e3
            cols["start"].append(s)
            cols["waited"].append(s + c1 / ghz / 1e3)
            cols["tile0"].append(s + c2 / ghz / 1e3)
            cols["loop"].append(s + c3 / ghz / 1e3)
            cols["end"].append((ns4 - origin) / 1e3)
            cols["ghz"].append(ghz)
        print(f"launch {launch}: {len(rows)} split CTAs on {len(set(r[1] for r in rows))} SMs")
        print("  mark    min     p10     median  p90     max   (µs from the first CTA's start)")
        for k, v in cols.items():
            v = sorted(v)
            q = lambda x: v[min(len(v) - 1, int(x * len(v)))]
            print(f"  {k:6} {v[0]:7.2f} {q(0.1):7.2f} {st.median(v):7.2f} {q(0.9):7.2f} {v[-1]:7.2f}")
        # Each CTA's key loop (first tile to loop done) by the SM it ran on: the SMs' own rates.
        by_sm = sorted((sm, (c3 - c2) / (c4 / max(ns4 - ns0, 1)) / 1e3) for _, sm, ns0, ns4, _, c2, c3, c4 in rows)
        print("  key loop µs by SM (sm:µs):")
        for i in range(0, len(by_sm), 12):
            print("   " + " ".join(f"{sm:3d}:{d:6.1f}" for sm, d in by_sm[i : i + 12]))
        for blk, n0, n1, n2 in sorted(comb.get(launch, [])):
            print(f"  combine block {blk}: entry {(n0 - origin) / 1e3:7.2f} released {(n1 - origin) / 1e3:7.2f} end {(n2 - origin) / 1e3:7.2f}")
