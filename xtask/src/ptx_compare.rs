//! `check-kernels --compare-ptx DIR`: which builds' PTX differ from an earlier `--dump-ptx` dump.
//!
//! A source edit changes PTX in ways that mean nothing for the machine code: line info, register
//! and label numbering, the per-file hash NVRTC puts in internal names, register declarations.
//! Those are taken out before comparing, so "same" means the same instructions in the same order,
//! and "reordered" the same instructions in another order (the usual effect of an edit in code the
//! build does not use). Until 2026-11-25 (commit 8c2255b) this was done by hand to claim "every
//! dense build unchanged".

use std::sync::OnceLock;

use regex::Regex;

/// How a build's PTX compares with the earlier dump's file of the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// The same normalized lines, in another order.
    Reordered,
    /// Lines only in the old file, lines only in the new one (as multisets).
    Changed {
        removed: usize,
        added: usize,
    },
    /// No file of that name in the earlier dump.
    New,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Same => write!(f, "same"),
            Verdict::Reordered => write!(f, "same instructions, reordered"),
            Verdict::Changed { removed, added } => write!(f, "changed (-{removed} +{added} lines)"),
            Verdict::New => write!(f, "new build"),
        }
    }
}

fn patterns() -> &'static [(Regex, &'static str)] {
    static P: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    P.get_or_init(|| {
        [
            // Virtual registers: %r12, %rd3, %f7, %p1, %fd2, %rs5, %h1, %hh2.
            (r"%(rd|rs|fd|hh|r|f|p|h)[0-9]+\b", "%${1}N"),
            // Branch labels.
            (r"\$L__[A-Za-z0-9_]+", "LABEL"),
            // Internal linkage names carry a hash of the translation unit.
            (
                r"_INTERNAL_[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+?_cu_[0-9a-f]+",
                "INTERNAL",
            ),
        ]
        .into_iter()
        .map(|(re, to)| (Regex::new(re).expect("valid pattern"), to))
        .collect()
    })
}

/// The PTX's instructions and declarations with the meaningless differences taken out.
pub fn normalize(ptx: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in ptx.lines() {
        let t = line.trim();
        if t.starts_with(".section") && t.contains(".debug") {
            break; // debug sections run to the end of the file
        }
        if t.is_empty()
            || t.starts_with("//")
            || t.starts_with(".loc")
            || t.starts_with(".file")
            || t.starts_with(".reg")
        {
            continue;
        }
        let mut s = t.to_string();
        for (re, to) in patterns() {
            s = re.replace_all(&s, *to).into_owned();
        }
        out.push(s);
    }
    out
}

pub fn compare(old: &str, new: &str) -> Verdict {
    let (a, b) = (normalize(old), normalize(new));
    if a == b {
        return Verdict::Same;
    }
    let mut count = std::collections::HashMap::<&str, i64>::new();
    for l in &a {
        *count.entry(l).or_default() += 1;
    }
    for l in &b {
        *count.entry(l).or_default() -= 1;
    }
    let removed: i64 = count.values().filter(|&&c| c > 0).sum();
    let added: i64 = -count.values().filter(|&&c| c < 0).sum::<i64>();
    if removed == 0 && added == 0 {
        Verdict::Reordered
    } else {
        Verdict::Changed {
            removed: removed as usize,
            added: added as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "\
.global .align 4 .u32 _ZN56_INTERNAL_00000000_25_gen5_persistent_hopper_cu_c047bba93fch8NUM_BARSE = 12;
.reg .b32 %r<120>;
\t.loc\t1 42 7
\tadd.s32 \t%r12, %r3, 1;
$L__BB0_4:
\tsetp.lt.s32 \t%p1, %r12, %r7;
\t@%p1 bra \t$L__BB0_4;
\t.section\t.debug_str
{ 1 2 3 }
";

    #[test]
    fn numbering_line_info_and_hashes_do_not_count() {
        let renumbered = "\
.global .align 4 .u32 _ZN56_INTERNAL_00000000_25_gen5_persistent_hopper_cu_9d1e44023fch8NUM_BARSE = 12;
.reg .b32 %r<140>;
\t.loc\t1 57 3
\tadd.s32 \t%r40, %r9, 1;
$L__BB0_9:
\tsetp.lt.s32 \t%p4, %r40, %r2;
\t@%p4 bra \t$L__BB0_9;
";
        assert_eq!(compare(OLD, renumbered), Verdict::Same);
    }

    #[test]
    fn reordering_and_real_changes_are_told_apart() {
        let reordered = "\
.global .align 4 .u32 _ZN56_INTERNAL_00000000_25_gen5_persistent_hopper_cu_c047bba93fch8NUM_BARSE = 12;
$L__BB0_4:
\tadd.s32 \t%r12, %r3, 1;
\tsetp.lt.s32 \t%p1, %r12, %r7;
\t@%p1 bra \t$L__BB0_4;
";
        assert_eq!(compare(OLD, reordered), Verdict::Reordered);
        let changed = "\
.global .align 4 .u32 _ZN56_INTERNAL_00000000_25_gen5_persistent_hopper_cu_c047bba93fch8NUM_BARSE = 13;
\tadd.s32 \t%r12, %r3, 1;
$L__BB0_4:
\tsetp.lt.s32 \t%p1, %r12, %r7;
\tsetp.lt.s32 \t%p2, %r12, %r8;
\t@%p1 bra \t$L__BB0_4;
";
        assert_eq!(
            compare(OLD, changed),
            Verdict::Changed {
                removed: 1,
                added: 2
            }
        );
    }
}
