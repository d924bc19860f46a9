//! Generation 5, portable path: persistent, warp-specialized cp.async + mma.sync kernel
//! (`kernels/gen5_persistent_portable.cu`, design and barrier protocol in
//! `docs/generations/gen5-persistent.md`, "Portable path").
//!
//! One launch of `sm_count x CTAs-per-SM` CTAs (capped at the item count), each looping over
//! (batch, head, q tile) work items. A CTA is W consumer warps ([`choose_config`]: 16 query
//! rows each, Q, O and the softmax state in registers, mma.sync m16n8k16) and 1 producer warp
//! that streams Q and the K/V tiles with 16-byte cp.async into shared-memory rings. "Full" is
//! signalled by mbarriers that the cp.async hardware completes (`cp.async.mbarrier.arrive.noinc`),
//! "empty" by named barriers (consumers `bar.arrive`, the producer `bar.sync`s). Runs on sm_80
//! and later.
//!
//! Every inference mode of `docs/MODES.md` (varlen, KV cache with `seqused_k`, pages, append,
//! windows, softcap, ALiBi) runs in a build of its own (`FC_PORTABLE_MODES=1`), which the plan
//! asks for only when the problem is not dense: items are (batch, head, q tile) over
//! `max_seqlen_q` tiles, those past a sequence's end write nothing, and each item visits only
//! the key tiles its rows see.
//!
//! Head dims 264-512 run in the 512 build, whose items each take one of [`V_BLOCKS`] blocks of
//! V's and O's columns ([`V_BLOCKED_HEAD_DIM`]).

use flashcore_core::plan::{Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan};
use flashcore_core::problem::AttentionProblem;
use flashcore_core::{DeviceInfo, ModeSupport, Unsupported};

use crate::env::Env;

/// The portable (sm_80+) generation-5 kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct PersistentPortable;

const NAME: &str = "persistent-portable";
const SOURCE: &str = "gen5_persistent_portable.cu";
const ENTRY: &str = "attention_persistent_portable";

/// Head dims the kernel is compiled for (FC_HEAD_DIM): FlashAttention-2's instances, every
/// multiple of 32 up to 256 (the swizzled tile takes rows of 4k 16-byte chunks). Every other
/// multiple of 8 up to 256 runs in the next instance up, padded ([`instance_head_dim`]).
pub const HEAD_DIMS: &[usize] = &[32, 64, 96, 128, 160, 192, 224, 256];

/// The head dim past 256 the kernel is compiled for: O's 512 columns would take every register
/// a thread has, so V and O run in [`V_BLOCKS`] blocks of [`V_BLOCK_COLS`] columns, a work item
/// each (FC_PORTABLE_V_BLOCKS; each block recomputes S over the whole head dim). Every multiple
/// of 8 from 264 runs in it, padded.
pub const V_BLOCKED_HEAD_DIM: usize = 512;
/// Blocks of V's and O's columns at [`V_BLOCKED_HEAD_DIM`].
pub const V_BLOCKS: usize = 2;
/// V's and O's columns per block there (the build's DV).
pub const V_BLOCK_COLS: usize = V_BLOCKED_HEAD_DIM / V_BLOCKS;
/// Q slices in registers at [`V_BLOCKED_HEAD_DIM`]: beside O (128 f32) and a 32-key S tile, 10
/// spilled 8 bytes in the dense dynamic build on sm_90a; 8 spill in none.
pub const V_BLOCKED_Q_SLICES: usize = 8;

/// The compiled head dim a problem's head dim runs in: itself, or the next instance up, the
/// columns past it zero-filled on load and left unstored (FC_PORTABLE_PAD_D).
pub fn instance_head_dim(head_dim: usize) -> Option<usize> {
    HEAD_DIMS
        .iter()
        .copied()
        .chain([V_BLOCKED_HEAD_DIM])
        .find(|&d| d >= head_dim)
}

