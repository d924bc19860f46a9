# Fifth run of session 8 (H100): run4's tree plus tile64 reading every paged tile's pages a tile
# ahead (one-page tiles and, at D >= 64, 16-row groups: lane g's group page, once for K and V)
# through load_tile_groups_async_from (async_copy.cuh, also reached by the portable and decode
# kernels' loads, whose PTX the split may have moved).
# verify --cases 1000 on tile64 and portable and the decode path with forced split counts;
# the paged suite (no peers) on the three kernels; the mission problem against 13cf0d5
# (.carry/xtask-base), alternated three times.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run5.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for k in persistent-portable tile64; do
  (timeout 300 $X verify --kernels $k --cases 1000 --seed 881 > $L/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper,persistent-portable --cases 400 --seed 882 > $L/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/p > $L/paged.log 2>&1; echo "paged rc=$?" | tee -a $R
cp /tmp/p/bench-paged.md $L/paged.md
grep -E "time / contiguous time" /tmp/p/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
for i in 1 2 3; do for b in xtask-base xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1; echo "mission $b $i rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph" /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
