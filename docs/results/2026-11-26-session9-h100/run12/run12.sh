# Twelfth run of session 9 (H100): the forward's L2 sections under causal masking, the question
# run10 answered for the backward. FLASHCORE_HOPPER_L2_SECTION_MB (new: the plan's
# FC_HOPPER_L2_SECTION_BYTES, default half of L2 = 25 MiB on the H100) = 6, 12, 25, 50, 100 on the
# five causal ladder rows past the mission shape, two passes, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run12/run12.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run12.txt; L=/tmp/logs12; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 2,16,8192,64 --shape 1,16,16384,128 --shape 8,32,4096,128"
for i in 1 2; do for mb in 25 6 12 50 100; do
  FLASHCORE_HOPPER_L2_SECTION_MB=$mb timeout 90 $X bench-all --kernels persistent-hopper $S --causal on --dtypes f16 --no-peers --out-dir /tmp/b12-$mb-$i > $L/mb$mb-$i.log 2>&1
  echo "section=${mb}MB pass $i: $(grep -E '^\| [0-9,]+ \| f16 \| yes \| persistent-hopper' /tmp/b12-$mb-$i/bench-all.md | cut -d'|' -f2,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs12