/// Above this head dim O (D / 2 f32 per thread) and S no longer fit the 168 registers a 9- or
/// 10-warp SM leaves: the plan takes one CTA of at most 7 consumer warps (255 registers).
pub const MAX_HEAD_DIM_168_REGISTERS: usize = 128;
/// Consumer warps above [`MAX_HEAD_DIM_168_REGISTERS`], tried in this order with 64-key then
/// 32-key tiles until Q and a 2-stage K/V ring fit the device's shared memory.
pub const WIDE_HEAD_DIM_WARPS: &[usize] = &[7, 4];
/// Registers the Q slices of a wide head dim may take beside O and S ([`default_q_slices`]).
pub const WIDE_HEAD_DIM_REGISTER_PLAN: usize = 184;
/// Consumer warps per CTA by default before Hopper (FC_PORTABLE_WARPS): 16 query rows each, so
/// 128-row items.
pub const WARPS: usize = 8;
/// On sm_90: 4 consumer warps (64-row items, two CTAs per SM) beat 8 at every ladder shape on
/// the H100 (docs/results/2026-11-23-hopper-variants-h100); not measured on Ampere/Ada.
pub const WARPS_SM90: usize = 4;
/// On sm_90 at head dim 128: 7 consumer warps (112-row items), one CTA per SM. With the producer
/// that is 8 warps per SM, 2 per sub-partition, so a thread may use 255 registers: all of Q
/// stays in registers and 128-key tiles fit. Ahead of the 4-warp layout by 10-17 % at every D = 128
/// ladder shape on the H100 (docs/results/2026-11-23-portable-d128-h100).
pub const WARPS_SM90_D128: usize = 7;
/// Keys per K/V tile by default (FC_PORTABLE_BLOCK_N).
pub const BLOCK_N: usize = 64;
/// Deepest K/V ring the plan asks for; it takes the deepest of 2..=MAX_STAGES that fits.
pub const MAX_STAGES: usize = 4;
/// Barrier and per-warp bookkeeping region at the end of shared memory (BAR_BYTES).
pub const BAR_BYTES: usize = 256;
/// Modes build (FC_PORTABLE_MODES): bytes per consumer warp after the barrier region, where each
/// warp parks its item's first row, last tile, batch, head and lengths (MODE_INFO_BYTES).
pub const MODE_INFO_BYTES_PER_WARP: usize = 32;
/// Workspace words the dynamic schedule uses as counters (at the start of the workspace).
pub const DYNAMIC_COUNTER_WORDS: usize = 2;
/// The consumers keep the item index in bits 6..31 of one register (RING_ITEM_SHIFT).
pub const MAX_ITEMS: usize = 1 << 25;

/// One kernel configuration (the defines of one compiled module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub head_dim: usize,
    /// V's and O's columns in one V block: the V head dim (FC_HEAD_DIM_V when it differs from
    /// `head_dim`), or a block of it (FC_PORTABLE_V_BLOCKS).
    pub head_dim_v: usize,
    /// Blocks of V's and O's columns, a work item each (FC_PORTABLE_V_BLOCKS; 1 but at
    /// [`V_BLOCKED_HEAD_DIM`]).
    pub v_blocks: usize,
    /// Consumer warps (FC_PORTABLE_WARPS); the q tile is 16 x m_tiles x warps rows.
    pub warps: usize,
    /// m16 row tiles per consumer warp (FC_PORTABLE_WARP_M_TILES): 1 (16 rows) or 2 (32 rows,
    /// each K/V fragment read from shared memory feeds two mma.sync).
    pub m_tiles: usize,
    /// Keys per K/V tile (FC_PORTABLE_BLOCK_N).
    pub block_n: usize,
    /// K/V ring depth (FC_PORTABLE_STAGES).
    pub stages: usize,
    /// Q buffers (FC_PORTABLE_Q_STAGES).
    pub q_stages: usize,
    /// 16-wide Q slices held in registers (FC_PORTABLE_Q_REG_SLICES); the rest is re-read from
    /// shared memory for every K tile.
    pub q_reg_slices: usize,
    /// CTAs per SM the registers are sized for (FC_PORTABLE_MIN_BLOCKS).
    pub ctas_per_sm: usize,
    /// Items taken from a global counter instead of the static round-robin (FC_PORTABLE_DYNAMIC).
    pub dynamic: bool,
    /// The inference-modes build (FC_PORTABLE_MODES): varlen, KV cache, pages, windows, softcap,
    /// ALiBi. Only for problems that use them; it adds [`MODE_INFO_BYTES_PER_WARP`] per warp.
    pub modes: bool,
}

