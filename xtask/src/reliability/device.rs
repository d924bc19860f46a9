//! Device helpers of `cargo xtask reliability`: allocation, fills and copies with
//! out-of-memory errors that name the tensor, and the per-problem buffers `DevCase`.

use flashcore::cudarc::driver::sys;
use flashcore::cudarc::driver::{CudaSlice, DevicePtrMut, DeviceRepr};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, DType, Device, Error, TensorMut, TensorRef,
};

fn oom(what: &str, bytes: usize) -> impl FnOnce(flashcore::cudarc::driver::DriverError) -> Error {
    let what = what.to_string();
    move |e| {
        if format!("{e:?}").contains("OUT_OF_MEMORY") {
            Error::OutOfMemory { what, bytes }
        } else {
            Error::cuda(format!("allocating {bytes} bytes for {what}"), e)
        }
    }
}

pub(super) fn upload(dev: &Device, what: &str, bits: &[u16]) -> Result<CudaSlice<u16>, Error> {
    if bits.is_empty() {
        // A zero-byte allocation is not something every allocator accepts; keep one element.
        return dev.stream().clone_htod(&[0u16][..]).map_err(oom(what, 2));
    }
    dev.stream()
        .clone_htod(bits)
        .map_err(oom(what, bits.len() * 2))
}

pub(super) fn alloc_u16(dev: &Device, what: &str, n: usize) -> Result<CudaSlice<u16>, Error> {
    // SAFETY: every buffer allocated here is filled (memset or copy) before it is read.
    unsafe { dev.stream().alloc::<u16>(n.max(1)) }.map_err(oom(what, n * 2))
}

pub(super) fn alloc_f32(dev: &Device, what: &str, n: usize) -> Result<CudaSlice<f32>, Error> {
    // SAFETY: as above.
    unsafe { dev.stream().alloc::<f32>(n.max(1)) }.map_err(oom(what, n * 4))
}

/// Runs `fill` (the driver memset named `what`) on `buf`'s device pointer and element count, on
/// the device's stream with its context bound.
fn memset<T>(
    dev: &Device,
    buf: &mut CudaSlice<T>,
    what: &str,
    fill: impl FnOnce(sys::CUdeviceptr, usize, sys::CUstream) -> sys::CUresult,
) -> Result<(), Error> {
    let n = buf.len();
    let stream = dev.stream().clone();
    dev.context()
        .bind_to_thread()
        .map_err(|e| Error::cuda("binding the context", e))?;
    let (ptr, _sync) = buf.device_ptr_mut(&stream);
    fill(ptr, n, stream.cu_stream())
        .result()
        .map_err(|e| Error::cuda(what, e))
}

pub(super) fn memset16(dev: &Device, buf: &mut CudaSlice<u16>, bits: u16) -> Result<(), Error> {
    memset(dev, buf, "cuMemsetD16Async", |ptr, n, stream| {
        // SAFETY: `ptr` addresses `n` u16 elements of a live allocation, used on this stream.
        unsafe { sys::cuMemsetD16Async(ptr, bits, n, stream) }
    })
}

fn memset32(dev: &Device, buf: &mut CudaSlice<f32>, bits: u32) -> Result<(), Error> {
    memset(dev, buf, "cuMemsetD32Async", |ptr, n, stream| {
        // SAFETY: as memset16, 4-byte elements.
        unsafe { sys::cuMemsetD32Async(ptr, bits, n, stream) }
    })
}

/// A whole buffer copied back, after everything queued on the device.
pub(super) fn download<T: DeviceRepr>(dev: &Device, buf: &CudaSlice<T>) -> Result<Vec<T>, Error> {
    dev.synchronize()?;
    dev.stream()
        .clone_dtoh(buf)
        .map_err(|e| Error::cuda("copying a buffer back", e))
}

const LSE_NAN: u32 = 0x7fc0_0000;

