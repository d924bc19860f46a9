# Eighth run of session 17 (H100), the final tree (ae94247's kernels): the committed tables.
# (1) the prefill ladder with SDPA flash, cuDNN and FA3 (flash-attn3-jax) in the same run;
# (2) the mission suite, causal and not, beside cuDNN and the launch floor.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs8; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 240 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $L/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|fa3) \| [a-z]" $L/ladder/bench-all.md | cut -d"|" -f2-8 | tee -a $R
pack
SECONDS=0
timeout 90 $X bench-all --suite mission --causal both --kernels persistent-hopper --out-dir $L/mission > $L/bench-mission.log 2>&1
echo "bench mission rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|launch[^|]*) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8 | tee -a $R
pack
