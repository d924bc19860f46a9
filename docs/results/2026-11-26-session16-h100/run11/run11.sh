# Eleventh run of session 16 (H100), the final tree (the smem epilogue for one-round D = 64
# problems, on top of the prefetch):
# (1) correctness: verify --cases 1000 with the default plans (Hopper path; small D = 64 problems
#     take the smem epilogue with the prefetch); reliability (determinism, streams, oob) and
#     sanitize with the default plans;
# (2) the mission suite with every peer and the launch floor.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels.
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run11/run11.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run11.txt; L=/tmp/logs11; mkdir -p $L /tmp/v11
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs11; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v11/rc.txt) & }
run default-hopper timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 1651
run reliability timeout 300 $X reliability --only determinism,streams,oob --kernels persistent-hopper
run sanitize timeout 300 $X sanitize --pass fwd --kernels persistent-hopper
wait
sort /tmp/v11/rc.txt | tee -a $R
echo "default-hopper: $(grep -h 'passed, ' $L/default-hopper.log | tail -1)" | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/default-hopper.log | head -10 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
pack
SECONDS=0
timeout 90 $X bench-all --suite mission --causal both --kernels persistent-hopper,persistent-portable --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/bench-mission.log 2>&1
echo "bench mission rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