impl Config {
    pub fn block_m(&self) -> usize {
        16 * self.m_tiles * self.warps
    }
    pub fn threads(&self) -> u32 {
        32 * (self.warps as u32 + 1)
    }
    /// Dynamic shared memory; mirrors `SMEM_BYTES` in the kernel:
    /// Q_STAGES x (BM x D) + STAGES x (BN x D + BN x DV) elements of 2 bytes, + BAR_BYTES
    /// (+ 32 bytes per consumer warp in the modes build).
    pub fn smem_bytes(&self) -> usize {
        let q = self.block_m() * self.head_dim * 2;
        let kv = self.block_n * (self.head_dim + self.head_dim_v) * 2;
        self.q_stages * q + self.stages * kv + BAR_BYTES + mode_info_bytes(self.warps, self.modes)
    }
}

/// The modes build's per-warp item info (MODE_INFO_BYTES in the kernel); 0 for the dense build.
pub fn mode_info_bytes(warps: usize, modes: bool) -> usize {
    if modes {
        MODE_INFO_BYTES_PER_WARP * warps
    } else {
        0
    }
}

/// Shared memory per block for a configuration (the formula in one place for tests and docs).
pub fn smem_bytes(
    head_dim: usize,
    block_m: usize,
    block_n: usize,
    stages: usize,
    q_stages: usize,
) -> usize {
    smem_bytes_v(head_dim, head_dim, block_m, block_n, stages, q_stages)
}

/// [`smem_bytes`] with V's own head dim (the V ring's rows are `head_dim_v` wide).
pub fn smem_bytes_v(
    head_dim: usize,
    head_dim_v: usize,
    block_m: usize,
    block_n: usize,
    stages: usize,
    q_stages: usize,
) -> usize {
    Config {
        head_dim,
        head_dim_v,
        v_blocks: 1,
        warps: block_m / 16,
        m_tiles: 1,
        block_n,
        stages,
        q_stages,
        q_reg_slices: head_dim / 16,
        ctas_per_sm: 1,
        dynamic: false,
        modes: false,
    }
    .smem_bytes()
}

/// Tuning overrides read from the environment (for A/B runs; the defaults are the plan's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub warps: Option<usize>,
    pub m_tiles: Option<usize>,
    pub ctas_per_sm: Option<usize>,
    pub block_n: Option<usize>,
    pub stages: Option<usize>,
    pub q_stages: Option<usize>,
    pub q_reg_slices: Option<usize>,
    pub dynamic: Option<bool>,
    pub l2_section_mib: Option<usize>,
    /// `FLASHCORE_PORTABLE_HEAD_MAJOR=0|1`: one head per L2 section without causal masking.
    pub head_major: Option<bool>,
}

impl Overrides {
    /// Unparsable values count as unset, as they always have here; the plan checks the numbers.
    pub fn from_env() -> Self {
        let env = Env::process();
        let number = |name: &str| env.number_or_unset(name);
        Overrides {
            warps: number("FLASHCORE_PORTABLE_WARPS"),
            m_tiles: number("FLASHCORE_PORTABLE_WARP_M_TILES"),
            ctas_per_sm: number("FLASHCORE_PORTABLE_CTAS_PER_SM"),
            block_n: number("FLASHCORE_PORTABLE_BLOCK_N"),
            stages: number("FLASHCORE_PORTABLE_STAGES"),
            q_stages: number("FLASHCORE_PORTABLE_Q_STAGES"),
            q_reg_slices: number("FLASHCORE_PORTABLE_Q_REG_SLICES"),
            dynamic: env.flag_or_unset("FLASHCORE_PORTABLE_DYNAMIC"),
            l2_section_mib: number("FLASHCORE_PORTABLE_L2_SECTION_MIB"),
            head_major: env.flag_or_unset("FLASHCORE_PORTABLE_HEAD_MAJOR"),
        }
    }
}

