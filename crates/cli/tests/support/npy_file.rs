//! `.npy` files written byte by byte for the tests: the binary's own reader is what they test,
//! so they do not write through it. Shared by `tests/cli.rs` and `src/npy.rs`'s fuzz tests.

/// A version 1.0 `.npy` file: this header dict text and data bytes.
pub fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// A C-order `.npy` file of this dtype (`<f4`, `<i4`, …) and shape holding `data`.
pub fn npy_file(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    npy_bytes(
        &format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}"),
        data,
    )
}
