//! Embeds every file under `kernels/` so a built binary compiles its kernels with NVRTC at run
//! time without the source tree next to it.
use std::io::Write;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("kernels/ readable")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            collect(&p, root, out);
        } else if matches!(p.extension().and_then(|x| x.to_str()), Some("cu" | "cuh")) {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, p));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest
        .join("../../kernels")
        .canonicalize()
        .expect("kernels/ beside crates/");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    for (_, p) in &files {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("kernel_sources.rs");
    let mut f = std::fs::File::create(out).unwrap();
    writeln!(
        f,
        "/// (path under kernels/, contents)\npub static KERNEL_SOURCES: &[(&str, &str)] = &["
    )
    .unwrap();
    for (rel, p) in &files {
        writeln!(
            f,
            "    ({rel:?}, include_str!({:?})),",
            p.display().to_string()
        )
        .unwrap();
    }
    writeln!(f, "];").unwrap();
}
