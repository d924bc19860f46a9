//! Which rows each rank holds and which blocks of attention it computes at each ring step:
//! pure functions of (rank, world, sharding), tested without a GPU.
//!
//! A rank's local sequence is made of `parts` chunks of equal length. With [`Sharding::ZigZag`]
//! the global sequence is cut into 2·world chunks and rank r holds chunks r and 2·world−1−r, so
//! under a causal mask every rank has the same work at every step (the masked half of one chunk
//! is the unmasked half of the other). [`Sharding::Contiguous`] gives rank r chunk r.

/// How the global sequence is split over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Rank r holds global chunks r and 2·world−1−r (of 2·world), in that order: balanced
    /// under a causal mask (ring-flash-attn's and Llama 3's zig-zag).
    ZigZag,
    /// Rank r holds global chunk r (of world): for attention without a causal mask.
    Contiguous,
}

impl Sharding {
    /// Chunks per rank.
    pub fn parts(self) -> usize {
        match self {
            Sharding::ZigZag => 2,
            Sharding::Contiguous => 1,
        }
    }

    /// The global chunk index of part `part` of rank `rank`.
    pub fn chunk(self, rank: usize, world: usize, part: usize) -> usize {
        match (self, part) {
            (Sharding::ZigZag, 0) => rank,
            (Sharding::ZigZag, _) => 2 * world - 1 - rank,
            (Sharding::Contiguous, _) => rank,
        }
    }

    /// The global rows `[start, end)` of each of `rank`'s parts, for a local sequence of
    /// `seq_local` rows (`parts()` must divide it).
    pub fn global_rows(self, rank: usize, world: usize, seq_local: usize) -> Vec<(usize, usize)> {
        let c = seq_local / self.parts();
        (0..self.parts())
            .map(|p| {
                let g = self.chunk(rank, world, p);
                (g * c, (g + 1) * c)
            })
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Sharding::ZigZag => "zigzag",
            Sharding::Contiguous => "contiguous",
        }
    }
}

/// One block of work: local query part `q_part` against part `k_part` of the K/V shard in hand,
/// with or without the causal mask (a diagonal block: the same global chunk on both sides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub q_part: usize,
    pub k_part: usize,
    pub causal: bool,
}

/// The blocks rank `rank` computes against the K/V shard of rank `kv_rank`: every pair of parts
/// whose keys its queries may see. Without a causal mask that is every pair; with one, a query
/// chunk sees earlier key chunks whole, its own chunk through the mask, later ones not at all.
pub fn blocks(
    sharding: Sharding,
    causal: bool,
    rank: usize,
    kv_rank: usize,
    world: usize,
) -> Vec<Block> {
    let mut out = Vec::new();
    for q_part in 0..sharding.parts() {
        let cq = sharding.chunk(rank, world, q_part);
        for k_part in 0..sharding.parts() {
            let ck = sharding.chunk(kv_rank, world, k_part);
            if !causal || cq > ck {
                out.push(Block {
                    q_part,
                    k_part,
                    causal: false,
                });
            } else if cq == ck {
                out.push(Block {
                    q_part,
                    k_part,
                    causal: true,
                });
            }
        }
    }
    out
}

/// The rank whose K/V shard `rank` holds at ring step `step` (shards travel to rank + 1).
pub fn kv_rank_at(rank: usize, world: usize, step: usize) -> usize {
    (rank + world - step % world) % world
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (query row, key row) pair the mask allows is covered by exactly one block of one
    /// step, and no other pair is.
    fn check_cover(sharding: Sharding, causal: bool, world: usize) {
        let c = 3; // rows per chunk
        let seq_local = c * sharding.parts();
        let total = seq_local * world;
        let mut seen = vec![0u32; total * total];
        for rank in 0..world {
            let q_rows = sharding.global_rows(rank, world, seq_local);
            for step in 0..world {
                let kv = kv_rank_at(rank, world, step);
                let k_rows = sharding.global_rows(kv, world, seq_local);
                for b in blocks(sharding, causal, rank, kv, world) {
                    let (q0, _) = q_rows[b.q_part];
                    let (k0, _) = k_rows[b.k_part];
                    for i in 0..c {
                        for j in 0..c {
                            // A diagonal block is square: bottom-right and top-left agree.
                            if !b.causal || j <= i {
                                seen[(q0 + i) * total + k0 + j] += 1;
                            }
                        }
                    }
                }
            }
        }
        for i in 0..total {
            for j in 0..total {
                let want = u32::from(!causal || j <= i);
                assert_eq!(
                    seen[i * total + j],
                    want,
                    "{sharding:?} causal={causal} world={world} ({i},{j})"
                );
            }
        }
    }

    #[test]
    fn blocks_cover_the_mask_exactly_once() {
        for world in 1..=8 {
            check_cover(Sharding::ZigZag, true, world);
            check_cover(Sharding::ZigZag, false, world);
            check_cover(Sharding::Contiguous, true, world);
            check_cover(Sharding::Contiguous, false, world);
        }
    }

    #[test]
    fn zigzag_causal_work_is_equal_on_every_rank_at_every_step() {
        // Work of a block in units of a full chunk × chunk block (a diagonal one is half).
        for world in 2..=8 {
            for step in 1..world {
                let work: Vec<usize> = (0..world)
                    .map(|r| {
                        blocks(Sharding::ZigZag, true, r, kv_rank_at(r, world, step), world)
                            .iter()
                            .map(|b| if b.causal { 1 } else { 2 })
                            .sum()
                    })
                    .collect();
                assert!(
                    work.iter().all(|&w| w == 4),
                    "world {world} step {step}: {work:?}"
                );
            }
            // Step 0 (own shard): two diagonals and one full block on every rank.
            for r in 0..world {
                let b = blocks(Sharding::ZigZag, true, r, r, world);
                assert_eq!(b.iter().filter(|b| b.causal).count(), 2);
                assert_eq!(b.len(), 3);
            }
        }
    }

    #[test]
    fn shards_travel_one_rank_per_step() {
        assert_eq!(kv_rank_at(0, 4, 0), 0);
        assert_eq!(kv_rank_at(0, 4, 1), 3);
        assert_eq!(kv_rank_at(3, 4, 3), 0);
    }
}
