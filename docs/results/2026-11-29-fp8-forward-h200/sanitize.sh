#!/bin/bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on persistent-hopper's forward
# sweep at D = 128, on nvidia-h200: its e4m3 forward lines (V's transpose and the e4m3 build)
# and its e4m3-cache lines (the decode kernel) among the rest. Run from the repository root with
# the release xtask in .carry/. Writes under $OUT.
set -u
X=.carry/xtask
timeout 500 $X sanitize --kernels persistent-hopper --pass fwd --head-dims 128 --timeout 400 --logs $OUT/logs > $OUT/sanitize.txt 2>&1; echo "rc=$?" >> $OUT/sanitize.txt
tail -25 $OUT/sanitize.txt
grep -rlE "qfp8=1|fp8=" $OUT/logs 2>/dev/null | head -5
grep -rhE "qfp8=1" $OUT/logs 2>/dev/null | head -8 | cut -c1-200
