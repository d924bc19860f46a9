# Sixth run of session 21 (H100): the final tree, whose decode kernel copies full tiles of small
# pages (16, 32, 48, ... rows) through copy_groups (run5's FLASHCORE_DECODE_EXP=1, written out).
# Phase `check`: verify --cases 1000 through the forced decode kernel with swept split counts
# (Hopper), the forced kernel on the portable path and the default plans; sanitize with 4 forced
# splits; determinism and streams with the forced kernel; the paged suite's decode case, the
# session's starting kernels (xtask-base, b707d95) against these, alternated twice.
# Phase `suites`: the decode suite with every peer, the anchors, the copy, both probes and the
# GEMM; the mission suite with the peers.
# Needs in .carry/: xtask (this tree), xtask-base, the FA3 and einops wheels, anchors/.
# From the repo root: bash docs/results/2026-11-27-session21-h100/run6/run6.sh check|suites
PHASE=${1:-check}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; B=.carry/xtask-base; R=$OUT/run6-$PHASE.txt; L=/tmp/logs6-$PHASE; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs-$PHASE.tar.xz logs6-$PHASE; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
if [ $PHASE = check ]; then
  FORCE="FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep"
  (env $FORCE timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 2601 > $L/verify-sweep.log 2>&1; echo "verify forced sweep rc=$?" >> $L/rc.txt) &
  (env $FORCE timeout 300 $X verify --kernels persistent-portable --cases 400 --seed 2602 > $L/verify-portable.log 2>&1; echo "verify portable forced sweep rc=$?" >> $L/rc.txt) &
  (timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 2603 > $L/verify-default.log 2>&1; echo "verify default plans rc=$?" >> $L/rc.txt) &
  wait
  cat $L/rc.txt | tee -a $R
  for f in sweep portable default; do echo "verify $f: $(tail -1 $L/verify-$f.log)" | tee -a $R; done
  grep -E "FAIL" $L/verify-*.log | head -5 | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san > $L/sanitize.log 2>&1
  echo "sanitize (decode forced, 4 splits) rc=$?" | tee -a $R
  grep -hE "^\| persistent|sanitize:" $L/sanitize.log | tee -a $R
  FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 200 $X reliability --only determinism,streams --kernels persistent-hopper > $L/reliability.log 2>&1
  echo "reliability determinism,streams (decode forced, 4 splits) rc=$?" | tee -a $R
  grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
  echo "(${SECONDS}s)" | tee -a $R
  pack
  ab() { # name, binary
    timeout 100 $2 bench-all --suite paged --case decode/ --kernels persistent-hopper --no-peers --out-dir $L/p-$1 > $L/p-$1.log 2>&1
    echo "== paged suite, $1: rc=$?" | tee -a $R
    grep -E "^\| decode/.*persistent-hopper" $L/p-$1/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
    grep -E "time / contiguous time" $L/p-$1/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
    pack
  }
  ab base-1 $B; ab new-1 $X; ab base-2 $B; ab new-2 $X
  echo "(${SECONDS}s)" | tee -a $R
  exit 0
fi
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
timeout 330 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/ 2>/dev/null
grep -E "^\| B=" $L/decode/bench-decode.md | grep -v "dense" | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | head -16 | tee -a $R
sed -n '/### Read probes/,/^read probe\|^## All/p' $L/decode/bench-decode.md | head -13 | tee -a $R
grep -A14 "Is 1.05" $L/decode/bench-decode.md | tail -11 | cut -d'|' -f2,4,8,9,11,12,13,14 | tee -a $R
grep "^GEMM:" $L/decode/bench-decode.md | tee -a $R
pack
SECONDS=0
timeout 120 $X bench-all --suite mission --causal both --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/mission.log 2>&1
echo "== mission suite with peers: rc=$? (${SECONDS}s)" | tee -a $R
cp $L/mission/bench-all.md $OUT/bench-mission.md 2>/dev/null
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
