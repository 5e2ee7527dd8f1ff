//! NCCL communicators, and (1.5) pools of memory registered with one ([`Pool::nccl`]).
//! libnccl.so.2 is loaded by libcgc on first use (`CGC_NCCL_LIBRARY` names another file); without
//! it every call is [`Status::NcclUnavailable`](crate::Status::NcclUnavailable).

use std::fmt;
use std::os::raw::{c_char, c_int};
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use crate::error::{check, Result};
use crate::{api, sys, Context, DeviceBuffer, Error, Pool, Status, Stream};

/// NCCL's version code (e.g. 22809 for 2.28.9).
pub fn nccl_version() -> Result<i32> {
    let api = api()?;
    let mut v: c_int = 0;
    // SAFETY: valid out pointer.
    check(api, unsafe { (api.cgc_nccl_version)(&mut v) })?;
    Ok(v)
}

/// Starts an NCCL group on this thread (`ncclGroupStart`).
pub fn group_start() -> Result<()> {
    let api = api()?;
    // SAFETY: no arguments.
    check(api, unsafe { (api.cgc_group_start)() })
}

/// Ends this thread's NCCL group (`ncclGroupEnd`).
pub fn group_end() -> Result<()> {
    let api = api()?;
    // SAFETY: no arguments.
    check(api, unsafe { (api.cgc_group_end)() })
}

/// Element types (`cgc_dtype_t`, the values of ncclDataType_t).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// i8
    Int8,
    /// u8
    Uint8,
    /// i32
    Int32,
    /// u32
    Uint32,
    /// i64
    Int64,
    /// u64
    Uint64,
    /// IEEE half
    Float16,
    /// f32
    Float32,
    /// f64
    Float64,
    /// bfloat16
    Bfloat16,
}

impl DType {
    /// The raw `cgc_dtype_t`.
    pub fn to_raw(self) -> sys::cgc_dtype_t {
        match self {
            DType::Int8 => sys::CGC_INT8,
            DType::Uint8 => sys::CGC_UINT8,
            DType::Int32 => sys::CGC_INT32,
            DType::Uint32 => sys::CGC_UINT32,
            DType::Int64 => sys::CGC_INT64,
            DType::Uint64 => sys::CGC_UINT64,
            DType::Float16 => sys::CGC_FLOAT16,
            DType::Float32 => sys::CGC_FLOAT32,
            DType::Float64 => sys::CGC_FLOAT64,
            DType::Bfloat16 => sys::CGC_BFLOAT16,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Int8 | DType::Uint8 => 1,
            DType::Float16 | DType::Bfloat16 => 2,
            DType::Int32 | DType::Uint32 | DType::Float32 => 4,
            DType::Int64 | DType::Uint64 | DType::Float64 => 8,
        }
    }
}

/// Reductions (`cgc_reduce_op_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Average.
    Avg,
}

impl ReduceOp {
    /// The raw `cgc_reduce_op_t`.
    pub fn to_raw(self) -> sys::cgc_reduce_op_t {
        match self {
            ReduceOp::Sum => sys::CGC_SUM,
            ReduceOp::Prod => sys::CGC_PROD,
            ReduceOp::Max => sys::CGC_MAX,
            ReduceOp::Min => sys::CGC_MIN,
            ReduceOp::Avg => sys::CGC_AVG,
        }
    }
}

/// 1.5: the kinds of memory of an NCCL pool (`cgc_nccl_memory_t`): what NCCL reaches at its
/// best, worst first (so `got <= wanted` compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NcclMemory {
    /// `cuMemAlloc`'ed, not registered with the communicator.
    Plain,
    /// `ncclMemAlloc`'ed and registered (`ncclCommRegister`, NCCL >= 2.19).
    Registered,
    /// `ncclMemAlloc`'ed, a symmetric window (`ncclCommWindowRegister`, NCCL >= 2.27).
    Symmetric,
}

impl NcclMemory {
    /// The raw `cgc_nccl_memory_t`.
    pub fn to_raw(self) -> sys::cgc_nccl_memory_t {
        match self {
            NcclMemory::Plain => sys::CGC_NCCL_MEMORY_PLAIN,
            NcclMemory::Registered => sys::CGC_NCCL_MEMORY_REGISTERED,
            NcclMemory::Symmetric => sys::CGC_NCCL_MEMORY_SYMMETRIC,
        }
    }

