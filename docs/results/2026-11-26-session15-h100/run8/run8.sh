# Eighth run of session 15 (H100), the same tree as run7 (programmatic dependent launch for the
# Hopper forward and the decode kernels):
# (1) the decode rows that split (long sequence, B = 8 decode, speculative), PDL on against
#     FLASHCORE_DECODE_PDL=0, alternated twice, no peers (run7 timed out before this);
# (2) the decode suite with SDPA flash, cuDNN and FA3 in the same run, the anchors beside them;
# (3) the mission suite with every peer and the launch floor.
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs8; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
for rep in 1 2; do for v in on off; do
  E=A=1; [ $v = off ] && E=FLASHCORE_DECODE_PDL=0
  SECONDS=0
  env $E timeout 80 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case sk32768 --case b8-hq32-hkv8-sq1-sk8192 --case sq4 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "bench PDL $v rep $rep rc=$? (${SECONDS}s)" | tee -a $R
done; done
echo "| row | storage | on1 | off1 | on2 | off2 |" | tee -a $R
paste -d'|' <(grep -E "^\| B=" $L/on1/bench-decode.md | cut -d'|' -f2,5,6) \
  <(grep -E "^\| B=" $L/off1/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/on2/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/off2/bench-decode.md | cut -d'|' -f6) | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//' | cut -c1-200 | tee -a $R
pack
SECONDS=0
timeout 240 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
grep -E "^\| b[0-9]+-hq" $L/decode/bench-decode.md | grep -E "sdpa|fa3" | cut -d'|' -f2-7 | tee -a $R
pack
SECONDS=0
timeout 90 $X bench-all --suite mission --causal both --kernels persistent-hopper,persistent-portable --fa3-path /tmp/fa3pkg --out-dir $L/mission > $L/bench-mission.log 2>&1
echo "bench mission rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
pack
