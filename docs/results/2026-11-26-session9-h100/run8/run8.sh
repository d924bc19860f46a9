# Eighth run of session 9 (H100), the final tree (63f9049; kernels of 658b48a):
# (1) verify --cases 1000 on the Hopper path written to a file, to show verify's new log output
#     (count lines every 20 s; a case running past 60 s would be named);
# (2) the backward beside SDPA flash, cuDNN and efficient in the same run, FA3 from the anchors,
#     Hopper and portable kernels, the issue-14 shapes, fp16, causal and not: issue 14's standing
#     on this tree (the backward kernels' PTX has not changed since session 8).
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 9801 > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "cases,|still running|FAIL|passed, " $L/verify.log | head -12 | tee -a $R
SECONDS=0
timeout 330 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \|" /tmp/bb/bench-bwd.md | grep -E "persistent" | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs8
