# Eighth run of session 10 (H100): the wide dK/dV kernels' item, loads and step loop as shared
# helpers (key_item, load_key_tile, load_query_step, walk_steps), the change review's pair.
# (1) verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd (portable);
# (2) same-run A/B against 26dac10's binary (.carry/xtask-26da), no peers, two alternations.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L /tmp/v8
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 300 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 10801 > $L/verify-bwd.log 2>&1; echo "verify bwd rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
(timeout 300 $X reliability --only backward --kernels persistent-portable > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels persistent-portable --logs /tmp/san8 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
wait
sort /tmp/v8/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-bwd.log | tail -4 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 8,32,4096,128 --shape 2,16,8192,64"
for pass in 1 2; do for bin in xtask-26da xtask; do
  SECONDS=0
  timeout 80 .carry/$bin bench-all --pass bwd --kernels persistent-portable $S --causal both --dtypes f16 --no-peers --out-dir /tmp/p$bin$pass > $L/portable-$bin-$pass.log 2>&1; echo "$bin pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/p$bin$pass/bench-bwd.md | head -8 | cut -d'|' -f2-7 | sed "s/^/$bin-$pass |/" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs8
