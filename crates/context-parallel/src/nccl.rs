//! A thin NCCL communicator over cudarc's bindings (`cudarc::nccl::sys`), made for failure:
//! it is created non-blocking, so no NCCL call can hold the host forever; every wait polls
//! `ncclCommGetAsyncError` against a deadline, and a deadline that passes aborts the
//! communicator (which also stops its kernels on the GPU) and returns
//! [`CpError::Timeout`]. cudarc's safe `Comm` is blocking and panics on a failed abort, which
//! is what a rank whose peer died must not do.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::Once;
use std::time::{Duration, Instant};

use cudarc::nccl::sys;

use crate::error::CpError;

/// Keeps NVLink multicast (NVLS) off in this process unless the caller chose otherwise: on
/// shared hosts a program that uses it can take the GPUs out of service. NCCL reads it when a
/// communicator is created, so it is set before the first one.
fn prepare_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            std::env::set_var("NCCL_NVLS_ENABLE", "0");
        }
    });
}

/// Whether libnccl can be loaded, with what to do when it cannot (cudarc would panic).
pub fn nccl_available() -> Result<(), CpError> {
    // SAFETY: only tries to dlopen the library under cudarc's candidate names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CpError::NcclMissing(
            "libnccl.so was not found on the library path (LD_LIBRARY_PATH): install NCCL, or \
             link the nvidia-nccl-cu13 wheel's nvidia/nccl/lib/libnccl.so.2 as libnccl.so in a \
             folder on LD_LIBRARY_PATH"
                .into(),
        ))
    }
}

/// NCCL's version as an integer (e.g. 22805 for 2.28.5).
pub fn nccl_version() -> Result<i32, CpError> {
    nccl_available()?;
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    let r = unsafe { sys::ncclGetVersion(&mut v) };
    check(usize::MAX, "ncclGetVersion", r)?;
    Ok(v)
}

/// The 128 bytes every rank of one communicator shares: rank 0 makes it ([`UniqueId::new`]) and
/// hands it to the others (a thread: copy it; a process: [`UniqueId::to_hex`] through a file,
/// the environment or a socket).
#[derive(Clone, Copy)]
pub struct UniqueId(sys::ncclUniqueId);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({}…)", &self.to_hex()[..16])
    }
}

impl UniqueId {
    pub fn new() -> Result<Self, CpError> {
        nccl_available()?;
        prepare_env();
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes the 128-byte id.
        let r = unsafe { sys::ncclGetUniqueId(&mut id) };
        check(0, "ncclGetUniqueId", r)?;
        Ok(UniqueId(id))
    }

    /// 256 hex digits.
    pub fn to_hex(&self) -> String {
        self.0
            .internal
            .iter()
            .map(|&b| format!("{:02x}", b as u8))
            .collect()
    }

    pub fn from_hex(s: &str) -> Result<Self, CpError> {
        let s = s.trim();
        if s.len() != 256 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CpError::Invalid(format!(
                "an NCCL unique id is 256 hex digits, got {} characters",
                s.len()
            )));
        }
        let mut internal = [0 as std::ffi::c_char; 128];
        for (i, out) in internal.iter_mut().enumerate() {
            let byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("checked hex digits");
            *out = byte as std::ffi::c_char;
        }
        Ok(UniqueId(sys::ncclUniqueId { internal }))
    }
}

/// `ncclConfig_t` as NCCL 2.17 laid it out. NCCL reads a config up to its `size` and keeps its
/// defaults for the fields a client's older header lacks, so this prefix works with every NCCL
/// from 2.17 on, whichever the library on the machine is.
#[repr(C)]
struct ConfigV217 {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const std::ffi::c_char,
    split_share: c_int,
}

const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;

/// One rank's end of a communicator, non-blocking (see the module's note).
pub struct Communicator {
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    aborted: bool,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time (`&mut self` for
// everything that enqueues work).
unsafe impl Send for Communicator {}

/// A device buffer as NCCL takes it: its address and its length in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Bytes {
    pub ptr: u64,
    pub len: usize,
}

impl Communicator {
    /// Joins the communicator `id` as `rank` of `world`, on the CUDA context current on this
    /// thread. Waits at most `timeout` for the other ranks.
    pub fn init(
        rank: usize,
        world: usize,
        id: &UniqueId,
        timeout: Duration,
    ) -> Result<Self, CpError> {
        nccl_available()?;
        prepare_env();
        if world == 0 || rank >= world {
            return Err(CpError::Invalid(format!(
                "rank {rank} of a world of {world}"
            )));
        }
        let mut config = ConfigV217 {
            size: std::mem::size_of::<ConfigV217>(),
            magic: 0xcafe_beef,
            version: 2 * 10000 + 17 * 100,
            blocking: 0,
            cga_cluster_size: NCCL_CONFIG_UNDEF_INT,
            min_ctas: NCCL_CONFIG_UNDEF_INT,
            max_ctas: NCCL_CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: NCCL_CONFIG_UNDEF_INT,
        };
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `config` is a valid 2.17 config (see `ConfigV217`), `comm` receives the handle.
        let r = unsafe {
            sys::ncclCommInitRankConfig(
                &mut comm,
                world as c_int,
                id.0,
                rank as c_int,
                &mut config as *mut ConfigV217 as *mut sys::ncclConfig_t,
            )
        };
        if r != sys::ncclResult_t::ncclSuccess && r != sys::ncclResult_t::ncclInProgress {
            if !comm.is_null() {
                // SAFETY: the handle NCCL returned.
                unsafe { sys::ncclCommAbort(comm) };
            }
            return check(rank, "ncclCommInitRankConfig", r).map(|_| unreachable!());
        }
        let mut c = Communicator {
            comm,
            rank,
            world,
            aborted: false,
        };
        c.wait_ready("joining the communicator (ncclCommInitRankConfig)", timeout)?;
        Ok(c)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }

