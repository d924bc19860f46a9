# Eighth decode run: FlashAttention-3 (flash-attn3-jax 0.2.3, its own python process, jitted
# loop over rotated inputs, its split count searched) timed in the same bench-all run as the
# other peers: the decode suite and the mission shape, Hopper path.
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $OUT/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
PYTHONPATH=/tmp/fa3pkg python3 -c "import jax, flash_attn3_jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1 | tee -a $R
timeout 330 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $OUT/decode > $OUT/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
grep -E "^\| B=" $OUT/decode/bench-decode.md | grep -v dense | cut -d'|' -f2-12 | cut -c1-200 | tee -a $R
grep -iE "fa3" $OUT/decode/bench-decode.md | grep -vE "^\| B=.*persistent" | cut -c1-250 | head -20 | tee -a $R
timeout 150 $X bench-all --suite mission --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $OUT/mission > $OUT/bench-mission.log 2>&1; echo "bench mission rc=$?" | tee -a $R
grep -E "^\| 1,8,512,64 " $OUT/mission/bench-all.md | cut -d'|' -f2-9 | tee -a $R