/// Registers per thread ptxas may use for `warps` consumer warps (+ the producer) and
/// `ctas_per_sm` CTAs per SM: each of the SM's 4 sub-partitions has 16 K registers for the warps
/// placed on it, so 9 or 10 warps per SM (3 on some sub-partition) cap a thread at 168, while
/// up to 8 warps (2 per sub-partition) leave the full 255.
pub fn register_budget(warps: usize, ctas_per_sm: usize) -> usize {
    let warps_per_sub_partition = ((warps + 1) * ctas_per_sm).div_ceil(4).max(1);
    (16384 / (32 * warps_per_sub_partition) / 8 * 8).min(255)
}

/// Picks the configuration for a head dim on a device.
///
/// * sm_80..89: 8 consumer warps (128-row items), one CTA per SM: 9 warps put 3 on one SM
///   sub-partition, so ptxas caps the kernel at 168 registers per thread ([`register_budget`]).
/// * sm_90, D = 64: 4 consumer warps, two CTAs per SM (also 168 registers), 128-key tiles.
/// * sm_90, D = 128: 7 consumer warps, one CTA per SM: 8 warps per SM leave 255 registers, so
///   all of Q stays in registers beside 128-key S tiles (ptxas: 240, no spill).
/// * Q in registers: all of it at D = 64; at D = 128 all 8 slices fit under the 168 cap on
///   sm_80..89 (ptxas: 168, no spill), but not in the sm_90 build, which then keeps 6 (5 with the
///   dynamic schedule) and re-reads the rest per K tile — and double-buffers Q so that the next
///   item's Q can load while the current one still reads its buffer.
/// * The deepest K/V ring of 2..=4 stages that fits the opt-in shared memory.
/// * `modes` (the FC_PORTABLE_MODES build): the same, except 64-key tiles at D = 64 on sm_90
///   (the block info and score modifiers do not fit beside a 128-key S tile in 168 registers:
///   ptxas spills 28 bytes), and 32 bytes more shared memory per warp.
/// * `batch_invariant`: the key tile's width sets the order a row's keys are summed in, so a
///   dense problem takes the modes build's width (a sequence alone then sums as it does in a
///   varlen batch).
/// * A V head dim past 256 ([`V_BLOCKED_HEAD_DIM`]) runs in [`V_BLOCKS`] blocks of
///   [`V_BLOCK_COLS`] columns; the layout is sized for one block.
pub fn choose_config(
    head_dim: usize,
    head_dim_v: usize,
    dynamic: bool,
    modes: bool,
    batch_invariant: bool,
    device: &DeviceInfo,
    ov: &Overrides,
) -> Result<Config, Unsupported> {
    let v_blocks = if head_dim_v > V_BLOCK_COLS {
        V_BLOCKS
    } else {
        1
    };
    if v_blocks > 1 && head_dim_v != V_BLOCKED_HEAD_DIM {
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim_v {head_dim_v}: past {V_BLOCK_COLS} V's columns run in {V_BLOCKS} blocks of \
                 {V_BLOCK_COLS} (the {V_BLOCKED_HEAD_DIM} build)"
            ),
        ));
    }
    let head_dim_v = head_dim_v / v_blocks;
    let hopper = device.compute_capability >= (9, 0);
    let wide = head_dim > MAX_HEAD_DIM_168_REGISTERS;
    let wide_layout = if wide {
        Some(wide_head_dim_layout(
            head_dim, head_dim_v, modes, device, ov,
        )?)
    } else {
        None
    };
    let default_warps = match (hopper, head_dim, wide_layout) {
        (_, _, Some((warps, _))) => warps,
        (true, 96 | 128, _) => WARPS_SM90_D128,
        (true, _, _) => WARPS_SM90,
        (false, _, _) => WARPS,
    };
    let warps = ov.warps.unwrap_or(default_warps);
    if !(1..=8).contains(&warps) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_WARPS={warps}: consumer warps must be in 1..=8"),
        ));
    }
    let m_tiles = ov.m_tiles.unwrap_or(1);
    if m_tiles != 1 && m_tiles != 2 {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_WARP_M_TILES={m_tiles}: row tiles per warp must be 1 or 2"),
        ));
    }
    // 128-key tiles on sm_90 in the two measured layouts: half the per-tile overhead (waits,
    // releases, row reductions) per key. D = 64, 4 warps: S still fits in 168 registers, ahead
    // of 64-key tiles at every D = 64 ladder shape (docs/results/2026-11-23-portable-ab-h100).
    // D = 128, 7 warps: S + O + all of Q fit in the 255-register budget (ptxas: 240), +10 % over
    // 64-key tiles (docs/results/2026-11-23-portable-d128-h100).
    let default_block_n = match (hopper, head_dim, warps, wide_layout) {
        (_, _, _, Some((_, block_n))) => block_n,
        (true, 32 | 64, 4, _) if !modes && !batch_invariant => 128,
        (true, 96 | 128, 7, _) => 128,
        _ => BLOCK_N,
    };
    let block_n = ov.block_n.unwrap_or(default_block_n);
    if ![32, 64, 128].contains(&block_n) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_BLOCK_N={block_n}: keys per tile must be 32, 64 or 128"),
        ));
    }
    // With 4 consumer warps the CTA is 160 threads and two share an SM; with 3, two CTAs make
    // 8 warps per SM (2 per sub-partition: up to 255 registers per thread).
    let ctas_per_sm = ov
        .ctas_per_sm
        .unwrap_or(if warps <= 4 && !wide { 2 } else { 1 });
    if !(1..=4).contains(&ctas_per_sm) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_CTAS_PER_SM={ctas_per_sm}: must be in 1..=4"),
        ));
    }
    let registers = register_budget(warps, ctas_per_sm);
    if block_n == 128 && head_dim >= 96 && registers < 255 {
        // S (64 f32) + O (64) + Q does not fit in 168 registers: ptxas spills ~300 bytes.
        return Err(Unsupported::new(
            NAME,
            format!(
                "FLASHCORE_PORTABLE_BLOCK_N=128 at head_dim {head_dim} needs the 255-register budget (at most \
                 8 warps per SM); {warps} consumer warps x {ctas_per_sm} CTAs leave {registers}"
            ),
        ));
    }
    if wide && (block_n > BLOCK_N || registers < 255) {
        // O alone is D / 2 registers a thread.
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim {head_dim} needs at most {BLOCK_N}-key tiles and the 255-register budget (at \
                 most 8 warps per SM); FLASHCORE_PORTABLE_BLOCK_N={block_n} with {warps} consumer warps x \
                 {ctas_per_sm} CTAs leave {registers}"
            ),
        ));
    }
    let all_slices = head_dim / 16;
    // The dynamic schedule's item hand-over costs the consumers one more register at D = 128
    // on sm_90 (ptxas: 4 bytes of spill with 6 slices, none with 5).
    let default_slices = if head_dim == V_BLOCKED_HEAD_DIM {
        // (O is a V block's V_BLOCK_COLS / 2 registers a thread there.)
        V_BLOCKED_Q_SLICES
    } else if wide {
        default_q_slices(head_dim, block_n)
    } else if head_dim == 128 && device.compute_capability >= (9, 0) && registers < 255 {
        if dynamic && warps == 4 {
            5
        } else {
            6
        }
    } else {
        all_slices
    };
    let q_reg_slices = ov.q_reg_slices.unwrap_or(default_slices);
    if q_reg_slices > all_slices {
        return Err(Unsupported::new(
            NAME,
            format!(
                "FLASHCORE_PORTABLE_Q_REG_SLICES={q_reg_slices}: must be in 0..={all_slices} at head_dim {head_dim}"
            ),
        ));
    }
    let limit = device.max_shared_memory_per_block_optin as usize;
    // Two CTAs per SM share the SM's shared memory (opt-in limit + 1 KB reserved per CTA).
    let per_cta_limit = if ctas_per_sm == 1 {
        limit
    } else {
        (limit + 1024) / ctas_per_sm - 1024
    };
    let block_m = 16 * m_tiles * warps;
    let fits = |stages: usize, q_stages: usize| {
        smem_bytes_v(head_dim, head_dim_v, block_m, block_n, stages, q_stages)
            + mode_info_bytes(warps, modes)
            <= per_cta_limit
    };
    let q_stages = match ov.q_stages {
        Some(q) if q == 1 || q == 2 => q,
        Some(q) => {
            return Err(Unsupported::new(
                NAME,
                format!("FLASHCORE_PORTABLE_Q_STAGES={q}: must be 1 or 2"),
            ))
        }
        // A second Q buffer only pays when Q is partly re-read from shared memory (otherwise the
        // buffer is released right after the item's first wait).
        None if q_reg_slices < all_slices && fits(2, 2) => 2,
        None => 1,
    };
    let stages = match ov.stages {
        Some(s) if (2..=5).contains(&s) => s,
        Some(s) => {
            return Err(Unsupported::new(
                NAME,
                format!("FLASHCORE_PORTABLE_STAGES={s}: must be in 2..=5"),
            ))
        }
        None => (2..=MAX_STAGES)
            .rev()
            .find(|&s| fits(s, q_stages))
            .unwrap_or(2),
    };
    let cfg = Config {
        head_dim,
        head_dim_v,
        v_blocks,
        warps,
        m_tiles,
        block_n,
        stages,
        q_stages,
        q_reg_slices,
        ctas_per_sm,
        dynamic,
        modes,
    };
    let smem = cfg.smem_bytes();
    if smem > per_cta_limit {
        let q = cfg.block_m() * head_dim * 2;
        let kv = block_n * (head_dim + head_dim_v) * 2;
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim {head_dim} needs {smem} bytes of shared memory per block ({q_stages} x Q {q} + \
                 {stages} x (K + V) {kv} + {BAR_BYTES} barriers{}), the device allows {per_cta_limit}{}",
                if modes {
                    format!(" + {} item info", mode_info_bytes(warps, modes))
                } else {
                    String::new()
                },
                if ctas_per_sm > 1 {
                    format!(" per CTA at {ctas_per_sm} CTAs per SM")
                } else {
                    " with opt-in".to_string()
                }
            ),
        ));
    }
    Ok(cfg)
}

