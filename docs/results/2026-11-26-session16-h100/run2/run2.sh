# Second run of session 16 (H100): why the cluster combine was slower (run1: 14.5 us against
# 7.5 unsplit at the mission shape). Mission shape, graph replay: 4 splits (clusters of 4) with
# and without programmatic launch, 2 and 3 splits, the unsplit plan; and (1,8,128,64), one key
# tile per item, unsplit: the floor a split into one-tile units works against.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for v in plain s4 s4-nopdl s2 s3 s2-global; do
  case $v in plain) E=FLASHCORE_HOPPER_SPLITS=1;; s4) E=FLASHCORE_HOPPER_SPLITS=4;;
    s4-nopdl) E="FLASHCORE_HOPPER_SPLITS=4 FLASHCORE_HOPPER_PDL=0";; s2) E=FLASHCORE_HOPPER_SPLITS=2;;
    s3) E=FLASHCORE_HOPPER_SPLITS=3;; s2-global) E="FLASHCORE_HOPPER_SPLITS=2 FLASHCORE_HOPPER_CLUSTER_SPLIT=0";; esac
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v > $L/mission-$v.log 2>&1
  echo "mission $v rc=$?: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v/bench-all.md | cut -d'|' -f2,4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done
timeout 60 $X bench-all --shape 1,8,128,64 --dtypes f16 --kernels persistent-hopper --no-peers --out-dir $L/s128 > $L/s128.log 2>&1
echo "shape 1,8,128,64 rc=$?:"; grep -E 'persistent-hopper|floor' $L/s128/bench-all.md | cut -c1-160 | tee -a $R
pack