    /// The kind of a raw `cgc_nccl_memory_t`, or `None` for a value this crate does not know.
    pub fn from_raw(raw: sys::cgc_nccl_memory_t) -> Option<NcclMemory> {
        match raw {
            sys::CGC_NCCL_MEMORY_PLAIN => Some(NcclMemory::Plain),
            sys::CGC_NCCL_MEMORY_REGISTERED => Some(NcclMemory::Registered),
            sys::CGC_NCCL_MEMORY_SYMMETRIC => Some(NcclMemory::Symmetric),
            _ => None,
        }
    }
}

/// An ncclUniqueId: make it on one rank ([`CommId::new`]), send its bytes to the others.
#[derive(Clone, Copy)]
pub struct CommId(sys::cgc_comm_id_t);

impl CommId {
    /// A fresh id (`cgc_comm_unique_id`).
    pub fn new() -> Result<CommId> {
        let api = api()?;
        let mut id = sys::cgc_comm_id_t { internal: [0; 128] };
        // SAFETY: valid out pointer.
        check(api, unsafe { (api.cgc_comm_unique_id)(&mut id) })?;
        Ok(CommId(id))
    }

    /// The 128 bytes to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        let mut b = [0u8; 128];
        for (dst, src) in b.iter_mut().zip(self.0.internal.iter()) {
            *dst = *src as u8;
        }
        b
    }

    /// The id from bytes made by [`CommId::to_bytes`] on another rank.
    pub fn from_bytes(bytes: &[u8; 128]) -> CommId {
        let mut id = sys::cgc_comm_id_t { internal: [0; 128] };
        for (dst, src) in id.internal.iter_mut().zip(bytes.iter()) {
            *dst = *src as c_char;
        }
        CommId(id)
    }
}

impl fmt::Debug for CommId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.to_bytes();
        write!(f, "CommId(")?;
        for x in &b[..8] {
            write!(f, "{:02x}", x)?;
        }
        write!(f, "..)")
    }
}

/// One rank of an NCCL communicator. Collectives on a capturing stream are captured and run at
/// every replay; every rank must enqueue collectives and launch graphs holding them in the same
/// order.
pub struct Comm {
    raw: sys::cgc_comm_t,
    api: &'static sys::cgc_api_t,
    nranks: i32,
    rank: i32,
    // NCCL does not allow concurrent calls on one communicator and cgc adds no lock, so the
    // binding serialises the enqueueing calls itself. `abort` does not take it: it is meant to
    // unblock a collective that holds it.
    enqueue: Mutex<()>,
}

// SAFETY: cgc functions may be called from any thread; the calls NCCL forbids to overlap on one
// communicator are serialised by `enqueue`; abort is documented to be called from another
// thread; destruction needs ownership.
unsafe impl Send for Comm {}
// SAFETY: as for Send.
unsafe impl Sync for Comm {}

fn count_bytes(count: usize, dtype: DType, times: i32) -> Option<usize> {
    count.checked_mul(dtype.size())?.checked_mul(times as usize)
}

