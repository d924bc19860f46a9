// Generation 5, decode: split keys across CTAs, query heads of a KV group packed into one tile
// (FlashDecoding with FlashAttention-3's pack-GQA). Both gen-5 paths plan it for problems whose
// queries per KV head fit one 16-row MMA tile (decode, speculative decoding): there the
// persistent kernels give one CTA a whole key range and fill 1 of 128 MMA rows, while this one
// streams K/V through every SM at once and reads each KV head once per group.
//
// Work unit (one CTA): (batch b, KV head h_kv, packed q tile, key split). Packed row r of a
// sequence is query row r / G of query head h_kv * G + r % G (G = heads_q / heads_kv); a tile is
// 16 packed rows, so K/V of a group are read once for all its heads. The unit's key tiles (the
// visited range of seqlen.cuh, cut into num_splits balanced pieces) stream through a
// FC_DECODE_STAGES-deep cp.async ring of 64-key K and V tiles (32-key at D = 512); up to D = 256
// warp w owns keys [16 w, 16 w + 16) of every tile and keeps its own online-softmax state and
// 16 x D accumulator (at D = 512 every warp takes all 32 keys and a quarter of the columns, see
// column_warps, and S comes from the warps' quarters of the head dim, scores.cuh):
//
//   prologue: Q (16 packed rows, gathered per row) + the first STAGES-1 K/V tiles
//   per tile t: wait tile t; barrier; issue tile t+STAGES-1 into the slot tile t-1 used;
//               S = Q·K_wᵀ (16 x 16), score modifier, masks, online softmax, O_w += P·V_w
//   epilogue:   the warps' (max, sum, O) merged through shared memory (column warps, D = 512:
//               nothing to merge, each lane stores its own); one split: O and LSE written;
//               several: the split's normalised O (f32) and log2-LSE go to the workspace and
//               attention_decode_combine (a warp a 64-column slice of a row) or, where the
//               splits are few, attention_decode_combine_rows (a warp a row) merges them,
//               splits in order.
//
// Masks, score modifiers and K/V addressing are the shared headers' (seqlen.cuh, score_mod.cuh,
// kv_rows.cuh, async_copy.cuh), so every inference mode holds under splitting; a split never
// crosses a sequence (a unit belongs to one sequence).
//
// An e4m3 cache (FC_KV_E4M3) changes only how tiles are stored and read (kv_operand.cuh: rows of
// D bytes, operands widened in registers) and adds the descales: the key one scales the logits,
// the value one the unit's O before the warps' merge.
//
// Padded head dims (FC_DECODE_PADDED, common/padded_head.cuh): one build at D = 64, 128, 256 or
// 512 serves every head dim (a multiple of 8) that rounds up to it, and V's own head dim
// (FC_HEAD_DIM_V) up to it: Q, K and V tiles hold D columns of which only the problem's are
// loaded (the rest zero-filled: they add nothing to either product), and only V's columns of O
// are stored. 16-bit caches only; an e4m3 cache is read at the build dims exactly.
//
// The build's defines and shared-memory map: gen5_decode/config.cuh; its parts: the work units
// and splits (work_split.cuh), the partials and merge area (partials.cuh), the small-page loader
// (page_groups.cuh), the L2 prefetch (prefetch.cuh), the combine's shape (combine.cuh) and a
// warp's scores of a tile, Q wherever the build keeps it (scores.cuh).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/async_copy.cuh"
#include "common/online_softmax.cuh"
#include "common/work_item.cuh"
#include "common/grid_dependency.cuh"
#include "common/kv_operand.cuh"
#include "common/padded_head.cuh"
#include "common/opaque.cuh"
#include "common/decode_trace.cuh"
#include "gen5_decode/config.cuh"
#include "gen5_decode/work_split.cuh"
#include "gen5_decode/partials.cuh"
#include "gen5_decode/page_groups.cuh"
#include "gen5_decode/prefetch.cuh"
#include "gen5_decode/combine.cuh"
#include "gen5_decode/scores.cuh"

using namespace decode;

