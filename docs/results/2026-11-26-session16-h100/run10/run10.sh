# Tenth run of session 16 (H100), the final tree (5aa5141): the mission shape under the Hopper
# plan's switches now that its first loads come from L2 (the prefetch), graph replay, two
# alternations: the default; the smem epilogue; 64-key and 176-key tiles; a 3-stage ring.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run10.txt; L=/tmp/logs10; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs10; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for rep in 1 2; do for v in default smem-epilogue bn64 bn176 stages3; do
  case $v in default) E=A=1;; smem-epilogue) E=FLASHCORE_HOPPER_SMEM_EPILOGUE=1;; bn64) E=FLASHCORE_HOPPER_BLOCK_N=64;;
    bn176) E=FLASHCORE_HOPPER_BLOCK_N=176;; stages3) E=FLASHCORE_HOPPER_STAGES=3;; esac
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v$rep > $L/mission-$v$rep.log 2>&1
  echo "mission $v $rep rc=$?: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v$rep/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; pack; done
