# Fourth run of session 14 (H100): the portable atomic backward with 64-query steps at D <= 64 as
# the default on sm_90 (run3 measured them 4-7 % faster with a 24-byte spill; the build is now
# free of spills: its item loop counts in 32 bits). Every other portable build's PTX is
# unchanged (check-kernels --compare-ptx against 2996118).
# (1) in parallel: verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd,
#     persistent-portable-atomic;
# (2) the backward bench: the Hopper backward and both portable schedules with SDPA flash and cuDNN
#     in the same run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal
#     and not; twice, to show the spread between bench runs.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L /tmp/v4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic
SECONDS=0
(timeout 420 $X verify --pass bwd --kernels $A --cases 1000 --seed 14401 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
(timeout 420 $X reliability --only backward --kernels $A > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $A --logs /tmp/san4 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) &
wait
sort /tmp/v4/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for rep in 1 2; do SECONDS=0
  timeout 280 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable,$A --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb$rep > $L/bench-bwd-$rep.log 2>&1; echo "bench bwd rep $rep rc=$? (${SECONDS}s)" | tee -a $R
  mkdir -p $L/rep$rep; cp /tmp/bb$rep/bench-bwd.* $L/rep$rep/ 2>/dev/null
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | head -10 | cut -c1-200 | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable(-atomic)? \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | cut -d'|' -f2,4,5,6,8,9 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
