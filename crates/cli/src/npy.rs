//! Reading float16/float32 `.npy` tensors and writing float32 ones, with one-line errors.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ndarray::{ArrayD, IxDyn};
use npyz::{DType as NpyDType, NpyFile, TypeChar, WriterBuilder};

/// A 4-D array read from disk as f32 (float16 files are widened exactly).
pub fn read_f32(path: &Path) -> Result<ArrayD<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let npy = NpyFile::new(&bytes[..]).map_err(|e| anyhow::anyhow!("{}: not a valid .npy file ({e})", path.display()))?;
    if npy.order() == npyz::Order::Fortran {
        bail!("{}: Fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)", path.display());
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let (type_char, size) = match npy.dtype() {
        NpyDType::Plain(ts) => (ts.type_char(), ts.size_field()),
        other => bail!("{}: unsupported dtype {other:?} (expected float16 or float32)", path.display()),
    };
    let data: Vec<f32> = match (type_char, size) {
        (TypeChar::Float, 4) => npy
            .into_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("{}: truncated or corrupt data ({e})", path.display()))?,
        (TypeChar::Float, 2) => npy
            .into_vec::<half::f16>()
            .map_err(|e| anyhow::anyhow!("{}: truncated or corrupt data ({e})", path.display()))?
            .into_iter()
            .map(f32::from)
            .collect(),
        (t, s) => bail!(
            "{}: dtype {t:?}{s} is not supported (expected float16 or float32)",
            path.display()
        ),
    };
    let expected: usize = shape.iter().product();
    if data.len() != expected {
        bail!("{}: holds {} values but its header says shape {shape:?}", path.display(), data.len());
    }
    ArrayD::from_shape_vec(IxDyn(&shape), data).with_context(|| format!("{}: bad shape", path.display()))
}

/// Writes a float32 array in C order.
pub fn write_f32(path: &Path, a: &ArrayD<f32>) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("{}: cannot create", path.display()))?;
    let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .with_context(|| format!("{}: cannot write", path.display()))?;
    for x in a.as_standard_layout().iter() {
        w.push(x).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    w.finish().with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let a = ArrayD::from_shape_vec(IxDyn(&[1, 2, 3, 4]), (0..24).map(|x| x as f32 * 0.5).collect()).unwrap();
        write_f32(&p, &a).unwrap();
        assert_eq!(read_f32(&p).unwrap(), a);
    }

    #[test]
    fn truncated_and_garbage_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 2, 2, 2]), vec![1.0f32; 16]).unwrap();
        write_f32(&p, &a).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
        let e = read_f32(&p).unwrap_err().to_string();
        assert!(e.contains("a.npy"), "{e}");
        std::fs::write(&p, b"not numpy at all").unwrap();
        assert!(read_f32(&p).unwrap_err().to_string().contains("not a valid .npy"));
        assert!(read_f32(&dir.path().join("missing.npy")).unwrap_err().to_string().contains("cannot read"));
    }
}