impl Comm {
    /// Joins rank `rank` of `nranks` on `ctx`'s device (blocks until every rank has joined).
    /// Refused ([`Status::CaptureUnsupported`](crate::Status::CaptureUnsupported)) while a capture is under way.
    pub fn new(ctx: &Context, nranks: i32, id: &CommId, rank: i32) -> Result<Comm> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid pointers.
        check(ctx.api, unsafe {
            (ctx.api.cgc_comm_create)(ctx.as_raw(), nranks, &id.0, rank, &mut raw)
        })?;
        Ok(Comm {
            raw,
            api: ctx.api,
            nranks,
            rank,
            enqueue: Mutex::new(()),
        })
    }

    /// Number of ranks.
    pub fn nranks(&self) -> i32 {
        self.nranks
    }

    /// This rank.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_comm_t {
        self.raw
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The guarded data is (); a panic elsewhere cannot leave it inconsistent.
        self.enqueue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All-reduce of `count` elements (`send` and `recv` may be the same buffer).
    pub fn all_reduce(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = count_bytes(count, dtype, 1);
        send.check_holds(bytes, "cgc_all_reduce (send)")?;
        recv.check_holds(bytes, "cgc_all_reduce (recv)")?;
        let _g = self.lock();
        // SAFETY: live handles; both buffers hold `count` elements.
        check(self.api, unsafe {
            (self.api.cgc_all_reduce)(
                self.raw,
                send.as_ptr(),
                recv.as_ptr(),
                count,
                dtype.to_raw(),
                op.to_raw(),
                stream.as_raw(),
            )
        })
    }

    /// All-gather: `send_count` elements from each rank into `recv` (nranks * send_count).
    pub fn all_gather(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        send_count: usize,
        dtype: DType,
        stream: &Stream,
    ) -> Result<()> {
        send.check_holds(count_bytes(send_count, dtype, 1), "cgc_all_gather (send)")?;
        recv.check_holds(
            count_bytes(send_count, dtype, self.nranks),
            "cgc_all_gather (recv)",
        )?;
        let _g = self.lock();
        // SAFETY: live handles; buffer sizes checked.
        check(self.api, unsafe {
            (self.api.cgc_all_gather)(
                self.raw,
                send.as_ptr(),
                recv.as_ptr(),
                send_count,
                dtype.to_raw(),
                stream.as_raw(),
            )
        })
    }

    /// Reduce-scatter: `send` holds nranks * recv_count elements, `recv` gets this rank's part.
    pub fn reduce_scatter(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        recv_count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        send.check_holds(
            count_bytes(recv_count, dtype, self.nranks),
            "cgc_reduce_scatter (send)",
        )?;
        recv.check_holds(
            count_bytes(recv_count, dtype, 1),
            "cgc_reduce_scatter (recv)",
        )?;
        let _g = self.lock();
        // SAFETY: live handles; buffer sizes checked.
        check(self.api, unsafe {
            (self.api.cgc_reduce_scatter)(
                self.raw,
                send.as_ptr(),
                recv.as_ptr(),
                recv_count,
                dtype.to_raw(),
                op.to_raw(),
                stream.as_raw(),
            )
        })
    }

    /// Broadcast of `count` elements from `root`'s `send` into every rank's `recv`.
    pub fn broadcast(
        &self,
        send: &DeviceBuffer,
        recv: &DeviceBuffer,
        count: usize,
        dtype: DType,
        root: i32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = count_bytes(count, dtype, 1);
        if self.rank == root {
            send.check_holds(bytes, "cgc_broadcast (send)")?;
        }
        recv.check_holds(bytes, "cgc_broadcast (recv)")?;
        let _g = self.lock();
        // SAFETY: live handles; buffer sizes checked (send is read on the root only).
        check(self.api, unsafe {
            (self.api.cgc_broadcast)(
                self.raw,
                send.as_ptr(),
                recv.as_ptr(),
                count,
                dtype.to_raw(),
                root,
                stream.as_raw(),
            )
        })
    }

    /// Sends `count` elements to `peer` (pair with [`Comm::recv`] there; group both sides).
    pub fn send(
        &self,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DType,
        peer: i32,
        stream: &Stream,
    ) -> Result<()> {
        buf.check_holds(count_bytes(count, dtype, 1), "cgc_send")?;
        let _g = self.lock();
        // SAFETY: live handles; size checked.
        check(self.api, unsafe {
            (self.api.cgc_send)(
                self.raw,
                buf.as_ptr(),
                count,
                dtype.to_raw(),
                peer,
                stream.as_raw(),
            )
        })
    }

    /// Receives `count` elements from `peer`.
    pub fn recv(
        &self,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DType,
        peer: i32,
        stream: &Stream,
    ) -> Result<()> {
        buf.check_holds(count_bytes(count, dtype, 1), "cgc_recv")?;
        let _g = self.lock();
        // SAFETY: live handles; size checked.
        check(self.api, unsafe {
            (self.api.cgc_recv)(
                self.raw,
                buf.as_ptr(),
                count,
                dtype.to_raw(),
                peer,
                stream.as_raw(),
            )
        })
    }

    /// Aborts outstanding work (callable from another thread to unblock a hung collective).
    /// Afterwards the library accepts only destroy on it.
    pub fn abort(&self) -> Result<()> {
        // SAFETY: live handle; abort is the one call meant to overlap another on this comm.
        check(self.api, unsafe { (self.api.cgc_comm_abort)(self.raw) })
    }

    /// Destroys the communicator, reporting the status ([`Status::InvalidState`](crate::Status::InvalidState) while graphs
    /// holding its collectives exist: destroy them first; the handle is then leaked. Use
    /// [`Comm::try_destroy`] to get the communicator back from that refusal).
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_comm_destroy)(raw) })
    }

    /// Like [`Comm::destroy`], but the library's refusal while graphs holding the
    /// communicator's collectives exist ([`Status::InvalidState`](crate::Status::InvalidState))
    /// hands the communicator back, unharmed, with the error (`Some`): destroy the graphs, then
    /// call again. After any other failure the library has freed the handle (`None`).
    pub fn try_destroy(mut self) -> std::result::Result<(), (Error, Option<Comm>)> {
        // SAFETY: owned handle; the library frees it unless it refuses with INVALID_STATE.
        match check(self.api, unsafe { (self.api.cgc_comm_destroy)(self.raw) }) {
            Err(e) if e.status() == Some(Status::InvalidState) => Err((e, Some(self))),
            outcome => {
                self.raw = ptr::null_mut();
                outcome.map_err(|e| (e, None))
            }
        }
    }
}

