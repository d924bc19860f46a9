#!/usr/bin/env python3
"""Checks `flashcore run`'s inference modes end to end against a float64 numpy reference.

Usage (on a machine with a GPU; needs only numpy):
  python3 bench/cli_modes_check.py target/release/flashcore [--kernel auto] [--dtype f16] [--seed 0]

Three cases, each written as .npy files and run through the binary (docs/MODES.md is the
contract; the reference below follows it):
  varlen   --layout thd, packed Q/K/V with cu_seqlens_q/k, GQA, causal (rows with no visible key
           included: O = 0, LSE = +inf), LSE as [heads_q, total_q];
  paged    a paged KV cache (shuffled block table, spare blocks, NaN in every page row that is not
           read) with seqused_k and appended k_new/v_new, causal; the caches written back by
           --k-cache-out/--v-cache-out must hold the new rows at seqused_k and nothing else changed;
  window   dense BHSD with window_left/window_right, softcap and per-(batch, head) ALiBi slopes.

Judged with the rule of flashcore-oracle (docs/ORACLE.md), separately for O and for LSE:
  max|out - ref64| <= 2 * max|lowp - ref64| + floor
where lowp is the oracle's low-precision yardstick (scores accumulated in f32, softcap and ALiBi
in f32, one rounding to the dtype; P rounded; O accumulated in f32 and rounded; LSE in f32) and
floor is one ulp at 0.3 (2^-12 for f16, 2^-9 for bf16). Rows with no visible key must be exactly
O = 0, LSE = +inf; a NaN where the reference has none fails. Prints max abs errors per case and
PASS/FAIL; exits 1 if any case fails, 2 on bad usage.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

FLOOR = {"f16": 2.0 ** -12, "bf16": 2.0 ** -9}


def round_to(x, dtype):
    """Rounds float32 values to the kernel dtype (nearest even) and back to float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out).astype(np.float32)


def visible(lq, lk, causal, wl, wr):
    """[lq, lk] mask, bottom-right aligned (docs/MODES.md)."""
    off = lk - lq
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    m = np.ones((lq, lk), dtype=bool)
    if wl is not None:
        m &= j >= i + off - wl
    if wr is not None:
        m &= j <= i + off + wr
    if causal:
        m &= j <= i + off
    return m, np.abs(i + off - j)