/// Consumer warps and keys per tile above [`MAX_HEAD_DIM_168_REGISTERS`]: the first of
/// [`WIDE_HEAD_DIM_WARPS`] x (64, 32 keys) whose Q buffer and 2-stage K/V ring fit one CTA's
/// shared memory (an override of either narrows the search to it). On an H100 or an A100, 7 warps
/// of 64-key tiles (D = 256: 56 KiB of Q, 64 KiB a stage); on an sm_86/89 part (99 KiB), 4 warps
/// of 32-key tiles.
fn wide_head_dim_layout(
    head_dim: usize,
    head_dim_v: usize,
    modes: bool,
    device: &DeviceInfo,
    ov: &Overrides,
) -> Result<(usize, usize), Unsupported> {
    let limit = device.max_shared_memory_per_block_optin as usize;
    let warp_choices = ov.warps.map_or(WIDE_HEAD_DIM_WARPS.to_vec(), |w| vec![w]);
    let block_n_choices = ov.block_n.map_or(vec![BLOCK_N, 32], |n| vec![n]);
    for &warps in &warp_choices {
        for &block_n in &block_n_choices {
            let bytes = smem_bytes_v(head_dim, head_dim_v, 16 * warps, block_n, 2, 1)
                + mode_info_bytes(warps, modes);
            if bytes <= limit {
                return Ok((warps, block_n));
            }
        }
    }
    // The smallest layout tried (the last of each list) is what the message quotes.
    let (warps, block_n) = (
        warp_choices[warp_choices.len() - 1],
        block_n_choices[block_n_choices.len() - 1],
    );
    let least = smem_bytes_v(head_dim, head_dim_v, 16 * warps, block_n, 2, 1)
        + mode_info_bytes(warps, modes);
    Err(Unsupported::new(
        NAME,
        format!(
            "head_dim {head_dim} needs {least} bytes of shared memory per block at the least ({warps} \
             warps, {block_n}-key tiles, 2 stages), the device allows {limit} with opt-in"
        ),
    ))
}