extern "C" __global__ void __launch_bounds__(num_threads, FC_DECODE_MIN_BLOCKS)
    attention_decode_split(const __grid_constant__ AttentionParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const unsigned q_tile = smem_base + q_offset;
    float* stats = reinterpret_cast<float*>(smem + stats_offset);  // [warp][row][max, sum]
    float* merged = reinterpret_cast<float*>(smem);                 // [warp][row][d], epilogue only

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int group = lane / 4;
    const int tig = lane % 4;
    const int splits = p.num_splits;
    const int group_size = p.q_heads_per_kv;
    // This warp's keys of every tile, and its first column of O (its bytes into a V row).
    const int key_slice = warp / column_warps;
    const int warp_col0 = (warp % column_warps) * warp_cols;
    const unsigned warp_col_bytes = (unsigned)warp_col0 * 2;

    const long long units = (long long)p.batch * p.heads_kv * packed_q_tiles(p);
    if (!cache_matches(p)) __trap();  // K/V of another kind than this build loads
    // Programmatic dependent launch (sm_90): this grid waits for the kernel before it ahead of
    // its first global access (the sequence tables, Q, K/V) and of the workspace it overwrites,
    // which that kernel may still read. Only then may the combine (or the stream's next kernel)
    // start its CTAs, which wait for this grid in turn: signalled before the wait, a chain of
    // launches ran ahead, each kernel's waiting CTAs taking SM slots, and the two-split rows
    // ran 14-16 % slower (25afc0a).
    decode_trace::SplitTrace trace;
    trace.start();
    const GroupCopy k_copy = group_copy(p.k_row_stride, tid), v_copy = group_copy(p.v_row_stride, tid);
    if (blockIdx.x < units * splits) prefetch_first_tiles(p, blockIdx.x, splits, tid);
    griddep_wait();
    if (threadIdx.x == 0) griddep_launch_dependents();
    trace.mark(decode_trace::kWaited);
    for (long long work = blockIdx.x; work < units * splits; work += gridDim.x) {
        const long long u = work / splits;
        const int split = (int)(work % splits);
        const Unit unit = unit_of(p, u);
        const int b = unit.b, h_kv = unit.h_kv;
        const SeqInfo seq = seq_info(p, b);
        const int packed_rows = seq.len_q * group_size;
        const int r0 = unit.q_tile * q_tile_rows;
        if (r0 >= packed_rows) continue;  // past this sequence's queries: block-uniform
        const int rows = min(q_tile_rows, packed_rows - r0);
        const int q_first = r0 / group_size, q_last = (r0 + rows - 1) / group_size;
        const KeyTiles kt = visited_key_tiles(p, seq, q_first, q_last - q_first + 1, kv_tile_rows);
        // Splits of this unit: with chunks, past its last chunk there is nothing (block-uniform),
        // and one chunk is written as an unsplit unit's output, whatever the others need.
        int own_splits = splits;
        int kb0, kb1;
        if constexpr (chunk_tiles() > 0) {
            own_splits = unit_splits(kt, splits);
            if (split >= own_splits) continue;
            chunk_of(kt, split, own_splits, kb0, kb1);
        } else {
            split_tiles(kt, split, splits, kb0, kb1);
        }
        const int n_tiles = kb1 - kb0;

        // This lane's two packed rows (group, group + 8) as query rows and heads.
        const PackedRow lane_row[2] = {packed_row(p, h_kv, r0 + group), packed_row(p, h_kv, r0 + group + 8)};
        const int q_row[2] = {lane_row[0].q_row, lane_row[1].q_row};

        // Row offsets count elements (bytes for e4m3); the loaders count the tile's 16-bit words.
        const long long k_first = paged_cache ? 0 : k_row_offset(p, seq, b, h_kv, 0);
        const long long v_first = paged_cache ? 0 : v_row_offset(p, seq, b, h_kv, 0);
        // One 64-key tile of K or V, by the build's cache (FC_DECODE_KV_CACHE): strided, inside
        // one page (strided from its first row), or one page lookup per 16-row group (small
        // pages: a sequence's last tile; the others go through copy_groups).
        // `page`: the tile's page where the build's pages hold whole tiles (tile_page), read one
        // iteration ahead of the tile's copies.
        auto load_kv = [&](unsigned dst, const void* base, long long first, long long row_stride, bool is_k, int k0,
                           int page) {
            const int valid = min(kv_tile_rows, seq.len_k - k0);
            const long long word_stride = row_stride / Kv::kElemsPerWord;
            // A padded build's 16-byte chunks of the tensor's rows (the rest zero-filled).
            const int chunks = head_chunks<padded, head_dim>(is_k ? p.head_dim : v_dim(p));
            // Row j's place in page `page_j` (kv_row_offset's paged branch: the build says it is
            // paged), and in the page the table gives it.
            auto offset_in_page = [&](int page_j, int j) {
                return is_k ? paged_row_offset(p, page_j, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride)
                            : paged_row_offset(p, page_j, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
            };
            auto page_offset = [&](int j) { return offset_in_page(page_of_row(p, b, j), j); };
            if constexpr (kv_cache == page_groups)
                load_tile_groups_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, [&](int g) { return Kv::row_ptr(base, page_offset(k0 + 16 * g)); }, word_stride, valid, tid,
                    chunks);
            else if constexpr (kv_cache == page_tiles)
                load_tile_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, Kv::row_ptr(base, offset_in_page(page, k0)), word_stride, valid, tid, chunks);
            else
                load_tile_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, Kv::row_ptr(base, first + (long long)k0 * row_stride), word_stride, valid, tid, chunks);
        };
        // copy_groups' geometry is the 16-bit tile's whole rows: e4m3 pages and padded rows take
        // load_tile_groups_async.
        // (At D = 512 a pass covers 2 rows, which copy_groups' swizzle arithmetic does not take.)
        constexpr bool group_copies = kv_cache == page_groups && !Kv::kE4m3 && !padded && head_dim <= 256;
        auto load_stage = [&](int slot, int tile, int page) {
            const int k0 = tile * kv_tile_rows;
            if constexpr (group_copies) {
                if (seq.len_k - k0 >= kv_tile_rows) {
                    const GroupRows first = group_first_rows(p, b, h_kv, k0, lane);
                    copy_groups(smem_base + k_slot(slot), first.k, k_copy);
                    copy_groups(smem_base + v_slot(slot), first.v, v_copy);
                    return;
                }
            }
            load_kv(smem_base + k_slot(slot), p.k, k_first, p.k_row_stride, true, k0, page);
            load_kv(smem_base + v_slot(slot), p.v, v_first, p.v_row_stride, false, k0, page);
        };
        // The page of tile `tile` where a page holds whole tiles (0 for the other builds, unused).
        auto tile_page = [&](int tile) { return kv_cache == page_tiles ? page_of_row(p, b, tile * kv_tile_rows) : 0; };

        // e4m3: the unit's descales (the key one scales the logits, the value one O below).
        const float k_descale = Kv::kE4m3 ? kv_descale(p, p.k_descale, b, h_kv) : 1.f;
        float o[out_tiles][4];
        zero_accumulator(o);
        SoftmaxRows st;
        softmax_init(st);

        if (n_tiles > 0) {
            // Q: packed rows gathered one 16-byte chunk at a time (each row is its own head's
            // row); rows past the sequence's queries are zero-filled, never read.
            constexpr int q_chunks = q_tile_rows * Tile::kChunksPerRow;
            for (int i = tid; i < q_chunks; i += num_threads) {
                const int r = i / Tile::kChunksPerRow, chunk = i % Tile::kChunksPerRow;
                const bool in_head = chunk_in_head<padded>(p.head_dim, chunk);
                const bool valid = r < rows && in_head;
                const PackedRow pr = packed_row(p, h_kv, r0 + (r < rows ? r : 0));
                // (A padded chunk's unread source is its row's first chunk.)
                const elem_t* src = static_cast<const elem_t*>(p.q) + seq_q_offset(p, seq, b, pr.head, pr.q_row) +
                                    (in_head ? chunk * 8 : 0);
                cp_async_16_zfill(q_tile + Tile::offset(r, chunk) * 2, src, valid);
            }
            load_stage(0, kb0, tile_page(kb0));
            cp_async_commit();
#pragma unroll
            for (int i = 1; i < stages - 1; ++i) {
                if (i < n_tiles) load_stage(i, kb0 + i, tile_page(kb0 + i));
                cp_async_commit();
            }
            // The next tile's page, read an iteration before its copies are issued: its latency
            // then passes under a tile's compute instead of delaying the copies.
            int next_page = kv_cache == page_tiles && stages - 1 < n_tiles ? tile_page(kb0 + stages - 1) : 0;

            FragA q_frag[q_frags];  // (scores.cuh; never touched, so never allocated, at D = 256)
            typename Kv::QScale q_scale{};
            for (int t = 0; t < n_tiles; ++t) {
                cp_async_wait<stages - 2>();  // tile t (and Q) have landed
                // Tile t is visible to every warp, and every warp is past tile t-1, whose slot
                // the next load reuses.
                __syncthreads();
                if (t == 0) {
                    trace.mark(decode_trace::kFirstTile);
                    q_scale = Kv::q_scale(q_tile, lane);
                    load_q_operand(q_frag, q_scale, q_tile, warp, lane);
                }
                if (t + stages - 1 < n_tiles) {
                    load_stage((t + stages - 1) % stages, kb0 + t + stages - 1, next_page);
                    if constexpr (kv_cache == page_tiles)
                        if (t + stages < n_tiles) next_page = tile_page(kb0 + t + stages);
                }
                cp_async_commit();

                const int slot = t % stages;
                const int tile_k0 = (kb0 + t) * kv_tile_rows;
                const int k0 = tile_k0 + key_slice * warp_keys;  // this warp's first key
                const unsigned warp_rows = KvTile::bytes(key_slice * warp_keys);
                float s[warp_keys / 8][4];
                tile_scores<warp_keys>(s, q_frag, q_scale, q_tile, smem_base + k_slot(slot) + warp_rows, warp, lane);
                if (has_score_mod(p)) {
                    ScoreMod mod[2] = {score_mod(p, seq, b, lane_row[0].head), score_mod(p, seq, b, lane_row[1].head)};
                    if constexpr (Kv::kE4m3)
                        for (ScoreMod& m : mod) m.scale_log2 *= k_descale, m.softcap_pre *= k_descale;
                    modify_scores_rows(s, mod, q_row, k0 + 2 * tig);
                } else {
                    scale_scores(s, Kv::kE4m3 ? p.scale_log2 * k_descale : p.scale_log2);
                }
                if (tile_needs_mask(kt, tile_k0, kv_tile_rows)) {  // lengths, causal, window edges
                    const KeyRange a = key_range(p, seq, q_row[0]), c = key_range(p, seq, q_row[1]);
                    const int lo[2] = {a.lo - k0, c.lo - k0};
                    const int hi[2] = {a.hi - k0, c.hi - k0};
                    mask_scores_range(s, 2 * tig, lo, hi);
                }
                online_softmax_update(s, o, st);
                Kv::template pv<warp_keys, warp_cols>(o, s, smem_base + v_slot(slot) + warp_rows + warp_col_bytes,
                                                      lane);
            }
            cp_async_wait<0>();
            __syncthreads();  // every warp is done with the ring: the merge may overwrite it
            trace.mark(decode_trace::kLoopDone);
        }

        if constexpr (Kv::kE4m3) {
            // (P went to f16 times 2^14: kv_operand.cuh.)
            const float v_descale = kv_descale(p, p.v_descale, b, h_kv) * e4m3::kPDown;
#pragma unroll
            for (int j = 0; j < out_tiles; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[j][e] *= v_descale;
        }
        if constexpr (split_d_scores) {
            // Column warps (D = 512, scores.cuh): one key slice, every warp holding each row's
            // (max, sum) and its own columns of O. Nothing to merge: each lane stores its rows'
            // columns (the rules of the merge below, the row's part worked out once).
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = opaque(group) + 8 * r;  // (opaque: as the merge's below)
                const float m = st.row_max[r];
                const float l_lanes = quad_sum(st.row_sum[r]);
                if (row >= rows) continue;
                // (A max still -inf: no visible key, l = 0 and O = 0, or every score NaN: l NaN.)
                const float weight = m == -FC_INF ? (l_lanes == 0.f ? 0.f : FC_QNAN) : 1.f;
                const float l = weight * l_lanes;
                const PackedRow pr = packed_row(p, h_kv, r0 + row);
                const bool writes_lse = warp_col0 == 0 && tig == 0;
                float scale;
                if (own_splits == 1) {
                    const KeyRange keys = key_range(p, seq, pr.q_row);
                    const bool sees_keys = keys.hi > keys.lo;
                    scale = weight * final_scale(l, sees_keys);
                    elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, pr.head, pr.q_row);
#pragma unroll
                    for (int j = 0; j < out_tiles; ++j) {
                        const int col = warp_col0 + 8 * j + 2 * tig;
                        *reinterpret_cast<elem2_t*>(o_row + col) = pack2(o[j][2 * r] * scale, o[j][2 * r + 1] * scale);
                    }
                    if (writes_lse && p.lse != nullptr)
                        p.lse[seq_lse_offset(p, seq, b, pr.head, pr.q_row)] = final_lse(m, l, sees_keys);
                } else {
                    scale = weight * (l != 0.f ? 1.f / l : 0.f);
                    const long long slot = partial_row(p, u, split, row);
                    float* o_row = workspace_of(p) + slot * head_dim;
#pragma unroll
                    for (int j = 0; j < out_tiles; ++j)
                        *reinterpret_cast<float2*>(&o_row[warp_col0 + 8 * j + 2 * tig]) =
                            make_float2(o[j][2 * r] * scale, o[j][2 * r + 1] * scale);
                    if (writes_lse) workspace_of(p)[partial_lse_base(p, units) + slot] = l != 0.f ? m + __log2f(l) : -FC_INF;
                }
            }
        } else {
            // Merge the warps' key slices: each row's (max, sum) and unnormalised O (the warps of
            // one slice hold the same max and sum, and their own columns).
            // (opaque: the merge's addresses are worked out here, not hoisted over the mainloop into
            // registers of their own: 236 registers at D = 512 without it, 206 with, when D = 512
            // merged here.)
            const int merge_group = opaque(group);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = merge_group + 8 * r;
                const float l = quad_sum(st.row_sum[r]);
                if (tig == 0 && warp_col0 == 0) {
                    stats[(key_slice * q_tile_rows + row) * 2] = st.row_max[r];
                    stats[(key_slice * q_tile_rows + row) * 2 + 1] = l;
                }
                const int merged_row = key_slice * q_tile_rows + row;
#pragma unroll
                for (int j = 0; j < out_tiles; ++j) {
                    if constexpr (Kv::kE4m3) {  // columns in the order the V bytes came (kv_operand.cuh)
                        merged[merged_index(merged_row, warp_col0 + Kv::out_col(j, 2 * tig))] = o[j][2 * r];
                        merged[merged_index(merged_row, warp_col0 + Kv::out_col(j, 2 * tig + 1))] = o[j][2 * r + 1];
                    } else {
                        *reinterpret_cast<float2*>(&merged[merged_index(merged_row, warp_col0 + 8 * j + 2 * tig)]) =
                            make_float2(o[j][2 * r], o[j][2 * r + 1]);
                    }
                }
            }
            __syncthreads();

            // (Padded 512 builds, one key slice, keep the column-pair pass too: the merge a row a
            // warp was timed at 128 and 256 only.)
            if constexpr (head_dim >= 128 && key_slices > 1) {
                // A warp merges whole rows (warp, warp + 4, ...): each lane works the row's weights,
                // sum and destination out itself (the same values in every lane, kept in registers),
                // then the lanes combine its column pairs 32 at a time. No thread waits on another's
                // row, and with one warp a scheduler a thread a column pair over every row was bound
                // by re-reading the stats and re-deriving the row for each pair. The sums run in
                // key-slice order, whichever warp takes the row.
                for (int row = warp; row < rows; row += num_warps) {
                    const RowWeights rw = row_weights(stats, row);
                    const float m = rw.m, l = rw.l;
                    const PackedRow pr = packed_row(p, h_kv, r0 + row);
                    if (own_splits == 1) {
                        const KeyRange keys = key_range(p, seq, pr.q_row);
                        const bool sees_keys = keys.hi > keys.lo;
                        const float scale = final_scale(l, sees_keys);
                        elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, pr.head, pr.q_row);
#pragma unroll
                        for (int col = 2 * lane; col < head_dim; col += 64) {
                            const float2 ow = merge_pair(merged, rw.weight, row, col);
                            // (A padded build's columns past V's are zeros, stored nowhere; its partials
                            // keep them, so the combine reads only written words.)
                            if (!padded || col < v_dim(p))
                                *reinterpret_cast<elem2_t*>(o_row + col) = pack2(ow.x * scale, ow.y * scale);
                        }
                        if (lane == 0 && p.lse != nullptr)
                            p.lse[seq_lse_offset(p, seq, b, pr.head, pr.q_row)] = final_lse(m, l, sees_keys);
                    } else {
                        // The split's share: O normalised by its own sum and its log2-LSE (-inf: no key).
                        const float inv = l != 0.f ? 1.f / l : 0.f;
                        const long long slot = partial_row(p, u, split, row);
                        float* o_row = workspace_of(p) + slot * head_dim;
#pragma unroll
                        for (int col = 2 * lane; col < head_dim; col += 64) {
                            const float2 ow = merge_pair(merged, rw.weight, row, col);
                            *reinterpret_cast<float2*>(&o_row[col]) = make_float2(ow.x * inv, ow.y * inv);
                        }
                        if (lane == 0)
                            workspace_of(p)[partial_lse_base(p, units) + slot] = l != 0.f ? m + __log2f(l) : -FC_INF;
                    }
                }
            } else {
                // At D = 64 a row is one pair a lane, and working each row out in every lane of
                // a warp cost more than it saved: a thread a column pair, over every row.
                for (int i = tid; i < q_tile_rows * head_dim / 2; i += num_threads) {
                    const int row = i / (head_dim / 2);
                    const int col = 2 * (i % (head_dim / 2));
                    if (row >= rows) continue;
                    float m = -FC_INF;
#pragma unroll
                    for (int w = 0; w < key_slices; ++w) m = fmaxf(m, stats[(w * q_tile_rows + row) * 2]);
                    float l = 0.f, o0 = 0.f, o1 = 0.f;
#pragma unroll
                    for (int w = 0; w < key_slices; ++w) {
                        const float mw = stats[(w * q_tile_rows + row) * 2];
                        const float lw = stats[(w * q_tile_rows + row) * 2 + 1];
                        // (row_weights' arithmetic, interleaved with the pair's loads: this branch's
                        // PTX is 18e57aa's, the code timed at D = 64 and in the padded 512 builds.)
                        const float weight = mw == -FC_INF ? (lw == 0.f ? 0.f : FC_QNAN) : fast_exp2(mw - m);
                        const float2 ow =
                            *reinterpret_cast<const float2*>(&merged[merged_index(w * q_tile_rows + row, col)]);
                        l += weight * lw;
                        o0 += weight * ow.x;
                        o1 += weight * ow.y;
                    }
                    const PackedRow pr = packed_row(p, h_kv, r0 + row);
                    if (own_splits == 1) {
                        const KeyRange keys = key_range(p, seq, pr.q_row);
                        const bool sees_keys = keys.hi > keys.lo;
                        const float scale = final_scale(l, sees_keys);
                        elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, pr.head, pr.q_row);
                        // (A padded build's columns past V's are zeros, stored nowhere; its partials keep
                        // them, so the combine reads only written words.)
                        if (!padded || col < v_dim(p))
                            *reinterpret_cast<elem2_t*>(o_row + col) = pack2(o0 * scale, o1 * scale);
                        if (col == 0 && p.lse != nullptr)
                            p.lse[seq_lse_offset(p, seq, b, pr.head, pr.q_row)] = final_lse(m, l, sees_keys);
                    } else {
                        // The split's share: O normalised by its own sum and its log2-LSE (-inf: no key).
                        const float inv = l != 0.f ? 1.f / l : 0.f;
                        const long long slot = partial_row(p, u, split, row);
                        *reinterpret_cast<float2*>(&workspace_of(p)[slot * head_dim + col]) =
                            make_float2(o0 * inv, o1 * inv);
                        if (col == 0)
                            workspace_of(p)[partial_lse_base(p, units) + slot] = l != 0.f ? m + __log2f(l) : -FC_INF;
                    }
                }
            }
        }
        __syncthreads();  // the stats and merge area are free for the next unit
    }
    trace.finish();
}

