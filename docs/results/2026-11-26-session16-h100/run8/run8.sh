# Eighth run of session 16 (H100), the final kernels (2883df6: the L2 prefetch before the wait): the
# committed tables, every peer in the same run.
# (1) the decode suite with SDPA flash, cuDNN and FA3, the anchors beside them (contiguous and
#     paged rows on the final kernels, PDL signalled after the wait);
# (2) the mission suite, causal and not, both gen-5 paths, every peer and the launch floor;
# (3) the prefill ladder with SDPA flash, cuDNN and FA3 (the final Hopper PDL plan).
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs8; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 300 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
pack
SECONDS=0
timeout 90 $X bench-all --suite mission --causal both --kernels persistent-hopper,persistent-portable --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/bench-mission.log 2>&1
echo "bench mission rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
SECONDS=0
timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $L/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|fa3[a-z-]*) \| [a-z]" $L/ladder/bench-all.md | cut -d"|" -f2-8 | tee -a $R
grep -iE "best peer|×" $L/ladder/bench-all.md | head -30 | tee -a $R
pack
# (4) correctness of the final plans: verify --cases 500 with the default plan and through the
#     forced decode kernel with swept split counts (Hopper path).
SECONDS=0
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 200 $X verify --kernels persistent-hopper --cases 500 --seed 1632 > $L/sweep.log 2>&1; echo "sweep rc=$?" > $L/sweep.rc) &
timeout 200 $X verify --kernels persistent-hopper --cases 500 --seed 1631 > $L/default.log 2>&1; echo "default rc=$?" | tee -a $R
wait; cat $L/sweep.rc | tee -a $R
for n in default sweep; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1) (${SECONDS}s)" | tee -a $R; done
pack
