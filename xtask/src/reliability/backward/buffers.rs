//! The device buffers of one backward call: where each tensor sits in its buffer (dense, or
//! inside NaN padding), the inputs as dtype bits, and the call itself.

use flashcore::cudarc::driver::CudaSlice;
use flashcore::{
    AttentionBackward, AttentionProblem, BackwardTensors, DType, Device, DeviceTables, Error,
    ProblemStrides, TensorMut, TensorRef,
};

use super::placement::{Padding, Placement};
use crate::case::{backward_inputs, BackwardInputs, Case, NoInputs};
use crate::reliability::device::{download, memset16, upload};
use crate::reliability::host::padding_sentinel;

/// Where Q, K, V and O sit in their buffers; dO sits like O, dQ like Q, dK like K, dV like V.
#[derive(Clone, Copy, Debug)]
pub(super) struct Places {
    pub(super) q: Placement,
    pub(super) k: Placement,
    pub(super) v: Placement,
    pub(super) o: Placement,
}

impl Places {
    pub(super) fn dense(p: &AttentionProblem) -> Places {
        let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
        let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
        Places {
            q: Placement::dense(p.layout, qd),
            k: Placement::dense(p.layout, kd),
            v: Placement::dense(p.layout, kd),
            o: Placement::dense(p.layout, qd),
        }
    }

    pub(super) fn padded(p: &AttentionProblem, pads: [Padding; 4]) -> Places {
        let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
        let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
        Places {
            q: Placement::padded(qd, pads[0]),
            k: Placement::padded(kd, pads[1]),
            v: Placement::padded(kd, pads[2]),
            o: Placement::padded(qd, pads[3]),
        }
    }

    /// dQ, dK, dV.
    pub(super) fn grads(&self) -> [Placement; 3] {
        [self.q, self.k, self.v]
    }
}

/// The problem with the padded tensors' strides.
pub(super) fn with_places(p: &AttentionProblem, places: &Places) -> AttentionProblem {
    let mut pp = p.clone();
    pp.custom_strides = Some(ProblemStrides {
        q: places.q.strides,
        k: places.k.strides,
        v: places.v.strides,
        o: places.o.strides,
    });
    pp
}

/// What a backward call reads, as dtype bits in logical [b, h, s, d] order (LSE as f32).
pub(super) struct HostBits {
    pub(super) q: Vec<u16>,
    pub(super) k: Vec<u16>,
    pub(super) v: Vec<u16>,
    pub(super) o: Vec<u16>,
    pub(super) d_o: Vec<u16>,
    pub(super) lse: Vec<f32>,
    /// The forward's ALiBi slopes, for a problem with ALiBi.
    pub(super) alibi_slopes: Option<Vec<f32>>,
}

impl HostBits {
    pub(super) fn new(p: &AttentionProblem, bi: &BackwardInputs) -> HostBits {
        let dt = p.dtype;
        let bits = |a: ndarray::ArrayView4<f32>| a.iter().map(|&x| dt.to_bits(x)).collect();
        HostBits {
            q: bits(bi.inputs.q.view()),
            k: bits(bi.inputs.k.view()),
            v: bits(bi.inputs.v.view()),
            // The forward's O is in the layout's order; the axis swap is its own inverse.
            o: bits(crate::inputs::to_layout(bi.forward.o.view(), p.layout)),
            d_o: bits(bi.d_o.view()),
            lse: bi.forward.lse.iter().copied().collect(),
            alibi_slopes: bi.alibi_slopes.clone(),
        }
    }
}

/// Device buffers of one backward call: each tensor at an element offset into its buffer, and
/// the images dQ, dK and dV are reset to before every launch (NaN at the elements, so an element
/// never written shows, and a sentinel in padding the kernel must not touch); without images
/// the gradients are set to NaN.
pub(super) struct BwdBuffers {
    pub(super) p: AttentionProblem,
    /// Q, K, V, O, dO.
    pub(super) inputs: [CudaSlice<u16>; 5],
    pub(super) lse: CudaSlice<f32>,
    /// dQ, dK, dV.
    pub(super) grads: [CudaSlice<u16>; 3],
    pub(super) images: Option<[CudaSlice<u16>; 3]>,
    /// The ALiBi slopes of a problem with ALiBi.
    pub(super) alibi_slopes: Option<CudaSlice<f32>>,
    /// Element offsets of Q, K, V, O, dO, LSE, dQ, dK, dV in their buffers.
    pub(super) off: [usize; 9],
}

fn upload_f32(dev: &Device, what: &str, v: &[f32]) -> Result<CudaSlice<f32>, Error> {
    let v = if v.is_empty() { &[0f32][..] } else { v };
    dev.stream()
        .clone_htod(v)
        .map_err(|e| Error::cuda(format!("copying {what} to the device"), e))
}