// Merges the splits of every packed row, in split order (deterministic): the log-sum-exp of the
// splits' LSEs, and their O rows weighted by exp2(lse_s - lse). An item is kSlices 64-column
// slices of one packed row (a float2 a lane for each): one slice, so that a row of D columns is
// D / 64 warps' work, or, where the splits' loads of all of a row's slices fit at once, the whole
// row. A lane holds up to combine_batch loads at once: split s's LSE is read by lane s % 32, and
// the first combine_batch / kSlices splits' O columns are loaded with the LSEs, so up to 32 splits
// (one slice) cost one round trip to L2 (a lane of the warp-per-row combine this replaced held
// D / 32 columns, and past 16 splits read four splits a round trip: 8.7 us for 33 splits of the
// one-sequence long row, docs/results/2026-11-30-decode-long-row-h200). Later batches take their
// weights from shared memory. Items run (unit, packed row, slices) with only the rows a unit can
// have (combine_rows), a warp an item, four to a block.
template <int kSlices>
__device__ __forceinline__ void combine_items(const AttentionParams& p, float* split_weight) {
    constexpr int batch = combine_batch / kSlices;  // splits a round trip
    constexpr int item_slices = col_slices / kSlices;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int splits = p.num_splits;
    const long long units = (long long)p.batch * p.heads_kv * packed_q_tiles(p);
    const long long lse_base = partial_lse_base(p, units);
    const int unit_rows = combine_rows(p);
    const long long items = units * unit_rows * item_slices;
    for (long long item = (long long)blockIdx.x * combine_warps + warp; item < items;
         item += (long long)gridDim.x * combine_warps) {
        const int slice0 = (int)(item % item_slices) * kSlices;
        const long long unit_row = item / item_slices;
        const long long u = unit_row / unit_rows;
        const int row = (int)(unit_row % unit_rows);
        const Unit unit = unit_of(p, u);
        const SeqInfo seq = seq_info(p, unit.b);
        const int r = unit.q_tile * q_tile_rows + row;
        if (r >= seq.len_q * p.q_heads_per_kv) continue;  // warp-uniform
        // The splits that carry this unit's keys: its chunks in a batch-invariant plan, where a
        // unit of one chunk was written whole by the split kernel.
        int n = splits;
        if constexpr (chunk_tiles() > 0) {
            const int r0 = unit.q_tile * q_tile_rows;
            const int rows = min(q_tile_rows, seq.len_q * p.q_heads_per_kv - r0);
            const int q_first = r0 / p.q_heads_per_kv, q_last = (r0 + rows - 1) / p.q_heads_per_kv;
            n = unit_splits(visited_key_tiles(p, seq, q_first, q_last - q_first + 1, kv_tile_rows), splits);
            if (n == 1) continue;
        }
        auto o_of = [&](int s, int c) {
            const int col = (slice0 + c) * combine_cols + 2 * lane;
            return *reinterpret_cast<const float2*>(&workspace_of(p)[partial_row(p, u, s, row) * head_dim + col]);
        };
        // The first batch's O columns and every LSE, issued together.
        float2 v[batch][kSlices];
#pragma unroll
        for (int s = 0; s < batch; ++s)
#pragma unroll
            for (int c = 0; c < kSlices; ++c)
                if (s < n) v[s][c] = o_of(s, c);
        float lse_s[lse_per_lane];
        float m = -FC_INF;
#pragma unroll
        for (int i = 0; i < lse_per_lane; ++i) {
            const int s = lane + 32 * i;
            lse_s[i] = s < n ? workspace_of(p)[lse_base + partial_row(p, u, s, row)] : -FC_INF;
            m = fmaxf(m, lse_s[i]);
        }
        for (int x = 16; x > 0; x >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
        float sum = 0.f;
        if (m != -FC_INF) {
#pragma unroll
            for (int i = 0; i < lse_per_lane; ++i) sum += fast_exp2(lse_s[i] - m);  // 2^-inf = 0
        }
        for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
        // sum is 0 exactly when no split saw a visible key (every lse_s = -inf); NaN propagates.
        const float lse2 = m + __log2f(sum);
        const float weight_l = fast_exp2(lse_s[0] - lse2);  // split `lane`'s (0 past n)
        float2 acc[kSlices];
#pragma unroll
        for (int c = 0; c < kSlices; ++c) acc[c] = make_float2(0.f, 0.f);
        if (sum != 0.f) {
#pragma unroll
            for (int s = 0; s < batch; ++s) {
                if (s < n) {
                    const float w = __shfl_sync(0xffffffffu, weight_l, s);
#pragma unroll
                    for (int c = 0; c < kSlices; ++c) {
                        acc[c].x += w * v[s][c].x;
                        acc[c].y += w * v[s][c].y;
                    }
                }
            }
            if (n > batch) {
#pragma unroll
                for (int i = 0; i < lse_per_lane; ++i) {
                    const int s = lane + 32 * i;
                    if (s >= batch && s < n) split_weight[s] = i == 0 ? weight_l : fast_exp2(lse_s[i] - lse2);
                }
                __syncwarp();
                for (int s0 = batch; s0 < n; s0 += batch) {
#pragma unroll
                    for (int s = 0; s < batch; ++s)
#pragma unroll
                        for (int c = 0; c < kSlices; ++c)
                            if (s0 + s < n) v[s][c] = o_of(s0 + s, c);
#pragma unroll
                    for (int s = 0; s < batch; ++s) {
                        if (s0 + s < n) {
                            const float w = split_weight[s0 + s];
#pragma unroll
                            for (int c = 0; c < kSlices; ++c) {
                                acc[c].x += w * v[s][c].x;
                                acc[c].y += w * v[s][c].y;
                            }
                        }
                    }
                }
                __syncwarp();  // the weights are read before the next item overwrites them
            }
        }
        // sum = 0 means no split saw a visible key: the defined empty row, or NaN where keys were
        // visible (all logits -inf). A padded build stores only V's columns (V's head dim is
        // even, so a pair is stored whole or not at all).
        const PackedRow pr = packed_row(p, unit.h_kv, r);
        const KeyRange keys = key_range(p, seq, pr.q_row);
        const bool sees_keys = keys.hi > keys.lo;
        const float undefined = (sum == 0.f && sees_keys) ? FC_QNAN : 1.f;
        elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, unit.b, pr.head, pr.q_row);
#pragma unroll
        for (int c = 0; c < kSlices; ++c) {
            const int col = (slice0 + c) * combine_cols + 2 * lane;
            if (!padded || col < v_dim(p))
                *reinterpret_cast<elem2_t*>(o_row + col) = pack2(acc[c].x * undefined, acc[c].y * undefined);
        }
        if (slice0 == 0 && lane == 0 && p.lse != nullptr)
            p.lse[seq_lse_offset(p, seq, unit.b, pr.head, pr.q_row)] =
                sum != 0.f ? lse2 * FC_LN2 : (sees_keys ? FC_QNAN : FC_INF);
    }
}