    /// The communicator's asynchronous state: Ok while healthy or still working, the error once
    /// NCCL has seen one (a peer's failure included).
    pub fn poll(&mut self) -> Result<bool, CpError> {
        self.alive()?;
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator; writes one value.
        let r = unsafe { sys::ncclCommGetAsyncError(self.comm, &mut state) };
        if r != sys::ncclResult_t::ncclSuccess {
            self.abort();
            return check(self.rank, "ncclCommGetAsyncError", r).map(|_| false);
        }
        match state {
            sys::ncclResult_t::ncclSuccess => Ok(true),
            sys::ncclResult_t::ncclInProgress => Ok(false),
            e => {
                let detail = self.last_error();
                self.abort();
                Err(nccl_error(self.rank, "(asynchronous)", e, detail))
            }
        }
    }

    /// Polls until NCCL has finished the host side of the last call (a non-blocking
    /// communicator's `ncclInProgress`), aborting after `timeout`.
    fn wait_ready(&mut self, what: &str, timeout: Duration) -> Result<(), CpError> {
        let start = Instant::now();
        loop {
            if self.poll()? {
                return Ok(());
            }
            if start.elapsed() > timeout {
                self.abort();
                return Err(CpError::Timeout {
                    rank: self.rank,
                    what: what.into(),
                    after: timeout,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Queues `sends` to `to` and `recvs` from `from` as one group on `stream` (raw CUstream),
    /// so that a ring step's send and receive cannot deadlock each other.
    pub fn exchange(
        &mut self,
        stream: *mut c_void,
        sends: &[Bytes],
        recvs: &[Bytes],
        to: usize,
        from: usize,
        timeout: Duration,
    ) -> Result<(), CpError> {
        self.alive()?;
        let rank = self.rank;
        let comm = self.comm;
        let s = stream as sys::cudaStream_t;
        let u8t = sys::ncclDataType_t::ncclUint8;
        self.group(timeout, "queueing a ring step (ncclSend/ncclRecv)", || {
            for b in sends {
                // SAFETY: `b` is a device buffer of `b.len` bytes that outlives the step (the
                // caller keeps it until the stream passes this point).
                let r = unsafe {
                    sys::ncclSend(b.ptr as *const c_void, b.len, u8t, to as c_int, comm, s)
                };
                check_queued(rank, "ncclSend", r)?;
            }
            for b in recvs {
                // SAFETY: as above, written by the receive.
                let r = unsafe {
                    sys::ncclRecv(b.ptr as *mut c_void, b.len, u8t, from as c_int, comm, s)
                };
                check_queued(rank, "ncclRecv", r)?;
            }
            Ok(())
        })
    }

    /// `recv` (world × `send.len` bytes) = every rank's `send`, rank-major.
    pub fn all_gather(
        &mut self,
        stream: *mut c_void,
        send: Bytes,
        recv: Bytes,
        timeout: Duration,
    ) -> Result<(), CpError> {
        self.alive()?;
        if recv.len != send.len * self.world {
            return Err(CpError::Invalid(format!(
                "all-gather of {} bytes into {} (world {})",
                send.len, recv.len, self.world
            )));
        }
        let (rank, comm) = (self.rank, self.comm);
        self.group(timeout, "queueing an all-gather", || {
            // SAFETY: device buffers of the checked sizes.
            let r = unsafe {
                sys::ncclAllGather(
                    send.ptr as *const c_void,
                    recv.ptr as *mut c_void,
                    send.len,
                    sys::ncclDataType_t::ncclUint8,
                    comm,
                    stream as sys::cudaStream_t,
                )
            };
            check_queued(rank, "ncclAllGather", r)
        })
    }

    /// `recv` (`count` f32) = the sum over ranks of segment `rank` of `send` (world × `count`).
    pub fn reduce_scatter_f32(
        &mut self,
        stream: *mut c_void,
        send: u64,
        recv: u64,
        count: usize,
        timeout: Duration,
    ) -> Result<(), CpError> {
        self.alive()?;
        let (rank, comm) = (self.rank, self.comm);
        self.group(timeout, "queueing a reduce-scatter", || {
            // SAFETY: device buffers of world × count and count f32 (the caller sizes them).
            let r = unsafe {
                sys::ncclReduceScatter(
                    send as *const c_void,
                    recv as *mut c_void,
                    count,
                    sys::ncclDataType_t::ncclFloat32,
                    sys::ncclRedOp_t::ncclSum,
                    comm,
                    stream as sys::cudaStream_t,
                )
            };
            check_queued(rank, "ncclReduceScatter", r)
        })
    }

    fn group(
        &mut self,
        timeout: Duration,
        what: &str,
        body: impl FnOnce() -> Result<(), CpError>,
    ) -> Result<(), CpError> {
        // SAFETY: group calls bracket the body's enqueues on this thread.
        check_queued(self.rank, "ncclGroupStart", unsafe {
            sys::ncclGroupStart()
        })?;
        let queued = body();
        // SAFETY: closes the group opened above, whatever the body returned.
        let end = unsafe { sys::ncclGroupEnd() };
        if let Err(e) = queued {
            self.abort();
            return Err(e);
        }
        if let Err(e) = check_queued(self.rank, "ncclGroupEnd", end) {
            self.abort();
            return Err(e);
        }
        self.wait_ready(what, timeout)
    }

    /// Stops the communicator and its kernels; every later call answers an error.
    pub fn abort(&mut self) {
        if !self.aborted {
            self.aborted = true;
            // SAFETY: a live handle, aborted once.
            unsafe { sys::ncclCommAbort(self.comm) };
        }
    }

    fn alive(&self) -> Result<(), CpError> {
        if self.aborted {
            Err(CpError::Invalid(format!(
                "rank {}: the communicator was aborted after an earlier failure; create a new one",
                self.rank
            )))
        } else {
            Ok(())
        }
    }

    fn last_error(&self) -> String {
        // SAFETY: NCCL returns a static or per-comm NUL-terminated string (or null).
        let p = unsafe { sys::ncclGetLastError(self.comm) };
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: checked non-null, NUL-terminated.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.aborted {
            return;
        }
        // A clean end: finalize (flushes outstanding work), bounded, then destroy; abort if the
        // peers are gone. Never panics.
        // SAFETY: a live handle.
        let r = unsafe { sys::ncclCommFinalize(self.comm) };
        let ok = (r == sys::ncclResult_t::ncclSuccess || r == sys::ncclResult_t::ncclInProgress)
            && self
                .wait_ready("finalizing", Duration::from_secs(10))
                .is_ok();
        if ok {
            self.aborted = true;
            // SAFETY: finalized, destroyed once.
            unsafe { sys::ncclCommDestroy(self.comm) };
        } else {
            self.abort();
        }
    }
}

fn error_string(r: sys::ncclResult_t) -> String {
    // SAFETY: NCCL's static strings.
    let p = unsafe { sys::ncclGetErrorString(r) };
    if p.is_null() {
        format!("{r:?}")
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn nccl_error(rank: usize, call: &'static str, r: sys::ncclResult_t, detail: String) -> CpError {
    let mut message = error_string(r);
    if !detail.is_empty() {
        message = format!("{message}: {detail}");
    }
    CpError::Nccl {
        rank,
        call,
        code: r as i32,
        message,
    }
}

fn check(rank: usize, call: &'static str, r: sys::ncclResult_t) -> Result<(), CpError> {
    if r == sys::ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(nccl_error(rank, call, r, String::new()))
    }
}

/// A non-blocking communicator's enqueue: success or "in progress" (finished by `wait_ready`).
fn check_queued(rank: usize, call: &'static str, r: sys::ncclResult_t) -> Result<(), CpError> {
    if r == sys::ncclResult_t::ncclInProgress {
        Ok(())
    } else {
        check(rank, call, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_prefix_is_nccl_2_17s() {
        // size, magic, version, 4 ints, a pointer, an int: 48 bytes on x86_64 (NCCL 2.17).
        assert_eq!(std::mem::size_of::<ConfigV217>(), 48);
    }

    #[test]
    fn unique_id_hex_round_trips_and_rejects_junk() {
        let mut internal = [0 as std::ffi::c_char; 128];
        for (i, b) in internal.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) as std::ffi::c_char;
        }
        let id = UniqueId(sys::ncclUniqueId { internal });
        let back = UniqueId::from_hex(&id.to_hex()).unwrap();
        assert_eq!(back.0.internal, id.0.internal);
        assert!(UniqueId::from_hex("abc").is_err());
        assert!(UniqueId::from_hex(&"zz".repeat(128)).is_err());
    }
}