/// Device buffers for one problem: each tensor at an element offset into its buffer, with the
/// image O and LSE are reset to before every launch (NaN where the kernel must write, a
/// sentinel in padding it must not touch).
pub(super) struct DevCase {
    pub(super) p: AttentionProblem,
    pub(super) q: CudaSlice<u16>,
    pub(super) k: CudaSlice<u16>,
    pub(super) v: CudaSlice<u16>,
    pub(super) o: CudaSlice<u16>,
    pub(super) lse: CudaSlice<f32>,
    /// Element offsets of Q, K, V, O and LSE in their buffers.
    pub(super) off: [usize; 5],
    pub(super) o_image: Option<CudaSlice<u16>>,
    pub(super) lse_image: Option<CudaSlice<f32>>,
}

impl DevCase {
    /// Dense buffers (exact lengths, offset 0) for a problem without custom strides.
    pub(super) fn dense(
        dev: &Device,
        p: &AttentionProblem,
        q: &[u16],
        k: &[u16],
        v: &[u16],
    ) -> Result<DevCase, Error> {
        Ok(DevCase {
            p: p.clone(),
            q: upload(dev, "q", q)?,
            k: upload(dev, "k", k)?,
            v: upload(dev, "v", v)?,
            o: alloc_u16(dev, "o", p.o_len())?,
            lse: alloc_f32(dev, "lse", p.lse_len())?,
            off: [0; 5],
            o_image: None,
            lse_image: None,
        })
    }

    /// Resets O and LSE to their images (or NaN everywhere).
    pub(super) fn poison(&mut self, dev: &Device) -> Result<(), Error> {
        let stream = dev.stream().clone();
        match &self.o_image {
            Some(img) => stream
                .memcpy_dtod(img, &mut self.o)
                .map_err(|e| Error::cuda("restoring O", e))?,
            None => memset16(dev, &mut self.o, flashcore::host::nan_bits(self.p.dtype))?,
        }
        match &self.lse_image {
            Some(img) => stream
                .memcpy_dtod(img, &mut self.lse)
                .map_err(|e| Error::cuda("restoring LSE", e))?,
            None => memset32(dev, &mut self.lse, LSE_NAN)?,
        }
        Ok(())
    }

    pub(super) fn forward(&mut self, kernel: &dyn Attention, dev: &Device) -> Result<(), Error> {
        let p = self.p.clone();
        self.with_tensors(p.dtype, 0, |t| kernel.forward(dev, &p, t))
    }

    /// The case's tensors (dense: exact lengths from each offset; strided: the rest of each
    /// buffer), with K tagged `k_dtype` and V `v_short` elements shorter, for the bad-input checks.
    pub(super) fn with_tensors<R>(
        &mut self,
        k_dtype: DType,
        v_short: usize,
        f: impl FnOnce(&mut AttentionTensors<'_>) -> R,
    ) -> R {
        let p = &self.p;
        let dense = p.custom_strides.is_none();
        let need = [p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len()];
        let r = |i: usize, len: usize| {
            if dense {
                self.off[i]..self.off[i] + need[i]
            } else {
                self.off[i]..len
            }
        };
        let (rq, rk, mut rv, ro, rl) = (
            r(0, self.q.len()),
            r(1, self.k.len()),
            r(2, self.v.len()),
            r(3, self.o.len()),
            r(4, self.lse.len()),
        );
        rv.end -= v_short;
        let mut t = AttentionTensors {
            q: TensorRef {
                data: self.q.slice(rq),
                dtype: p.dtype,
            }
            .into(),
            k: TensorRef {
                data: self.k.slice(rk),
                dtype: k_dtype,
            }
            .into(),
            v: TensorRef {
                data: self.v.slice(rv),
                dtype: p.dtype,
            }
            .into(),
            o: TensorMut {
                data: self.o.slice_mut(ro),
                dtype: p.dtype,
            },
            lse: self.lse.slice_mut(rl),
            tables: Default::default(),
        };
        f(&mut t)
    }

    /// Poison, run, wait; O and LSE as they came back (whole buffers).
    pub(super) fn run(
        &mut self,
        kernel: &dyn Attention,
        dev: &Device,
    ) -> Result<(Vec<u16>, Vec<f32>), Error> {
        self.poison(dev)?;
        self.forward(kernel, dev)?;
        dev.synchronize()?;
        Ok((download(dev, &self.o)?, download(dev, &self.lse)?))
    }
}
