# Fifth run of session 15 (H100), the tree with 176-key tiles for strided mode problems (run4):
# (1) an experiment: the same tiles for paged caches too (`wide-paged-experiment.diff`: the plan
#     takes them when FC_EXP_WIDE_PAGED is set; a binary of its own, .carry/xtask-exp), on the
#     chunked-prefill row's paged-64 case, against this tree, alternated twice;
# (2) the decode suite with SDPA flash, cuDNN and FA3 in the same run, the anchors beside them:
#     the committed table of this tree.
# Needs in .carry/: xtask (this tree), xtask-exp, flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; E=.carry/xtask-exp; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
for rep in 1 2; do for v in tree exp; do
  SECONDS=0
  if [ $v = exp ]; then FC_EXP_WIDE_PAGED=1 timeout 100 $E bench-all --suite decode --kernels persistent-hopper --no-peers --case sq128 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  else timeout 100 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case sq128 --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1; fi
  echo "chunk $v rep $rep rc=$? (${SECONDS}s): $(grep -E '^\| B=' $L/$v$rep/bench-decode.md | cut -d'|' -f5,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
SECONDS=0
timeout 360 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
grep -E "^\| b[0-9]+-hq" $L/decode/bench-decode.md | grep -E "sdpa|fa3" | cut -d'|' -f2-7 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
