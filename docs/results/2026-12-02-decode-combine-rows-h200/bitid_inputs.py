#!/usr/bin/env python3
"""Inputs for bitid.sh: decode problems written as .npy into DIR (argument).

Per head dim D (arguments after DIR; default 64, 128, 256, 512): Q for one and four query rows (B = 3, Hq = 32), a contiguous
K/V cache [3, 1024, 8, D] with seqused_k (1000, 37, 777), the same cache as pages of 64 and of
16 rows behind shuffled block tables, and an e4m3 copy (bytes with exponents 5-8: 0.25-3.75 in
magnitude) with per-KV-head descales.
"""
import sys
import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(20261202)
B, HQ, HKV, CAP = 3, 32, 8, 1024
np.save(f"{out}/seqused.npy", np.array([1000, 37, 777], dtype=np.int32))
for d in [int(a) for a in sys.argv[2:]] or (64, 128, 256, 512):
    for sq in (1, 4):
        np.save(f"{out}/q-d{d}-sq{sq}.npy", rng.standard_normal((B, sq, HQ, d)).astype(np.float16))
    orders = {}
    for page in (64, 16):
        per = CAP // page
        orders[page] = rng.permutation(B * per)  # block j of sequence b lives in slot order[b*per+j]
        np.save(f"{out}/bt-d{d}-p{page}.npy", orders[page].reshape(B, per).astype(np.int32))
    for name in ("k", "v"):
        cache = rng.standard_normal((B, CAP, HKV, d)).astype(np.float16)
        np.save(f"{out}/{name}-d{d}.npy", cache)
        for page, order in orders.items():
            per = CAP // page
            pool = np.empty((B * per, page, HKV, d), dtype=np.float16)
            for b in range(B):
                for j in range(per):
                    pool[order[b * per + j]] = cache[b, j * page:(j + 1) * page]
            np.save(f"{out}/{name}-d{d}-p{page}.npy", pool)
        sign = rng.integers(0, 2, cache.shape, dtype=np.uint8) << 7
        exp = rng.integers(5, 9, cache.shape, dtype=np.uint8) << 3
        man = rng.integers(0, 8, cache.shape, dtype=np.uint8)
        np.save(f"{out}/{name}-d{d}-e4m3.npy", sign | exp | man)
        np.save(f"{out}/{name}desc-d{d}.npy", (0.05 + 0.1 * rng.random((B, HKV))).astype(np.float32))
