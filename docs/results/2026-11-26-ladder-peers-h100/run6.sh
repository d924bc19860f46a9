# Sixth run of session 18 (H100), the final tree (ecfd9dc's kernels; every build's PTX is run5's,
# check-kernels --compare-ptx): the prefill ladder with SDPA flash, cuDNN and FA3 (flash-attn3-jax)
# in the same run; its first rows are the mission shape under graph replay.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session18-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs6; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 175 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $L/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|fa3|launch[^|]*) \| [a-z]" $L/ladder/bench-all.md | cut -d"|" -f2-8 | tee -a $R
pack