def attend(q, k, v, scale, causal, wl, wr, softcap, slopes, low=None):
    """One sequence: q [lq, hq, d], k/v [lk, hkv, d] -> O [lq, hq, d], LSE [hq, lq].

    low=None: float64 reference. low="f16"/"bf16": the oracle's low-precision yardstick.
    """
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    mask, dist = visible(lq, lk, causal, wl, wr)
    ft = np.float64 if low is None else np.float32
    o = np.zeros((lq, hq, d), dtype=np.float64)
    lse = np.full((hq, lq), np.inf, dtype=np.float64)
    for h in range(hq):
        qh = q[:, h, :].astype(ft)
        kh = k[:, h // group, :].astype(ft)
        vh = v[:, h // group, :].astype(ft)
        s = (qh @ kh.T).astype(ft) * ft(scale)
        if softcap is not None:
            s = ft(softcap) * np.tanh(s / ft(softcap))
        if slopes is not None:
            s = s - ft(slopes[h]) * dist.astype(ft)
        if low is not None:
            s = round_to(s, low)
        s = np.where(mask, s, -np.inf).astype(ft)
        for r in range(lq):
            if not mask[r].any():
                continue  # no visible key: O = 0, LSE = +inf
            mx = s[r].max()
            e = np.exp(s[r] - mx)
            tot = e.sum(dtype=ft)
            p = e / tot
            if low is not None:
                p = round_to(p, low)
                o[r, h] = round_to((p @ vh).astype(np.float32), low)
            else:
                o[r, h] = p @ vh
            lse[h, r] = mx + np.log(tot)
    return o, lse


def judge(name, o, lse, o_ref, lse_ref, o_low, lse_low, dtype):
    """The oracle's rule; returns True on pass and prints one line."""
    o, lse = o.astype(np.float64), lse.astype(np.float64)
    problems = []

    def err(a, b):
        both = np.isfinite(a) & np.isfinite(b)
        return float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0

    nan_bad = int((np.isnan(o) & ~np.isnan(o_ref)).sum() + (np.isnan(lse) & ~np.isnan(lse_ref)).sum())
    if nan_bad:
        problems.append(f"{nan_bad} NaN where the reference has none")
    empty = np.isinf(lse_ref) & (lse_ref > 0)  # [heads, rows] with no visible key
    if empty.any():
        if not (np.isinf(lse[empty]) & (lse[empty] > 0)).all():
            problems.append("LSE of a row with no visible key is not +inf")
        o_empty = np.moveaxis(o, 1, 0)[empty]  # [n, d] from o [rows, heads, d]
        if (o_empty != 0).any():
            problems.append("O of a row with no visible key is not 0")
    o_err, lse_err = err(o, o_ref), err(lse, lse_ref)
    o_allowed = 2 * err(o_low, o_ref) + FLOOR[dtype]
    lse_allowed = 2 * err(lse_low, lse_ref) + FLOOR[dtype]
    if o_err > o_allowed:
        problems.append(f"O error {o_err:.3e} > allowed {o_allowed:.3e}")
    if lse_err > lse_allowed:
        problems.append(f"LSE error {lse_err:.3e} > allowed {lse_allowed:.3e}")
    ok = not problems
    print(f"{name:>8}: {'PASS' if ok else 'FAIL'} O max abs err {o_err:.3e} (allowed {o_allowed:.3e}), "
          f"LSE max abs err {lse_err:.3e} (allowed {lse_allowed:.3e})"
          + ("" if ok else " -- " + "; ".join(problems)))
    return ok


class Runner:
    def __init__(self, binary, kernel, dtype, tmp):
        self.binary, self.kernel, self.dtype, self.tmp = binary, kernel, dtype, tmp

    def path(self, case, name):
        return os.path.join(self.tmp, f"{case}_{name}.npy")

    def save(self, case, name, a):
        p = self.path(case, name)
        np.save(p, np.ascontiguousarray(a))
        return p

    def run(self, case, args):
        cmd = [self.binary, "run", "--kernel", self.kernel, "--dtype", self.dtype] + args
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{case:>8}: FAIL flashcore exited {r.returncode}: {r.stderr.strip()}")
            print(f"          command: {' '.join(cmd)}")
            return False
        print(f"{case:>8}: {r.stderr.strip()}")
        return True


def per_seq(name, runner, dtype, seqs, scale, causal, wl, wr, softcap, slopes_of):
    """Reference and low-precision outputs of every sequence, concatenated along rows."""
    outs = [[], [], [], []]
    for b, (q, k, v) in enumerate(seqs):
        slopes = slopes_of(b)
        ref = attend(q, k, v, scale, causal, wl, wr, softcap, slopes)
        lowp = attend(q, k, v, scale, causal, wl, wr, softcap, slopes, low=dtype)
        for acc, x in zip(outs, ref + lowp):
            acc.append(x)
    return outs


def case_varlen(rn, rng, dtype):
    """Packed Q/K/V, GQA 8/2, d 64, causal; a sequence with len_q > len_k has empty rows."""
    hq, hkv, d = 8, 2, 64
    len_q = [5, 0, 33, 12, 1]
    len_k = [17, 9, 70, 7, 128]
    cu_q = np.concatenate([[0], np.cumsum(len_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(len_k)]).astype(np.int32)
    q = round_to(rng.standard_normal((cu_q[-1], hq, d)), dtype)
    k = round_to(rng.standard_normal((cu_k[-1], hkv, d)), dtype)
    v = round_to(rng.standard_normal((cu_k[-1], hkv, d)), dtype)
    args = ["--layout", "thd", "--causal",
            "--q", rn.save("varlen", "q", q), "--k", rn.save("varlen", "k", k),
            "--v", rn.save("varlen", "v", v),
            "--cu-seqlens-q", rn.save("varlen", "cu_q", cu_q),
            "--cu-seqlens-k", rn.save("varlen", "cu_k", cu_k),
            "--out", rn.path("varlen", "o"), "--lse", rn.path("varlen", "lse")]
    if not rn.run("varlen", args):
        return False
    o, lse = np.load(rn.path("varlen", "o")), np.load(rn.path("varlen", "lse"))
    if o.shape != q.shape or lse.shape != (hq, cu_q[-1]):
        print(f"  varlen: FAIL output shapes O {o.shape} LSE {lse.shape}, expected {q.shape} {(hq, cu_q[-1])}")
        return False
    seqs = [(q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]])
            for b in range(len(len_q))]
    o_ref, lse_ref, o_low, lse_low = per_seq("varlen", rn, dtype, seqs, d ** -0.5, True,
                                             None, None, None, lambda b: None)
    return judge("varlen", o, lse, np.concatenate(o_ref), np.concatenate(lse_ref, axis=1),
                 np.concatenate(o_low), np.concatenate(lse_low, axis=1), dtype)


def case_paged(rn, rng, dtype):
    """Paged cache (block 16, 4 blocks a sequence, 3 spare), seqused_k, 3 appended rows, causal."""
    batch, hq, hkv, d, bs, mb, new = 3, 8, 2, 128, 16, 4, 3
    used = np.array([0, 37, 61], dtype=np.int32)  # 61 + 3 = capacity 64
    num_blocks = batch * mb + 3
    table = rng.permutation(num_blocks)[: batch * mb].reshape(batch, mb).astype(np.int32)
    k_pages = round_to(rng.standard_normal((num_blocks, bs, hkv, d)), dtype)
    v_pages = round_to(rng.standard_normal((num_blocks, bs, hkv, d)), dtype)
    # NaN in every page row that is not read (rows past seqused_k + appended, spare blocks).
    readable = np.zeros((num_blocks, bs), dtype=bool)
    for b in range(batch):
        for j in range(used[b] + new):
            readable[table[b, j // bs], j % bs] = True
    k_pages[~readable] = np.nan
    v_pages[~readable] = np.nan
    k_new = round_to(rng.standard_normal((batch, new, hkv, d)), dtype)
    v_new = round_to(rng.standard_normal((batch, new, hkv, d)), dtype)
    sq = new  # decode-style: the queries are the appended tokens
    q = round_to(rng.standard_normal((batch, sq, hq, d)), dtype)
    args = ["--causal",
            "--q", rn.save("paged", "q", q),
            "--k", rn.save("paged", "k", k_pages), "--v", rn.save("paged", "v", v_pages),
            "--block-table", rn.save("paged", "table", table),
            "--seqused-k", rn.save("paged", "used", used),
            "--k-new", rn.save("paged", "k_new", k_new), "--v-new", rn.save("paged", "v_new", v_new),
            "--k-cache-out", rn.path("paged", "k_after"), "--v-cache-out", rn.path("paged", "v_after"),
            "--out", rn.path("paged", "o"), "--lse", rn.path("paged", "lse")]
    if not rn.run("paged", args):
        return False
    o, lse = np.load(rn.path("paged", "o")), np.load(rn.path("paged", "lse"))

    def logical(pages, new_rows, b):
        rows = [pages[table[b, j // bs], j % bs] for j in range(used[b])]
        cached = np.stack(rows) if rows else np.zeros((0, hkv, d), np.float32)
        return np.concatenate([cached, new_rows[b]])

    seqs = [(q[b], logical(k_pages, k_new, b), logical(v_pages, v_new, b)) for b in range(batch)]
    o_ref, lse_ref, o_low, lse_low = per_seq("paged", rn, dtype, seqs, d ** -0.5, True,
                                             None, None, None, lambda b: None)
    ok = judge("paged", o, lse, np.stack(o_ref), np.stack(lse_ref), np.stack(o_low),
               np.stack(lse_low), dtype)
    # The caches after the call: the new rows at seqused_k (through the table), the rest as given.
    for name, before, rows in (("k", k_pages, k_new), ("v", v_pages, v_new)):
        after = np.load(rn.path("paged", f"{name}_after"))
        want = before.copy()
        for b in range(batch):
            for t in range(new):
                j = used[b] + t
                want[table[b, j // bs], j % bs] = rows[b, t]
        same = (after == want) | (np.isnan(after) & np.isnan(want))
        if after.shape != want.shape or not same.all():
            print(f"   paged: FAIL the {name} cache after the append differs from the expected one "
                  f"at {int((~same).sum()) if after.shape == want.shape else 'all'} elements")
            ok = False
    return ok


def case_window(rn, rng, dtype):
    """Dense BHSD, MHA 4 heads, d 64, window (16, 8), softcap 20, ALiBi [batch, heads_q]."""
    batch, hq, sq, sk, d = 2, 4, 40, 100, 64
    wl, wr, softcap = 16, 8, 20.0
    q = round_to(rng.standard_normal((batch, hq, sq, d)) * 2, dtype)
    k = round_to(rng.standard_normal((batch, hq, sk, d)) * 2, dtype)
    v = round_to(rng.standard_normal((batch, hq, sk, d)), dtype)
    slopes = (2.0 ** -rng.uniform(0, 8, size=(batch, hq))).astype(np.float32)
    args = ["--layout", "bhsd",
            "--q", rn.save("window", "q", q), "--k", rn.save("window", "k", k),
            "--v", rn.save("window", "v", v),
            "--window-left", str(wl), "--window-right", str(wr), "--softcap", str(softcap),
            "--alibi-slopes", rn.save("window", "slopes", slopes),
            "--out", rn.path("window", "o"), "--lse", rn.path("window", "lse")]
    if not rn.run("window", args):
        return False
    o, lse = np.load(rn.path("window", "o")), np.load(rn.path("window", "lse"))
    bshd = lambda t: np.transpose(t, (0, 2, 1, 3))
    seqs = [(bshd(q)[b], bshd(k)[b], bshd(v)[b]) for b in range(batch)]
    o_ref, lse_ref, o_low, lse_low = per_seq("window", rn, dtype, seqs, d ** -0.5, False,
                                             wl, wr, softcap, lambda b: slopes[b])
    # Kernel O is BHSD; the reference is per sequence [rows, heads, d].
    return judge("window", bshd(o), lse, np.stack(o_ref), np.stack(lse_ref), np.stack(o_low),
                 np.stack(lse_low), dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("flashcore", help="path to the flashcore binary")
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default="varlen,paged,window")
    a = ap.parse_args()
    cases = {"varlen": case_varlen, "paged": case_paged, "window": case_window}
    wanted = a.cases.split(",")
    if any(c not in cases for c in wanted):
        print(f"unknown case in {a.cases!r} (have {','.join(cases)})", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        rn = Runner(a.flashcore, a.kernel, a.dtype, tmp)
        for c in wanted:
            failed += not cases[c](rn, rng, a.dtype)
    print(f"{len(wanted) - failed}/{len(wanted)} cases pass (kernel {a.kernel}, {a.dtype})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
