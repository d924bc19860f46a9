# Second run of session 12 (H100): the atomic schedule at head_dim <= 64 with one barrier a step
# (two dSᵀ tiles; dQ = dS·K after the step's only barrier). Binaries: .carry/xtask-base = 7de7707,
# .carry/xtask = this tree (every other portable build's PTX is identical to 7de7707's:
# check-kernels --compare-ptx). (1) A/B at the two D = 64 ladder shapes, base and new alternated
# twice, no peers; (2) the new build beside SDPA flash and cuDNN at those shapes; (3) in parallel:
# verify --pass bwd --cases 1000, reliability --only backward and sanitize --pass bwd on the atomic
# schedule. fp16, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L /tmp/v2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic; S="--shape 4,16,2048,64 --shape 2,16,8192,64"
bench() { # name binary
  local name=$1 bin=$2; SECONDS=0
  timeout 100 $bin bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$name > $L/bench-$name.log 2>&1
  echo "$name rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$name/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
}
for pass in 1 2; do bench base-$pass .carry/xtask-base; bench new-$pass $X; done
SECONDS=0
timeout 120 $X bench-all --pass bwd --kernels $A $S --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bp > $L/bench-peers.log 2>&1; echo "new with peers rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bp/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $A \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bp/bench-bwd.md | cut -c1-200 | tee -a $R
SECONDS=0
(timeout 300 $X verify --pass bwd --kernels $A --cases 1000 --seed 12201 > $L/verify-atomic.log 2>&1; echo "verify $A rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) &
(timeout 300 $X reliability --only backward --kernels $A > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels $A --logs /tmp/san2 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) &
wait
sort /tmp/v2/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-atomic.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
