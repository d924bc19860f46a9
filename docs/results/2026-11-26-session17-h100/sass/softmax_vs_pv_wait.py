#!/usr/bin/env python3
"""Where ptxas puts the key loop's softmax against the wait for PV_{j-1} (session 17).

For every Hopper forward build in a `check-kernels --dump-ptx DIR` directory: assemble the PTX
with ptxas (the pip toolkit's, `cargo xtask install-cuda`), disassemble with nvdisasm (no pip
toolkit ships it for CUDA 13.0: `pip download --no-deps nvidia-cuda-nvdisasm`, 13.5 reads
sm_90a cubins of 13.0), and count the MUFU.EX2 / FMNMX between the loop's
`WARPGROUP.DEPBAR.LE gsb0, 0x1` (S_j ready) and the next DEPBAR (PV_{j-1} done). 0 MUFU there
means the softmax was scheduled after the PV wait, not under it.

usage: softmax_vs_pv_wait.py PTX_DIR PTXAS NVDISASM
"""
import glob, os, re, subprocess, sys, tempfile

ptx_dir, ptxas, nvdisasm = sys.argv[1:4]
for f in sorted(glob.glob(os.path.join(ptx_dir, "attention_persistent_hopper-*.ptx"))):
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run([ptxas, "-arch=sm_90a", "-O3", f, "-o", cubin], check=True, capture_output=True)
        sass = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True, text=True).stdout
    lines = [l for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,6}\*/", l)]
    out = []
    for a, l in enumerate(lines):
        if "DEPBAR.LE gsb0, 0x1" not in l:
            continue
        b = next((i for i in range(a + 1, len(lines)) if "DEPBAR" in lines[i]), len(lines))
        seg = lines[a:b]
        out.append(f"MUFU.EX2 {sum('MUFU.EX2' in x for x in seg)}, FMNMX {sum('FMNMX' in x for x in seg)}")
    print(os.path.basename(f)[len("attention_persistent_hopper-sm_90a-"):][:90], "|", "; ".join(out))
