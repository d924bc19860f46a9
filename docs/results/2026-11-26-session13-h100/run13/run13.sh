# Thirteenth run of session 13 (H100). This tree: the Hopper backward's producer loads a unit's
# first Q/dO block before it waits for the consumers to release K and V (its ring stage is free a
# step earlier), so the next unit does not wait for that block (run10's timeline: ~1 us a unit).
# .carry/xtask-base = bee83fc (run12's binary).
# (1) in parallel: verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd,
#     all on persistent-hopper;
# (2) bench, no peers, base against this tree, alternated twice, causal and not;
# (3) the backward bench with peers (FA3 from the anchors) on this tree, once.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run13/run13.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; XB=$PWD/.carry/xtask-base; R=$OUT/run13.txt; L=/tmp/logs13; mkdir -p $L /tmp/v13
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(timeout 420 $X verify --pass bwd --kernels $H --cases 1000 --seed 14301 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
(timeout 420 $X reliability --only backward --kernels $H > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $H --logs /tmp/san13 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
wait
sort /tmp/v13/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in base new; do SECONDS=0
  B=$X; [ $v = base ] && B=$XB
  timeout 200 $B bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
SECONDS=0
timeout 200 $X bench-all --pass bwd --kernels $H --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | head -10 | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs13
