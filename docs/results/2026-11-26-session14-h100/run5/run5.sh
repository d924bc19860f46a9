# Fifth run of session 14 (H100), on the session's final tree: the backward's correctness gate on
# the two backward kernels run4 did not cover (their PTX is unchanged since sessions 12-13, re-run
# so that all three stand on one tree), and a small A/B on the mission shape.
# (1) in parallel: verify --pass bwd --cases 1000 on persistent-hopper and persistent-portable,
#     reliability --only backward and sanitize --pass bwd on both;
# (2) (1,8,512,64) under graph replay, causal and not: the default against ping-pong off and
#     against one Q buffer, alternated twice, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L /tmp/v5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
for k in persistent-hopper persistent-portable; do
  (timeout 480 $X verify --pass bwd --kernels $k --cases 1000 --seed 14501 > $L/verify-$k.log 2>&1; echo "verify $k rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
done
(timeout 480 $X reliability --only backward --kernels persistent-hopper,persistent-portable > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 480 $X sanitize --pass bwd --kernels persistent-hopper,persistent-portable --logs /tmp/san5 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
wait
sort /tmp/v5/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-*.log | tail -8 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
v() { # name, env...
  local name=$1; shift
  env "$@" timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/b5-$name > $L/bench-$name.log 2>&1
  echo "$name (rc=$?): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]' /tmp/b5-$name/bench-all.md | cut -d'|' -f2,4,6,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
}
for i in 1 2; do
  v default-$i A=1
  v pingpong-off-$i FLASHCORE_HOPPER_PINGPONG=0
  v one-q-$i FLASHCORE_HOPPER_Q_STAGES=1
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
