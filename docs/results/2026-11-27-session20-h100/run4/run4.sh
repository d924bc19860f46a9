# Fourth run of session 20 (H100): the final tree. Its kernels are f7f3b55's (session 19's final;
# check-kernels --compare-ptx: every build's PTX unchanged); the decode suite now times two read
# probes (the LSU stream and the TMA stream, the faster setting the peer targets).
# (1) the decode suite with every peer (SDPA flash, cuDNN, FA3), the anchors, the copy and both
#     read probes; (2) the mission suite with the peers.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-27-session20-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 300 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/ 2>/dev/null
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
sed -n '/### Read probes/,/^read probe\|^## All/p' $L/decode/bench-decode.md | head -16 | tee -a $R
grep -A14 "Is 1.05" $L/decode/bench-decode.md | tail -10 | tee -a $R
pack
SECONDS=0
timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/mission.log 2>&1
echo "== mission suite with peers: rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
