# First run of session 16 (H100): the Hopper split-KV build with the cluster combine
# (FC_HOPPER_CLUSTER_SPLIT: an item's splits are one thread-block cluster, the partials combined
# through distributed shared memory).
# (1) correctness: verify with 4 forced splits on the debug build (bounded waits, plan checks),
#     3 and 8 forced splits, the auto rule; compute-sanitizer with 4 splits;
# (2) the mission shape, graph replay: unsplit (FLASHCORE_HOPPER_SPLITS=1), split with the
#     cluster combine (=auto), split with the workspace combine (=auto, CLUSTER_SPLIT=0),
#     alternated twice.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L /tmp/v1
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs1; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) & }
run s4-debug FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_SPLITS=4 timeout 240 $X verify --kernels persistent-hopper --cases 150 --seed 1601
run s3 FLASHCORE_HOPPER_SPLITS=3 timeout 240 $X verify --kernels persistent-hopper --cases 300 --no-edge --seed 1602
run s8 FLASHCORE_HOPPER_SPLITS=8 timeout 240 $X verify --kernels persistent-hopper --cases 300 --no-edge --seed 1603
run auto FLASHCORE_HOPPER_SPLITS=auto timeout 240 $X verify --kernels persistent-hopper --cases 300 --seed 1604
run sanitize FLASHCORE_HOPPER_SPLITS=4 timeout 240 $X sanitize --pass fwd --kernels persistent-hopper
wait
sort /tmp/v1/rc.txt | tee -a $R
for n in s4-debug s3 s8 auto; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk\|trap\|error" $L/s*.log $L/auto.log | head -20 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
pack
for rep in 1 2; do for v in plain cluster global; do
  case $v in plain) E=FLASHCORE_HOPPER_SPLITS=1;; cluster) E=FLASHCORE_HOPPER_SPLITS=auto;;
    global) E="FLASHCORE_HOPPER_SPLITS=auto FLASHCORE_HOPPER_CLUSTER_SPLIT=0";; esac
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v$rep > $L/mission-$v$rep.log 2>&1
  echo "mission $v $rep rc=$?: $(grep -E '^\| 1,8,512,(64|128) \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v$rep/bench-all.md | cut -d'|' -f2,4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  pack
done; done