impl BwdBuffers {
    /// Buffers for `p` (its strides must be those of `places`), the inputs placed where
    /// `places` says with NaN around them, LSE between `lse_guard` NaNs on each side.
    pub(super) fn from_host(
        dev: &Device,
        p: &AttentionProblem,
        hb: &HostBits,
        places: &Places,
        lse_guard: usize,
    ) -> Result<BwdBuffers, Error> {
        let dt = p.dtype;
        let nan = flashcore::host::nan_bits(dt);
        let inputs = [
            upload(dev, "q", &places.q.embed(&hb.q, nan))?,
            upload(dev, "k", &places.k.embed(&hb.k, nan))?,
            upload(dev, "v", &places.v.embed(&hb.v, nan))?,
            upload(dev, "o", &places.o.embed(&hb.o, nan))?,
            upload(dev, "d_o", &places.o.embed(&hb.d_o, nan))?,
        ];
        let mut lse = vec![f32::NAN; 2 * lse_guard + hb.lse.len()];
        lse[lse_guard..lse_guard + hb.lse.len()].copy_from_slice(&hb.lse);
        let lse = upload_f32(dev, "lse", &lse)?;
        let sentinel = padding_sentinel(dt);
        let grad_image = |pl: &Placement| pl.embed(&vec![nan; pl.elements()], sentinel);
        let [gq, gk, gv] = places.grads().map(|pl| grad_image(&pl));
        let grads = [
            upload(dev, "dq", &gq)?,
            upload(dev, "dk", &gk)?,
            upload(dev, "dv", &gv)?,
        ];
        let images = if p.custom_strides.is_some() {
            Some([
                upload(dev, "dq image", &gq)?,
                upload(dev, "dk image", &gk)?,
                upload(dev, "dv image", &gv)?,
            ])
        } else {
            None
        };
        let alibi_slopes = match &hb.alibi_slopes {
            Some(s) => Some(upload_f32(dev, "alibi_slopes", s)?),
            None => None,
        };
        let f = |pl: &Placement| pl.front;
        Ok(BwdBuffers {
            p: p.clone(),
            inputs,
            lse,
            grads,
            images,
            alibi_slopes,
            off: [
                f(&places.q),
                f(&places.k),
                f(&places.v),
                f(&places.o),
                f(&places.o),
                lse_guard,
                f(&places.q),
                f(&places.k),
                f(&places.v),
            ],
        })
    }

    /// Resets the gradients, launches, waits.
    pub(super) fn launch(
        &mut self,
        kernel: &dyn AttentionBackward,
        dev: &Device,
    ) -> Result<(), Error> {
        let stream = dev.stream().clone();
        match &self.images {
            Some(images) => {
                for (img, g) in images.iter().zip(&mut self.grads) {
                    stream
                        .memcpy_dtod(img, g)
                        .map_err(|e| Error::cuda("restoring a gradient", e))?;
                }
            }
            None => {
                for g in &mut self.grads {
                    memset16(dev, g, flashcore::host::nan_bits(self.p.dtype))?;
                }
            }
        }
        let p = &self.p;
        let dense = p.custom_strides.is_none();
        let need = flashcore::backward::backward_buffer_lens(p);
        let off = self.off;
        // Dense problems need exact lengths; strided views take the rest of their buffer.
        let range = |i: usize, len: usize| {
            if dense {
                off[i]..off[i] + need[i]
            } else {
                off[i]..len
            }
        };
        let dt = p.dtype;
        fn view(s: &CudaSlice<u16>, r: std::ops::Range<usize>, dtype: DType) -> TensorRef<'_> {
            TensorRef {
                data: s.slice(r),
                dtype,
            }
        }
        let r = |i: usize, s: &CudaSlice<u16>| range(i, s.len());
        let [q, k, v, o, d_o] = &self.inputs;
        let [dq, dk, dv] = &mut self.grads;
        let (nq, nk, nv) = (dq.len(), dk.len(), dv.len());
        let mut t = BackwardTensors {
            q: view(q, r(0, q), dt),
            k: view(k, r(1, k), dt),
            v: view(v, r(2, v), dt),
            o: view(o, r(3, o), dt),
            d_o: view(d_o, r(4, d_o), dt),
            lse: self.lse.slice(range(5, self.lse.len())),
            dq: TensorMut {
                data: dq.slice_mut(range(6, nq)),
                dtype: dt,
            },
            dk: TensorMut {
                data: dk.slice_mut(range(7, nk)),
                dtype: dt,
            },
            dv: TensorMut {
                data: dv.slice_mut(range(8, nv)),
                dtype: dt,
            },
        };
        let tables = DeviceTables {
            alibi_slopes: self.alibi_slopes.as_ref().map(|s| s.as_view()),
            ..DeviceTables::default()
        };
        flashcore::backward_on_with_tables(kernel, dev, dev.stream(), p, &mut t, &tables)?;
        dev.synchronize()
    }

    /// Launch, then dQ, dK, dV as they came back (whole buffers).
    pub(super) fn run(
        &mut self,
        kernel: &dyn AttentionBackward,
        dev: &Device,
    ) -> Result<[Vec<u16>; 3], Error> {
        self.launch(kernel, dev)?;
        Ok([
            download(dev, &self.grads[0])?,
            download(dev, &self.grads[1])?,
            download(dev, &self.grads[2])?,
        ])
    }
}

/// The case's backward inputs, or why there are none: `Ok(None)` when the forward that feeds it
/// does not take the problem.
pub(super) fn inputs_for(
    k: &dyn AttentionBackward,
    dev: &Device,
    p: &AttentionProblem,
    seed: u64,
) -> std::result::Result<Option<BackwardInputs>, String> {
    let case = Case {
        problem: p.clone(),
        data_seed: seed,
    };
    match backward_inputs(k.name(), dev, &case) {
        Ok(bi) => Ok(Some(bi)),
        Err(NoInputs::Unsupported(_)) => Ok(None),
        Err(NoInputs::Failed(m)) => Err(m),
    }
}
