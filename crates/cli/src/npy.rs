//! Reading float16/float32 and int32 `.npy` arrays (and e4m3 bytes as uint8) and writing float32
//! ones, with one-line errors.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ndarray::{ArrayD, IxDyn};
use npyz::{DType as NpyDType, NpyFile, TypeChar, WriterBuilder};

/// An array read from disk as f32 (float16 files are widened exactly).
pub fn read_f32(path: &Path) -> Result<ArrayD<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    parse_f32(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// An fp8 KV cache read from disk as the values of its e4m3 elements: uint8 files are their
/// bytes (torch's `float8_e4m3fn` viewed as uint8; the NaN bytes 0x7f and 0xff read as NaN),
/// float16/float32 files are taken as they are (the caller checks they are e4m3 values).
pub fn read_e4m3(path: &Path) -> Result<ArrayD<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    parse_e4m3(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// An int32 array read from disk (cu_seqlens, seqused_k, block tables). int64 files are taken
/// too when every value fits in int32 (numpy's default integer is int64).
pub fn read_i32(path: &Path) -> Result<ArrayD<i32>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    parse_i32(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The parts of a checked header: the reader, the shape and the element size in bytes.
struct Header<'a> {
    npy: NpyFile<&'a [u8]>,
    shape: Vec<usize>,
    size: u64,
}

/// Header checks shared by every element type: Ok or an error, never a panic, whatever the
/// bytes. `accepts` says whether (kind, size) is a dtype this reader takes; `expected` names them.
fn header<'a>(
    bytes: &'a [u8],
    accepts: impl Fn(TypeChar, u64) -> bool,
    expected: &str,
) -> Result<Header<'a>> {
    let data_len = precheck(bytes)?;
    let npy =
        NpyFile::new(bytes).map_err(|e| anyhow::anyhow!("not a valid .npy file ({})", flat(&e)))?;
    if npy.order() == npyz::Order::Fortran {
        bail!("Fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)");
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let (type_char, size) = match npy.dtype() {
        NpyDType::Plain(ts) => (ts.type_char(), ts.size_field()),
        other => bail!(
            "unsupported dtype {} (expected {expected})",
            one_line_dtype(&other)
        ),
    };
    let elements = checked_elements(&shape)
        .ok_or_else(|| anyhow::anyhow!("shape {shape:?} has too many elements"))?;
    if !accepts(type_char, size) {
        bail!(
            "dtype {} is not supported (expected {expected})",
            one_line_dtype(&npy.dtype())
        );
    }
    // Checked before reading element by element: a header that promises more than the file holds.
    if elements
        .checked_mul(size as usize)
        .is_none_or(|need| need > data_len)
    {
        bail!("truncated data: the header says shape {shape:?} of {} bytes each, but {data_len} bytes follow", size);
    }
    Ok(Header { npy, shape, size })
}

/// Values and shape as an array, if the count matches the header.
fn shaped<T>(shape: Vec<usize>, data: Vec<T>) -> Result<ArrayD<T>> {
    let expected = checked_elements(&shape).unwrap_or(usize::MAX);
    if data.len() != expected {
        bail!(
            "holds {} values but its header says shape {shape:?}",
            data.len()
        );
    }
    ArrayD::from_shape_vec(IxDyn(&shape), data).context("bad shape")
}

/// The values of a checked file as `T`, its element type or the wider type it is read through.
fn values<T: npyz::Deserialize>(npy: NpyFile<&[u8]>) -> Result<Vec<T>> {
    npy.into_vec::<T>()
        .map_err(|e| anyhow::anyhow!("truncated or corrupt data ({})", flat(&e)))
}

/// The `.npy` bytes as an f32 array: Ok or an error, never a panic, whatever the bytes.
fn parse_f32(bytes: &[u8]) -> Result<ArrayD<f32>> {
    let is_float = |t, size| matches!((t, size), (TypeChar::Float, 2 | 4));
    let h = header(bytes, is_float, "float16 or float32")?;
    shaped(h.shape, float_values(h.size, h.npy)?)
}

/// float32 (`size` 4) or float16 data, as the header said, widened to f32: the f32 and the e4m3
/// parsers both take float values.
fn float_values(size: u64, npy: NpyFile<&[u8]>) -> Result<Vec<f32>> {
    Ok(match size {
        4 => values(npy)?,
        _ => values::<half::f16>(npy)?
            .into_iter()
            .map(f32::from)
            .collect(),
    })
}

/// The `.npy` bytes of an e4m3 array (uint8 bytes, or float16/float32 values) as f32 values: Ok
/// or an error, never a panic, whatever the bytes.
fn parse_e4m3(bytes: &[u8]) -> Result<ArrayD<f32>> {
    let accepts = |t, size| matches!((t, size), (TypeChar::Float, 2 | 4) | (TypeChar::Uint, 1));
    let h = header(
        bytes,
        accepts,
        "uint8 (e4m3 bytes), or float16/float32 e4m3 values",
    )?;
    let data: Vec<f32> = match h.size {
        1 => values::<u8>(h.npy)?
            .into_iter()
            .map(flashcore::host::e4m3_value)
            .collect(),
        size => float_values(size, h.npy)?,
    };
    shaped(h.shape, data)
}

/// The `.npy` bytes as an i32 array (int32, or int64 with every value in int32's range): Ok or
/// an error, never a panic, whatever the bytes.
fn parse_i32(bytes: &[u8]) -> Result<ArrayD<i32>> {
    let is_int = |t, size| matches!((t, size), (TypeChar::Int, 4 | 8));
    let h = header(bytes, is_int, "int32, or int64 within int32's range")?;
    let data: Vec<i32> = match h.size {
        4 => values(h.npy)?,
        _ => values::<i64>(h.npy)?
            .into_iter()
            .enumerate()
            .map(|(i, x)| {
                i32::try_from(x)
                    .map_err(|_| anyhow::anyhow!("int64 entry {i} = {x} does not fit in int32"))
            })
            .collect::<Result<_>>()?,
    };
    shaped(h.shape, data)
}

fn one_line_dtype(d: &NpyDType) -> String {
    match d {
        NpyDType::Plain(ts) => ts.to_string(),
        other => {
            let s = format!("{other:?}").replace('\n', " ");
            if s.len() > 80 {
                format!(
                    "{}...",
                    &s[..s.char_indices().nth(77).map_or(s.len(), |(i, _)| i)]
                )
            } else {
                s
            }
        }
    }
}

/// A library error message on one line (npyz's parse errors draw a multi-line caret diagram).
fn flat(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn checked_elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// What npyz would trip over before it gets to answer with an error: a header length past the
/// end of the file (it allocates the length first) and a shape whose element count overflows
/// (it multiplies the dims unchecked). Returns the number of data bytes after the header.
fn precheck(bytes: &[u8]) -> Result<usize> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        bail!(
            "not a valid .npy file (no NUMPY magic: {} bytes)",
            bytes.len()
        );
    }
    let (header_len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        2 | 3 => bail!("not a valid .npy file (truncated header)"),
        v => bail!("not a valid .npy file (unknown format version {v})"),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "not a valid .npy file (header of {header_len} bytes, file of {})",
                bytes.len()
            )
        })?;
    let text = String::from_utf8_lossy(&bytes[start..end]);
    // Every `shape` key (a mutated file may repeat it; the last one would win) must be a tuple
    // or list of plain integers whose product fits.
    let mut rest = &text[..];
    while let Some(i) = rest.find("shape") {
        let after = &rest[i + 5..];
        rest = after;
        let after = after.trim_start_matches(['\'', '"']).trim_start();
        let Some(after) = after.strip_prefix(':') else {
            continue;
        };
        let after = after.trim_start();
        let close = match after.chars().next() {
            Some('(') => ')',
            Some('[') => ']',
            _ => continue, // npyz rejects it with an error
        };
        let Some(j) = after.find(close) else { continue };
        let mut dims = Vec::new();
        for tok in after[1..j]
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            let digits = tok.trim_end_matches(['L', 'l']);
            match digits.parse::<usize>() {
                Ok(d) => dims.push(d),
                Err(_) if digits.bytes().all(|b| b.is_ascii_digit()) && !digits.is_empty() => {
                    bail!("shape dimension {tok} is too large")
                }
                Err(_) => bail!(
                    "shape {} is not a tuple of non-negative integers",
                    flat(&&after[..=j])
                ),
            }
        }
        // npyz multiplies the dims in both directions (strides for C and Fortran order) without
        // a check, so a zero dim does not save a product of the others that overflows.
        let nonzero: Vec<usize> = dims.iter().copied().filter(|&d| d != 0).collect();
        if checked_elements(&nonzero).is_none_or(|n| u64::try_from(n).is_err()) {
            bail!("shape {dims:?} has too many elements");
        }
    }
    Ok(bytes.len() - end)
}

