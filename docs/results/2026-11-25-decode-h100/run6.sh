# Sixth decode run: split sweep on the rows whose plan gives 1-2 splits (GQA 8:1, B=32, MHA), and
# what the decode kernel does on the mission shape and the chunked-prefill row when forced
# (FLASHCORE_DECODE=force: 16-row packed tiles, K/V re-read per tile).
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run6.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in auto 1 2 3 4; do
  if [ $s = auto ]; then E=X=1; else E=FLASHCORE_DECODE_SPLITS=$s; fi
  env $E timeout 90 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case b16-hq64 --case b32-hq32 --case hkv32 --out-dir /tmp/sw-$s > $OUT/sweep-$s.log 2>&1
  echo "splits=$s rc=$?" | tee -a $R
  grep -E "^\| B=" /tmp/sw-$s/bench-decode.md | grep -v dense | cut -d'|' -f2,5,6 | tee -a $R
done
for f in off force; do
  FLASHCORE_DECODE=$f timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/mi-$f > $OUT/mission-$f.log 2>&1
  echo "mission FLASHCORE_DECODE=$f rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph" /tmp/mi-$f/bench-all.md | cut -d'|' -f2-8 | tee -a $R
done
FLASHCORE_DECODE=force timeout 90 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case sq128 --out-dir /tmp/chunk-force > $OUT/chunk-force.log 2>&1
echo "chunked prefill forced through the decode kernel rc=$?" | tee -a $R
grep -E "^\| B=" /tmp/chunk-force/bench-decode.md | cut -d'|' -f2,5,6 | tee -a $R
