# Run right after run2.sh on the same (still warm) machine: its SASS CSVs were more files than a
# run brings back, so they come back as one archive (sass.tar.xz: per-instruction executed counts
# and stall samples, plus the raw metric pages).
cd /tmp && ls *.ncu-rep && for n in persistent-hopper-varlen-uniform persistent-hopper-dense-eq persistent-portable-varlen-uniform persistent-portable-dense-eq; do ncu -i /tmp/$n.ncu-rep --page source --csv --print-source sass > /tmp/sass-$n.csv 2>&1; ncu -i /tmp/$n.ncu-rep --page raw --csv > /tmp/raw-$n.csv 2>&1; done; tar cJf $OUT/sass.tar.xz sass-*.csv raw-*.csv; ls -la $OUT
