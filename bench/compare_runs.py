#!/usr/bin/env python3
"""Flashcore's time in one bench-all JSON against another of the same suite, row by row.

    python3 bench/compare_runs.py BASE.json OTHER.json [--label OTHER]

For `bench-all --batch-invariant` against a run without it (the mode's cost), or any A/B of
two builds. Prints one markdown row per flashcore row found in both: the base time, the other
time, their ratio (other / base), and the best peer of the base run with the other time's
ratio to it (>1 means flashcore is faster). Dense suites key rows by shape, mode suites by case.
Exits 1 when no row is found in both.
"""
import json
import sys


def rows(report):
    """(key, implementation, source, us) of every timed row."""
    out = []
    for r in report.get("rows", []):
        timed = r.get("outcome", {})
        if timed.get("kind") != "timed":
            continue
        if "case" in r:
            key = r["case"]
        else:
            s = r["shape"]
            key = "{},{},{},{} {} {}".format(
                s["batch"], s["heads"], s["seq"], s["head_dim"], s["dtype"],
                "causal" if s["causal"] else "non-causal")
        out.append((key, r["implementation"], r["source"], timed["us"]))
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    label = "other"
    if "--label" in argv:
        label = argv[argv.index("--label") + 1]
    base = json.load(open(argv[1]))
    other = json.load(open(argv[2]))
    base_rows = rows(base)
    other_rows = {(k, i): us for k, i, src, us in rows(other) if src == "flashcore"}
    peers = {}
    for k, impl, src, us in base_rows:
        if src == "peer":
            if k not in peers or us < peers[k][1]:
                peers[k] = (impl, us)
    print(f"| case | kernel | base us | {label} us | {label} / base | best peer (base run) | peer / {label} |")
    print("|---|---|---:|---:|---:|---|---:|")
    worst = 0.0
    found = 0
    for k, impl, src, us in base_rows:
        if src != "flashcore" or (k, impl) not in other_rows:
            continue
        o = other_rows[(k, impl)]
        found += 1
        worst = max(worst, o / us)
        peer = peers.get(k)
        peer_cells = f"{peer[0]} {peer[1]:.2f} | {peer[1] / o:.3f}" if peer else "- | -"
        print(f"| {k} | {impl} | {us:.2f} | {o:.2f} | {o / us:.3f} | {peer_cells} |")
    print(f"\n{found} rows; largest {label} / base: {worst:.3f}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
