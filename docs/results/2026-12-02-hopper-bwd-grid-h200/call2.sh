#!/usr/bin/env bash
# Call 2: the varlen rows of bwd-modes on the plan with unequal varlen units on one CTA each
# (unequal_units in hopper_bwd.rs), and the unit order's knobs on them:
# - the plan as built;
# - FLASHCORE_HOPPER_BWD_SECTION_UNITS = 66, 198 and 1048576 (half a wave, 1.5 waves, and every
#   head in one section: key-block major over all heads);
# - FLASHCORE_HOPPER_BWD_QUERY_ROWS=64 (the D = 64 rows take 128 by default).
# The knobs apply to the dense twins too, so the variants compare by the mode's µs.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-grid-h200/call2.sh
# Outputs in $OUT/call2: summary.txt, modes-*.md (the json in the logs), logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call2; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
for v in plan s66 s198 sall rows64 plan2; do
  case $v in
    plan|plan2) E=;;
    s66) E=FLASHCORE_HOPPER_BWD_SECTION_UNITS=66;;
    s198) E=FLASHCORE_HOPPER_BWD_SECTION_UNITS=198;;
    sall) E=FLASHCORE_HOPPER_BWD_SECTION_UNITS=1048576;;
    rows64) E=FLASHCORE_HOPPER_BWD_QUERY_ROWS=64;;
  esac
  C="--case varlen"; [ $v = rows64 ] && C="--case d64 varlen"
  env $E timeout 100 $X bench-all --pass bwd --suite bwd-modes --kernels $H $C --repeats 9 --out-dir $L/$v > $L/$v.log 2>&1
  echo "bwd-modes $v ($E) rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/$v/bench-bwd-modes.md $O/modes-$v.md 2>/dev/null;
done
(cd /tmp && tar cJf $O/logs.tar.xz logs-call2)
for v in plan s66 s198 sall rows64 plan2; do echo "== $v"; grep -E "^\| varlen" $O/modes-$v.md 2>/dev/null | cut -d'|' -f3,6-8; done | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