// The combine kernel around its items.
template <int kSlices>
__device__ __forceinline__ void combine_kernel(const AttentionParams& p) {
    __shared__ float split_weight[combine_warps][max_splits];
    // Launched programmatically after the split kernel (sm_90): its partials are read only after
    // it has completed; then the stream's next kernel may start its setup.
    decode_trace::CombineTrace trace;
    trace.start();
    griddep_wait();
    trace.released();
    if (threadIdx.x == 0) griddep_launch_dependents();
    combine_items<kSlices>(p, split_weight[threadIdx.x / 32]);
    trace.finish();
}

// A warp an item of one column slice.
extern "C" __global__ void __launch_bounds__(combine_warps * 32)
    attention_decode_combine(const __grid_constant__ AttentionParams p) {
    combine_kernel<1>(p);
}

// A warp an item of a whole row, where the splits are few (decode.rs combine_slices): the loads
// of all its slices fit the registers of the 32-split batch, and the grid is col_slices times
// smaller (the speculative row at 256: 256 blocks instead of 1 024, one wave). Its own entry, so
// that the one-slice combine keeps its code (in one kernel behind a branch the one-sequence e4m3
// row at 256 ran 3 % slower, docs/results/2026-12-02-decode-combine-rows-h200).
extern "C" __global__ void __launch_bounds__(combine_warps * 32)
    attention_decode_combine_rows(const __grid_constant__ AttentionParams p) {
    combine_kernel<col_slices>(p);
}
