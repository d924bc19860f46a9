//! insta snapshots of what users and tools read: the capabilities table, every generation's
//! launch configuration on the ladder shapes (synthetic H100), and the messages for bad input.
//! Update after an intended change with `INSTA_UPDATE=always cargo test -p flashcore --test
//! snapshots` (or `cargo insta review`) and commit the .snap files.

use flashcore::{
    AttentionProblem, DType, DeviceInfo, Layout, ProblemStrides, TensorStrides, LADDER,
};

// The table lists every compiled-in generation: with fewer features it is another table.
#[cfg(all_generations)]
#[test]
fn capabilities_table() {
    insta::assert_snapshot!("capabilities_table", flashcore::capabilities_table());
}

#[test]
fn launch_configurations_on_the_ladder() {
    let dev = DeviceInfo::synthetic_h100();
    for k in flashcore::kernels() {
        let mut text = String::new();
        for (b, h, s, d) in LADDER {
            for causal in [false, true] {
                let p = AttentionProblem::new(b, h, s, d)
                    .with_causal(causal)
                    .with_layout(Layout::Bhsd);
                text.push_str(&format!(
                    "B={b} H={h} S={s} D={d}{}\n  {}\n",
                    if causal { " causal" } else { "" },
                    flashcore::describe_plan(k.as_ref(), &p, &dev).replace('\n', "\n  ")
                ));
            }
        }
        insta::assert_snapshot!(format!("launch_{}", k.name()), text);
    }
}

/// `p` with every tensor given row stride `row` (heads and batches packed after it).
fn strided(p: AttentionProblem, row: usize) -> AttentionProblem {
    let st = TensorStrides {
        batch: row * p.seq_q * p.heads_q,
        head: row * p.seq_q,
        row,
    };
    AttentionProblem {
        custom_strides: Some(ProblemStrides {
            q: st,
            k: st,
            v: st,
            o: st,
        }),
        ..p
    }
}

#[test]
fn messages_for_bad_input() {
    let base = AttentionProblem::new(1, 8, 512, 64);
    let invalid = [
        ("head_dim 0", AttentionProblem::new(1, 8, 512, 0)),
        ("no query heads", AttentionProblem::new(1, 0, 512, 64)),
        ("no kv heads", base.clone().with_kv(0, 512)),
        ("heads not divisible", base.clone().with_kv(3, 512)),
        ("NaN scale", base.clone().with_scale(f32::NAN)),
        ("infinite scale", base.clone().with_scale(f32::INFINITY)),
        ("seq past i32", AttentionProblem::new(1, 1, 1 << 31, 64)),
        (
            "too many rows",
            AttentionProblem::new(1 << 16, 1 << 16, 1 << 16, 1),
        ),
        ("overlapping rows", strided(base.clone(), 32)),
    ];
    let mut text = String::from("AttentionProblem::validate\n");
    for (what, p) in &invalid {
        let r = p.validate();
        assert!(r.is_err(), "{what} validated");
        text.push_str(&format!("  {what}: {}\n", r.unwrap_err()));
    }
    let unsupported = [
        ("head_dim 513", AttentionProblem::new(1, 8, 512, 513)),
        ("head_dim 72", AttentionProblem::new(1, 8, 512, 72)),
        ("head_dim 7", AttentionProblem::new(1, 8, 512, 7)),
        (
            "bf16 causal GQA bshd",
            base.clone()
                .with_kv(2, 512)
                .with_causal(true)
                .with_dtype(DType::Bf16),
        ),
        (
            "row stride 68 (not a multiple of 8)",
            strided(base.clone(), 68),
        ),
        ("negative scale", base.clone().with_scale(-0.125)),
    ];
    let devices = [DeviceInfo::synthetic_h100(), DeviceInfo::synthetic_sm86()];
    text.push_str("\nAttention::supports (Capabilities::check, then plan)\n");
    for (what, p) in &unsupported {
        p.validate().unwrap();
        for dev in &devices {
            text.push_str(&format!("  {what} on {}\n", dev.name));
            for k in flashcore::kernels() {
                let r = match k.supports(p, dev) {
                    Ok(()) => "ok".to_string(),
                    Err(u) => u.to_string(),
                };
                text.push_str(&format!("    {}: {r}\n", k.name()));
            }
        }
    }
    insta::assert_snapshot!("bad_input_messages", text);
}