/// Writes a float32 array in C order.
pub fn write_f32(path: &Path, a: &ArrayD<f32>) -> Result<()> {
    let file = std::fs::File::create(path)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .with_context(|| format!("{}: cannot write", path.display()))?;
    for x in a.as_standard_layout().iter() {
        w.push(x)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    w.finish()
        .with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let a = ArrayD::from_shape_vec(
            IxDyn(&[1, 2, 3, 4]),
            (0..24).map(|x| x as f32 * 0.5).collect(),
        )
        .unwrap();
        write_f32(&p, &a).unwrap();
        assert_eq!(read_f32(&p).unwrap(), a);
    }

    /// Writes any array type numpy knows, in C order (what `numpy.save` gives).
    fn write_any<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) {
        let file = std::fs::File::create(path).unwrap();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(std::io::BufWriter::new(file))
            .begin_nd()
            .unwrap();
        for x in data {
            w.push(x).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn f32_tables_round_trip_in_one_and_two_dims() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("slopes.npy");
        let a = ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.5f32, 0.25, -0.125]).unwrap();
        write_f32(&p, &a).unwrap();
        assert_eq!(read_f32(&p).unwrap(), a);
        let a =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![0.5f32, 1.0, 2.0, 4.0, 8.0, 16.0]).unwrap();
        write_f32(&p, &a).unwrap();
        assert_eq!(read_f32(&p).unwrap(), a);
    }

    #[test]
    fn i32_reads_back_and_i64_is_taken_within_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.npy");
        let vals = [0i32, 3, 3, 10, i32::MAX, i32::MIN];
        write_any(&p, &[2, 3], &vals);
        let a = read_i32(&p).unwrap();
        assert_eq!(a.shape(), [2, 3]);
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), vals);
        write_any(&p, &[4], &[0i64, 5, 12, 20]);
        assert_eq!(read_i32(&p).unwrap().as_slice().unwrap(), [0, 5, 12, 20]);
        write_any(&p, &[3], &[0i64, 5, 1 << 31]);
        let e = read_i32(&p).unwrap_err().to_string();
        assert!(
            e.contains("entry 2 = 2147483648 does not fit in int32"),
            "{e}"
        );
        write_any(&p, &[2], &[0i64, -(1 << 40)]);
        assert!(read_i32(&p).is_err());
        // Floats, unsigned and narrow ints are not tables.
        write_any(&p, &[2], &[0.0f32, 1.0]);
        let e = read_i32(&p).unwrap_err().to_string();
        assert!(e.contains("<f4") && e.contains("expected int32"), "{e}");
        write_any(&p, &[2], &[0u32, 1]);
        assert!(read_i32(&p).unwrap_err().to_string().contains("<u4"));
        write_any(&p, &[2], &[0i16, 1]);
        assert!(read_i32(&p).is_err());
        // And an int32 file is not a float tensor.
        write_any(&p, &[2], &[0i32, 1]);
        assert!(read_f32(&p).unwrap_err().to_string().contains("<i4"));
        // Truncated.
        write_any(&p, &[64], &[7i32; 64]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(read_i32(&p).unwrap_err().to_string().contains("truncated"));
    }

    /// uint8 files are e4m3 bytes (1.0, 448, -2^-9, the NaN byte), float files their values;
    /// other dtypes are refused, and the plain readers still refuse uint8.
    #[test]
    fn e4m3_files_read_as_bytes_or_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.npy");
        write_any(&p, &[2, 2], &[0x38u8, 0x7e, 0x81, 0x7f]);
        let a = read_e4m3(&p).unwrap();
        assert_eq!(a.shape(), [2, 2]);
        let v: Vec<f32> = a.iter().copied().collect();
        assert_eq!(&v[..3], [1.0, 448.0, -(2f32.powi(-9))]);
        assert!(v[3].is_nan());
        assert!(read_f32(&p).is_err());
        write_any(&p, &[3], &[0.5f32, -448.0, 0.1]);
        assert_eq!(
            read_e4m3(&p).unwrap().as_slice().unwrap(),
            [0.5, -448.0, 0.1]
        );
        write_any(&p, &[2], &[1i32, 2]);
        let e = read_e4m3(&p).unwrap_err().to_string();
        assert!(e.contains("expected uint8 (e4m3 bytes)"), "{e}");
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
        assert!(read_f32(&p)
            .unwrap_err()
            .to_string()
            .contains("not a valid .npy"));
        assert!(read_f32(&dir.path().join("missing.npy"))
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}

