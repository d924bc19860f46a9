# First run of session 12 (H100): the wide dK/dV pass's query walk kept in shared-memory step
# slots (no spills at D = 64 with rotated walks or L2 sections), A/B, no peers, fp16, causal and
# not. Binaries: .carry/xtask-base = 7de7707 (session 11's final kernels), .carry/xtask = this
# tree. Atomic schedule: base; new default (D = 64: neither; above: sections + rotation); new with
# FLASHCORE_PORTABLE_BWD_ROTATE=1 (D = 64 rotated); at the two D = 64 shapes also rotation +
# sections of about a wave (16 heads at 2048 keys, 4 at 8192). Then the deterministic schedule,
# base against new. Two alternations of the atomic variants.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
S="--shape 4,16,2048,64 --shape 2,16,8192,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
A=persistent-portable-atomic; D=persistent-portable
bench() { # name binary kernels shapes...
  local name=$1 bin=$2 k=$3; shift 3; SECONDS=0
  timeout 150 $bin bench-all --pass bwd --kernels $k "$@" --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$name > $L/bench-$name.log 2>&1
  echo "$name rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $k \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$name/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
}
for pass in 1 2; do
  bench base-$pass .carry/xtask-base $A $S
  bench new-$pass .carry/xtask $A $S
  FLASHCORE_PORTABLE_BWD_ROTATE=1 bench rot-$pass .carry/xtask $A --shape 4,16,2048,64 --shape 2,16,8192,64
  FLASHCORE_PORTABLE_BWD_ROTATE=1 FLASHCORE_PORTABLE_BWD_SECTION_HEADS=16 bench rotsec-2048-$pass .carry/xtask $A --shape 4,16,2048,64
  FLASHCORE_PORTABLE_BWD_ROTATE=1 FLASHCORE_PORTABLE_BWD_SECTION_HEADS=4 bench rotsec-8192-$pass .carry/xtask $A --shape 2,16,8192,64
done
bench det-base .carry/xtask-base $D $S
bench det-new .carry/xtask $D $S
cd /tmp && tar cJf $OUT/logs.tar.xz logs1