/// Q slices held in registers above [`MAX_HEAD_DIM_168_REGISTERS`]: as many as fit beside O (D / 2
/// f32) and S (block_n / 2) under [`WIDE_HEAD_DIM_REGISTER_PLAN`] (4 registers a slice); the rest is
/// re-read from shared memory for every K tile. D = 256 with 64-key tiles keeps 6 of 16 (10 spilled 8
/// bytes on sm_90a), D = 224 keeps 10 of 14 (14 spilled 28 bytes with the dynamic schedule).
pub fn default_q_slices(head_dim: usize, block_n: usize) -> usize {
    let spare = WIDE_HEAD_DIM_REGISTER_PLAN.saturating_sub(head_dim / 2 + block_n / 2);
    (spare / 4).min(head_dim / 16)
}

/// The V (and O) head dim of a problem's build: the Q/K build's `d` when V shares the head dim
/// (padded alike); a distinct V head dim (FlashAttention 3's `headdim_v`) must be an instance
/// itself, unpadded, and at most `d`: O's registers (DV / 2 a thread) then stay within what the
/// Q/K layout was sized for.
pub fn head_dim_v_build(problem: &AttentionProblem, d: usize) -> Result<usize, Unsupported> {
    if !problem.has_distinct_head_dim_v() {
        return Ok(d);
    }
    let dv = problem.head_dim_v();
    if d == V_BLOCKED_HEAD_DIM {
        // The 512 build cuts V into blocks of its own head dim's; a distinct V there is not built.
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim_v {dv} with head_dim {}: past 256 V takes the head dim's own (the {V_BLOCKED_HEAD_DIM} \
                 build runs V in blocks of {V_BLOCK_COLS})",
                problem.head_dim
            ),
        ));
    }
    if !HEAD_DIMS.contains(&dv) || dv > d {
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim_v {dv} with head_dim {}: a distinct V head dim must be one of {HEAD_DIMS:?} \
                 and at most the head dim's build ({d})",
                problem.head_dim
            ),
        ));
    }
    Ok(dv)
}

