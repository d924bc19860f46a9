# First run of session 17 (H100): where a unit's time goes in the Hopper forward. The timeline
# build (FLASHCORE_HOPPER_TRACE=1, gen5_hopper/trace.cuh) prints clock64 stamps of three CTAs'
# consumer warpgroups at each unit's boundaries, for the ladder row that trails
# ((4,16,2048,128) non-causal), the mission shape (both masks) and one key tile a CTA.
# Needs in .carry/: xtask (this tree). Run from the repo root:
#   bash docs/results/2026-11-26-session17-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs1; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
for c in "4,16,2048,128 off" "1,8,512,64 off" "1,8,512,64 on" "1,8,128,64 off"; do
  set -- $c; n=$(echo $1 | tr , _)_$2
  SECONDS=0
  FLASHCORE_HOPPER_TRACE=1 timeout 120 $X bench-all --shape $1 --causal $2 --kernels persistent-hopper --repeats 3 --max-seconds-per-shape 1 --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $1 causal $2: rc=$? (${SECONDS}s)" | tee -a $R
  grep "fwd-trace" $L/$n.log | sort -t' ' -k3,3n -k5,5n -s | head -70 | tee -a $R
  pack
done