impl Pool {
    /// 1.5: a pool of `capacity` bytes (rounded up to 2 MiB) of memory registered with `comm`,
    /// made at once on its device and never grown: allocation beyond the capacity is
    /// [`Status::OutOfMemory`]. Collective: every rank calls it with
    /// the same capacity and kind. Returns the pool and the kind it got.
    ///
    /// `wanted` is the best kind asked for; an older NCCL gives the next one down
    /// ([`NcclMemory::Symmetric`] -> [`NcclMemory::Registered`] -> [`NcclMemory::Plain`]), and
    /// the kind returned says which. Ranks that got different kinds are refused on every rank
    /// ([`Status::InvalidState`]): NCCL leaves mixing registered and
    /// unregistered buffers undefined. For NCCL's symmetric kernels every rank must allocate from
    /// the pool in the same order with the same sizes.
    ///
    /// Captures allocate from it through [`CaptureOptions::with_pool`](crate::CaptureOptions::with_pool),
    /// eager code through [`Pool::alloc`]. Releasing its last reference is collective too (it
    /// synchronises the device and drops the registration) and is refused
    /// ([`Status::InvalidState`], the reference kept) while a graph or
    /// capture holds the pool or a block of it is allocated: free the blocks and destroy the
    /// graphs first, then [`Pool::try_release`] (or drop) it on every rank. The pool holds
    /// `comm`, whose destruction is refused meanwhile.
    pub fn nccl(comm: &Comm, capacity: usize, wanted: NcclMemory) -> Result<(Pool, NcclMemory)> {
        let mut raw = ptr::null_mut();
        let mut got = sys::CGC_NCCL_MEMORY_PLAIN;
        {
            // The creation registers memory with the communicator and runs a collective on it.
            let _g = comm.lock();
            // SAFETY: live communicator, valid out pointers.
            check(comm.api, unsafe {
                (comm.api.cgc_nccl_pool_create)(comm.raw, capacity, wanted.to_raw(), &mut raw, &mut got)
            })?;
        }
        let pool = Pool { raw, api: comm.api };
        match NcclMemory::from_raw(got) {
            Some(kind) => Ok((pool, kind)),
            // The header promises one of its kinds (at most `wanted`); every rank sees the same
            // answer, so every rank releases the pool here.
            None => Err(Error::new(
                Status::Internal,
                format!("cgc_nccl_pool_create: the library got memory kind {}, which this crate does not know", got),
            )),
        }
    }
}

#[cfg(test)]
impl Comm {
    /// A communicator holding a NULL handle, for the tests without a GPU: the library refuses
    /// every call on it (dropping it too, which is ignored).
    pub(crate) fn null_for_tests(api: &'static sys::cgc_api_t) -> Comm {
        Comm {
            raw: ptr::null_mut(),
            api,
            nranks: 1,
            rank: 0,
            enqueue: Mutex::new(()),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_comm_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .finish()
    }
}