impl PersistentPortable {
    fn plan_with(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
        ov: &Overrides,
        debug: bool,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        let d = instance_head_dim(problem.head_dim).ok_or_else(|| {
            Unsupported::new(
                NAME,
                format!("head_dim {} is past {V_BLOCKED_HEAD_DIM}", problem.head_dim),
            )
        })?;
        let dv = head_dim_v_build(problem, d)?;
        // Inference modes get their own build (FC_PORTABLE_MODES); dense problems keep the dense
        // one, unchanged.
        let modes = !problem.modes.is_dense();
        let bi = problem.batch_invariant;
        let static_cfg = choose_config(d, dv, false, modes, bi, device, ov)?;
        // (Varlen: seq_q is max_seqlen_q, so every sequence's q tiles have an item; those past
        // a shorter sequence's end finish at once.)
        let items = problem
            .batch
            .saturating_mul(problem.heads_q)
            .saturating_mul(problem.seq_q.div_ceil(static_cfg.block_m()))
            .saturating_mul(static_cfg.v_blocks);
        let slots = device.sm_count as usize * static_cfg.ctas_per_sm;
        // Dynamic schedule whenever a CTA gets more than one item: causal items differ in length
        // (a static round-robin leaves CTAs unevenly loaded), and greedy taking keeps the items
        // in flight a contiguous window of the L2-section order. With one item per CTA the
        // counter's atomics are pure overhead.
        // (Only the Q registers differ between the two: the item size, hence `items`, does not.)
        // (A padded head dim in the 512 build with `mm_prefix_ranges` keeps the static schedule:
        // there NVVM leaves O's array whole in the dynamic build, which puts O in local memory,
        // 528 bytes of stack.)
        let dynamic_builds_in_registers = !(d == V_BLOCKED_HEAD_DIM
            && d != problem.head_dim
            && problem.modes.mm_prefix.is_some());
        let cfg = if ov
            .dynamic
            .unwrap_or(items > slots && dynamic_builds_in_registers)
        {
            choose_config(d, dv, true, modes, bi, device, ov)?
        } else {
            static_cfg
        };
        if items >= MAX_ITEMS {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "{items} work items (batch x heads_q x ceil(seq_q / {}) x {} V blocks); the kernel indexes \
                     fewer than {MAX_ITEMS}",
                    cfg.block_m(),
                    cfg.v_blocks
                ),
            ));
        }
        // Persistent: every SM gets its CTAs, but no more CTAs than items.
        let ctas = (device.sm_count as usize * cfg.ctas_per_sm)
            .min(items)
            .max(1) as u32;
        // K/V bytes the item order keeps hot at once (heads per L2 section): half of L2.
        let l2_section = match ov.l2_section_mib {
            Some(mib) => (mib.max(1) as u64) << 20,
            None => (device.l2_bytes as u64 / 2).clamp(2 << 20, 64 << 20),
        };

        let mut defines = vec![
            ("FC_HEAD_DIM".to_string(), d.to_string()),
            ("FC_PORTABLE_WARPS".to_string(), cfg.warps.to_string()),
            (
                "FC_PORTABLE_WARP_M_TILES".to_string(),
                cfg.m_tiles.to_string(),
            ),
            ("FC_PORTABLE_BLOCK_N".to_string(), cfg.block_n.to_string()),
            ("FC_PORTABLE_STAGES".to_string(), cfg.stages.to_string()),
            ("FC_PORTABLE_Q_STAGES".to_string(), cfg.q_stages.to_string()),
            (
                "FC_PORTABLE_Q_REG_SLICES".to_string(),
                cfg.q_reg_slices.to_string(),
            ),
            (
                "FC_PORTABLE_MIN_BLOCKS".to_string(),
                cfg.ctas_per_sm.to_string(),
            ),
            (
                "FC_PORTABLE_L2_SECTION_BYTES".to_string(),
                format!("{l2_section}ull"),
            ),
        ];
        if d != problem.head_dim {
            defines.push(("FC_PORTABLE_PAD_D".to_string(), "1".to_string()));
        }
        if problem.has_distinct_head_dim_v() {
            defines.push(("FC_HEAD_DIM_V".to_string(), dv.to_string()));
        }
        if cfg.v_blocks > 1 {
            defines.push(("FC_PORTABLE_V_BLOCKS".to_string(), cfg.v_blocks.to_string()));
        }
        if cfg.dynamic {
            defines.push(("FC_PORTABLE_DYNAMIC".to_string(), "1".to_string()));
        }
        if cfg.modes {
            defines.push(("FC_PORTABLE_MODES".to_string(), "1".to_string()));
        }
        if let Some(head_major) = ov.head_major {
            defines.push((
                "FC_PORTABLE_HEAD_MAJOR".to_string(),
                (head_major as u32).to_string(),
            ));
        }
        if debug {
            // Bounded waits everywhere ("empty" becomes mbarriers too): a protocol deadlock
            // traps with a printf instead of hanging.
            defines.push(("FC_PORTABLE_DEBUG".to_string(), "1".to_string()));
        }

        let mut plan = LaunchPlan::single(KernelLaunch::persistent(
            SOURCE,
            ENTRY,
            defines,
            ctas,
            cfg.threads(),
            cfg.smem_bytes() as u32,
        ));
        if cfg.dynamic {
            // Workspace words 0 and 1: the next item and the CTAs done taking (zero at launch;
            // the kernel leaves them zero).
            plan.workspace_f32 = DYNAMIC_COUNTER_WORDS;
            plan.workspace_counters = DYNAMIC_COUNTER_WORDS;
        }
        Ok(plan)
    }
}

impl Attention for PersistentPortable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // cp.async, mbarrier, ldmatrix, bf16 mma.sync: sm_80. Every inference mode (the
        // FC_PORTABLE_MODES build). V may have its own head dim (FC_HEAD_DIM_V).
        // Past 256, to 512: the V-blocked build (V_BLOCKED_HEAD_DIM), and decode-shaped problems
        // on the decode kernel (decode.rs).
        Capabilities::all_features(
            HeadDims::Range {
                min: 8,
                max: crate::decode::MAX_HEAD_DIM,
                multiple_of: 8,
            },
            (8, 0),
        )
        // e4m3 caches: the decode kernel in front of it reads them (decode.rs takes every one).
        .with_modes(ModeSupport {
            kv_fp8: true,
            ..ModeSupport::ALL
        })
        .with_distinct_head_dim_v()
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        crate::decode::or_persistent(NAME, V_BLOCKED_HEAD_DIM, problem, device, || {
            let debug = Env::process().flag_or_unset("FLASHCORE_PORTABLE_DEBUG");
            self.plan_with(
                problem,
                device,
                &Overrides::from_env(),
                debug.unwrap_or(false),
            )
        })
    }
}

#[cfg(test)]
mod tests;