#[cfg(test)]
mod fuzz {
    //! `.npy` reading never panics: random bytes, random bytes behind a valid magic, mutated
    //! valid files, and valid framing around random header text all give Ok or Err.
    use super::*;
    use crate::npy_file::{npy_bytes, npy_file};
    use proptest::prelude::*;

    fn valid(shape: &[usize], f16: bool) -> Vec<u8> {
        let n: usize = shape.iter().product();
        let (descr, data): (&str, Vec<u8>) = if f16 {
            (
                "<f2",
                (0..n)
                    .flat_map(|i| half::f16::from_f32(i as f32 * 0.25).to_le_bytes())
                    .collect(),
            )
        } else {
            (
                "<f4",
                (0..n)
                    .flat_map(|i| (i as f32 * 0.25).to_le_bytes())
                    .collect(),
            )
        };
        npy_file(descr, shape, &data)
    }

    #[test]
    fn the_framing_helper_makes_files_that_read_back() {
        let a = parse_f32(&valid(&[1, 2, 3, 4], false)).unwrap();
        assert_eq!(a.shape(), [1, 2, 3, 4]);
        assert_eq!(a[[0, 1, 2, 3]], 23.0 * 0.25);
        let a = parse_f32(&valid(&[2, 1, 1, 3], true)).unwrap();
        assert_eq!(a[[1, 0, 0, 2]], 5.0 * 0.25);
    }

