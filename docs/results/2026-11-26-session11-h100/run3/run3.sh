# Third run of session 11 (H100): where the atomic dK/dV kernel's 6.0 M shared-load bank conflicts
# at D = 128 come from (run2; the deterministic kernel has none). ncu source counters, one launch at
# (4,16,2048,128) non-causal f16, SASS lines with excess shared wavefronts.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 200 ncu -k regex:dk_dv_wide -c 1 --section SourceCounters --section WarpStateStats --section InstructionStats -o $L/dkdv128 $X bench-all --pass bwd --kernels persistent-portable-atomic --shape 4,16,2048,128 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu.log 2>&1; echo "ncu rc=$? (${SECONDS}s)" | tee -a $R
ncu -i $L/dkdv128.ncu-rep --page source --csv --print-source sass > $L/sass.csv 2>&1; echo "source rc=$?" | tee -a $R
head -2 $L/sass.csv | cut -c1-600 | tee -a $R
python3 - "$L/sass.csv" <<'PY' | tee -a $R
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
for i, r in enumerate(rows):
    if any('Source' == c for c in r) or any('Excessive' in c for c in r):
        hdr = i; break
if hdr is None:
    print("no header found"); sys.exit()
h = rows[hdr]
print("columns:", [c for c in h][:40])
ex = [j for j, c in enumerate(h) if 'Excessive' in c and 'Shared' in c]
src = [j for j, c in enumerate(h) if c == 'Source'][0]
def num(x):
    try: return float(x.replace(',', ''))
    except: return 0.0
hits = []
for k, r in enumerate(rows[hdr+1:]):
    if len(r) <= max(ex + [src]): continue
    v = sum(num(r[j]) for j in ex)
    if v > 0: hits.append((v, k, r[src]))
hits.sort(reverse=True)
print("lines with excess shared wavefronts:", len(hits), "total", sum(h[0] for h in hits))
for v, k, s in hits[:40]: print(int(v), k, s)
PY
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
