#!/usr/bin/env bash
# Makes the CUDA wheels linkable for flashcore-candle's `cuda` feature on a machine without a
# CUDA toolkit or driver (e.g. to build a test binary here and run it on the GPU machine).
#
# candle-core's `cuda` feature makes cudarc link (not load) libcuda, libnvrtc, libcublas,
# libcublasLt and libcurand, and candle-kernels links libcudart. The linker wants unversioned
# `lib*.so` files: this script adds the symlinks for the libraries the wheels ship (nvrtc,
# cudart) and, for those they do not (the driver's libcuda; cublas and curand unless their wheels
# are installed), link-only stubs in `$W/lib/stubs` (cudarc searches `$CUDA_HOME/lib/stubs`)
# carrying the real libraries' sonames. The stubs only satisfy the linker: at run time the real
# libraries must be found (the driver's libcuda.so.1, and CUDA 13 libnvrtc.so.13,
# libcublas.so.13, libcublasLt.so.13, libcurand.so.10, libcudart.so.13 on LD_LIBRARY_PATH).
# Run it before the first build with the feature: cudarc's build script records the search paths
# that exist when it runs (a stale build needs `cargo clean -p cudarc`).
set -euo pipefail

W="${CUDA_WHEELS:-$HOME/.cache/flashcore/cuda-wheels/nvidia/cu13}"
CUDARC="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10 | head -1)"
[ -d "$W/lib" ] || { echo "no wheels at $W (run: cargo xtask install-cuda)" >&2; exit 1; }
[ -d "$CUDARC" ] || { echo "cudarc 0.19.10 source not found (run: cargo fetch)" >&2; exit 1; }

for lib in nvrtc cudart; do
    real="$(ls "$W/lib/lib$lib.so."* 2>/dev/null | grep -E "lib$lib\.so\.[0-9]+$" | head -1 || true)"
    if [ -n "$real" ] && [ ! -e "$W/lib/lib$lib.so" ]; then
        ln -sf "$(basename "$real")" "$W/lib/lib$lib.so"
        echo "linked $W/lib/lib$lib.so -> $(basename "$real")"
    fi
done

mkdir -p "$W/lib/stubs"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# name  cudarc sys dir  soname
while read -r name dir soname; do
    if ls "$W/lib/lib$name.so"* >/dev/null 2>&1; then
        [ -e "$W/lib/lib$name.so" ] || ln -sf "$(basename "$(ls "$W/lib/lib$name.so."* | head -1)")" "$W/lib/lib$name.so"
        continue # the real library is installed
    fi
    grep -ohE 'pub (unsafe )?fn [A-Za-z_][A-Za-z0-9_]*' "$CUDARC"/src/"$dir"/sys/*.rs \
        | awk '{print $NF}' | sort -u | sed 's/.*/void &(void) {}/' > "$tmp/$name.c"
    gcc -shared -fPIC -Wl,-soname,"$soname" -o "$W/lib/stubs/lib$name.so" "$tmp/$name.c"
    echo "stub $W/lib/stubs/lib$name.so (soname $soname, link only)"
done <<'EOF'
cuda driver libcuda.so.1
cublas cublas libcublas.so.13
cublasLt cublaslt libcublasLt.so.13
curand curand libcurand.so.10
EOF

cat <<EOF
Build with:
  export PATH="$W/bin:\$PATH" CUDA_HOME="$W" CUDA_COMPUTE_CAP=90 CUDARC_CUDA_VERSION=13000
  cargo test --release -p flashcore-candle --features cuda --no-run
EOF
