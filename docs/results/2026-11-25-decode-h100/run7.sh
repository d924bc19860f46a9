# Seventh decode run, with the final split rule (one CTA per SM): the decode suite on both gen-5
# paths beside the peers and the copy ceiling (the committed result), then the 2-split rows
# against 4 forced splits (the previous rule's choice) in the same session.
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run7.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 300 $X bench-all --suite decode --kernels persistent-hopper,persistent-portable --out-dir $OUT/decode > $OUT/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
grep -E "^\| B=" $OUT/decode/bench-decode.md | cut -d'|' -f2-12 | cut -c1-220 | tee -a $R
grep -E "^- persistent" $OUT/decode/bench-decode.md | tee -a $R
for s in auto 4; do
  if [ $s = auto ]; then E=X=1; else E=FLASHCORE_DECODE_SPLITS=$s; fi
  env $E timeout 90 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case b8-hq32-hkv8-sq1 --case sq4 --out-dir /tmp/ab-$s > $OUT/ab-$s.log 2>&1
  echo "splits=$s rc=$?" | tee -a $R
  grep -E "^\| B=" /tmp/ab-$s/bench-decode.md | grep -v dense | cut -d'|' -f2,5,6 | tee -a $R
done
