# Fourth run of session 9 (H100), the final tree (e845943; kernels of 658b48a):
# (1) the decode suite with every peer in the same run (SDPA flash, cuDNN, FA3 through
#     flash-attn3-jax in its own process) and the anchors as a cross-check: the decode kernel
#     changed in session 8 (page_row, the group loader) and its suite had not been re-run;
# (2) the ncu profile gen5-portable-bwd.md asks for before any change to the portable backward:
#     one launch each of bwd_portable_dk_dv and bwd_portable_dq at (4,16,2048,128) non-causal,
#     full set, SASS with stall columns exported.
# Needs in .carry/: xtask, flash_attn3_jax-0.2.3-cp312-*.whl, einops-*.whl, anchors/.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L /tmp/rep4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
timeout 330 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | grep -v dense | cut -d'|' -f2-12 | cut -c1-220 | tee -a $R
grep -E "^- persistent|copy" $L/decode/bench-decode.md | cut -c1-250 | head -12 | tee -a $R
SECONDS=0
timeout 200 ncu --kernel-name regex:'bwd_portable_(dk_dv|dq)' --launch-skip 2 --launch-count 2 --set full --import-source no -f -o /tmp/rep4/pbwd \
  $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,128 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/b4 > $L/ncu-pbwd.log 2>&1
echo "ncu portable bwd rc=$? (${SECONDS}s)" | tee -a $R
ncu -i /tmp/rep4/pbwd.ncu-rep --page details --csv > $L/details-pbwd.csv 2>&1
ncu -i /tmp/rep4/pbwd.ncu-rep --page source --csv --print-source sass > $L/sass-pbwd.csv 2>&1
grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit Rate|Shared Memory|Block Limit Registers|Theoretical Occupancy)"' $L/details-pbwd.csv | awk -F'","' '{printf "%s = %s %s\n", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | cut -c1-160 | tee -a $R
cp /tmp/rep4/pbwd.ncu-rep $L/ 2>/dev/null
cd /tmp && tar cJf $OUT/logs.tar.xz logs4