    #[test]
    fn headers_that_would_overflow_or_overallocate_are_errors() {
        let big_dim = npy_bytes(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999999, 2), }",
            &[],
        );
        assert!(parse_f32(&big_dim).is_err());
        let mut long_header = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
        long_header.extend_from_slice(b"{'descr'");
        // Each file, and what its error names.
        let named = [
            (
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615, 18446744073709551615), }", &[]),
                "too many",
            ),
            (
                npy_bytes(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }",
                    &[0; 64],
                ),
                "truncated",
            ),
            (long_header, "header"),
            (
                npy_bytes(
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1), }",
                    &[0; 8],
                ),
                "<f8",
            ),
            (
                npy_bytes(
                    "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1, 1, 1), }",
                    &[0; 4],
                ),
                "Fortran",
            ),
        ];
        for (file, what) in named {
            let e = parse_f32(&file).unwrap_err().to_string();
            assert!(e.contains(what), "{what}: {e}");
        }
    }

    #[derive(Clone, Debug)]
    enum Mutation {
        Flip(prop::sample::Index, u8),
        Truncate(prop::sample::Index),
        Insert(prop::sample::Index, u8),
        Delete(prop::sample::Index),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            3 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
            1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
            1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
            1 => any::<prop::sample::Index>().prop_map(Mutation::Delete),
        ]
    }

    fn apply(mut bytes: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
        for m in muts {
            if bytes.is_empty() {
                break;
            }
            match m {
                Mutation::Flip(i, b) => {
                    let i = i.index(bytes.len());
                    bytes[i] ^= b | 1;
                }
                Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
                Mutation::Insert(i, b) => {
                    let i = i.index(bytes.len());
                    bytes.insert(i, *b)
                }
                Mutation::Delete(i) => {
                    let i = i.index(bytes.len());
                    bytes.remove(i);
                }
            }
        }
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_f32(&bytes);
            let _ = parse_i32(&bytes);
        }

        #[test]
        fn random_bytes_behind_the_magic_never_panic(
            version in 0u8..=4, rest in prop::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut bytes = b"\x93NUMPY".to_vec();
            bytes.push(version);
            bytes.push(0);
            bytes.extend(rest);
            let _ = parse_f32(&bytes);
            let _ = parse_i32(&bytes);
        }

        #[test]
        fn mutated_valid_files_never_panic(
            shape in prop::collection::vec(0usize..6, 0..6),
            f16 in any::<bool>(),
            muts in prop::collection::vec(mutation(), 1..6),
        ) {
            let original = valid(&shape, f16);
            let bytes = apply(original.clone(), &muts);
            match parse_f32(&bytes) {
                // Whatever the mutation, a result that reads back is self-consistent.
                Ok(a) => prop_assert_eq!(a.len(), a.shape().iter().product::<usize>()),
                Err(e) => prop_assert!(!e.to_string().contains('\n'), "{}", e),
            }
        }

        #[test]
        fn mutated_int_files_never_panic(
            shape in prop::collection::vec(0usize..6, 0..3),
            wide in any::<bool>(),
            muts in prop::collection::vec(mutation(), 1..6),
        ) {
            let n: usize = shape.iter().product();
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
            let (descr, data): (&str, Vec<u8>) = if wide {
                ("<i8", (0..n).flat_map(|i| ((i as i64) << (i % 40)).to_le_bytes()).collect())
            } else {
                ("<i4", (0..n).flat_map(|i| (i as i32).to_le_bytes()).collect())
            };
            let original = npy_bytes(
                &format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}"),
                &data,
            );
            match parse_i32(&apply(original, &muts)) {
                Ok(a) => prop_assert_eq!(a.len(), a.shape().iter().product::<usize>()),
                Err(e) => prop_assert!(!e.to_string().contains('\n'), "{}", e),
            }
        }

        #[test]
        fn a_zero_dim_beside_huge_ones_is_an_error_not_a_panic(z in 0usize..3) {
            let mut dims = ["1099511627776"; 3];
            dims[z] = "0";
            let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims.join(", "));
            prop_assert!(parse_f32(&npy_bytes(&header, &[])).is_err());
        }

        #[test]
        fn random_header_text_never_panics(
            descr in prop_oneof![
                prop::sample::select(vec!["<f4", "<f2", ">f4", ">f2", "|f2", "<f8", "<i4", "|u1", "<c8", "|O", "<U3", "<V2", "<M8[s]"]).prop_map(String::from),
                "[<>|=]?[a-zA-Z][0-9]{0,3}",
            ],
            fortran in prop::sample::select(vec!["False", "True", "0", "None"]),
            shape in prop_oneof![
                "\\((([0-9]{1,22}L?), ?){0,5}[0-9]{0,22}\\)",
                "\\[[0-9, ]{0,30}\\]",
                "[-0-9(),\\[\\] xe.]{0,30}",
            ],
            extra in prop_oneof![Just(String::new()), "'[a-z]{1,6}': [0-9a-z'()]{0,10}, "],
            data in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let header = format!("{{'descr': '{descr}', 'fortran_order': {fortran}, {extra}'shape': {shape}, }}");
            let _ = parse_f32(&npy_bytes(&header, &data));
            let _ = parse_i32(&npy_bytes(&header, &data));
            let header = format!("{{'shape': {shape}, 'descr': [('a', '{descr}'), ('shape', '<f4')], 'fortran_order': {fortran}}}");
            let _ = parse_f32(&npy_bytes(&header, &data));
            let _ = parse_i32(&npy_bytes(&header, &data));
        }
    }
}
