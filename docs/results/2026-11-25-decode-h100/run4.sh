# Fourth decode run, with the split rule tuned on run3 (one CTA per SM first; more only while a
# split keeps 32 key tiles): the decode suite on both gen-5 paths beside the peers and the copy
# ceiling; compute-sanitizer over the forced decode kernel with 4 splits; the verify sweep through
# the decode kernel on the portable path with the new rule.
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 280 $X bench-all --suite decode --kernels persistent-hopper,persistent-portable --out-dir $OUT/decode > $OUT/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
grep -E "^\| B=" $OUT/decode/bench-decode.md | cut -d'|' -f2-12 | cut -c1-220 | tee -a $R
FLASHCORE_DECODE=force timeout 60 $X verify --kernels persistent-portable --cases 200 > $OUT/verify-portable-force-auto.log 2>&1; echo "verify portable force rc=$? $(grep -h 'passed, ' $OUT/verify-portable-force-auto.log | tail -1)" | tee -a $R
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 220 $X sanitize --kernels persistent-hopper --logs $OUT/sanitize > $OUT/sanitize.log 2>&1; echo "sanitize (decode forced, 4 splits) rc=$?" | tee -a $R
tail -12 $OUT/sanitize.log | tee -a $R
