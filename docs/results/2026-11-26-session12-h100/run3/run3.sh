# Third run of session 12 (H100). .carry/xtask-base = 7de7707 (HEAD, session 11's final kernels),
# .carry/xtask-c214880 = c214880 (before launch 1 read O and dO in 16-byte chunks).
# (1) The launch-1 rewrite, same run: ncu kernel time of bwd_portable_dot_do_o (one launch each)
#     and the deterministic schedule's bwd time (bench, no peers), c214880 and 7de7707 alternated
#     twice; fp16 non-causal (causal does not touch launch 1) at three ladder shapes.
# (2) Where the atomic dK/dV launch at (2,16,8192,64) non-causal spends its stalls: ncu source
#     counters (SASS lines with stall samples), one launch.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128"
for pass in 1 2; do for rev in c214880 base; do
  X=.carry/xtask-$rev; SECONDS=0
  timeout 100 $X bench-all --pass bwd --kernels persistent-portable $S --causal off --dtypes f16 --no-peers --out-dir /tmp/b-$rev-$pass > $L/bench-$rev-$pass.log 2>&1
  echo "det $rev pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| no \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$rev-$pass/bench-bwd.md | cut -d'|' -f2,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  for s in 4,16,2048,64 2,16,8192,64 4,16,2048,128; do
    timeout 60 ncu -k regex:dot_do_o -c 1 --metrics gpu__time_duration.sum $X bench-all --pass bwd --kernels persistent-portable --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-dot-$rev-$pass-$s.log 2>&1
    echo "dot_do_o $rev pass $pass $s: $(grep gpu__time_duration $L/ncu-dot-$rev-$pass-$s.log | sed 's/  */ /g')" | tee -a $R
  done
done; done
X=.carry/xtask-base; SECONDS=0
timeout 200 ncu -k regex:dk_dv_wide -c 1 --section SourceCounters --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis -o $L/dkdv64 $X bench-all --pass bwd --kernels persistent-portable-atomic --shape 2,16,8192,64 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-src.log 2>&1; echo "ncu source rc=$? (${SECONDS}s)" | tee -a $R
ncu -i $L/dkdv64.ncu-rep --page source --csv --print-source sass > $L/sass.csv 2>&1; echo "sass csv rc=$?" | tee -a $R
ncu -i $L/dkdv64.ncu-rep --page details --csv > $L/details.csv 2>&1
python3 - "$L/sass.csv" <<'PY' | tee -a $R
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
h = rows[hi]; data = [r for r in rows[hi + 1:] if len(r) == len(h)]
def num(x):
    try: return float(x.replace(',', ''))
    except ValueError: return 0.0
stall = [c for c in h if c.startswith('stall_') and 'Not Issued' not in c]
tot = {c: sum(num(r[h.index(c)]) for r in data) for c in stall}
allc = h.index('Warp Stall Sampling (All Samples)'); src = h.index('Source')
total = sum(num(r[allc]) for r in data)
print(f"samples {total:.0f}; by reason (% of samples):")
print("  " + ", ".join(f"{c[6:]} {100 * v / total:.1f}" for c, v in sorted(tot.items(), key=lambda x: -x[1]) if v > 0))
kinds = {}
for r in data:
    op = r[src].split()[0] if r[src].split() else '?'
    if op.startswith('@'): op = r[src].split()[1]
    op = op.split('.')[0]
    kinds[op] = kinds.get(op, 0) + num(r[allc])
print("by opcode (% of samples): " + ", ".join(f"{k} {100 * v / total:.1f}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])[:14]))
top = sorted(data, key=lambda r: -num(r[allc]))[:25]
for r in top: print(f"{100 * num(r[allc]) / total:5.2f}% {r[0]} {r[src][:70]}")
PY
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
