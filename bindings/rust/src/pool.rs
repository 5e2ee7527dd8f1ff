//! [`Pool`]: private memory pools shared by graphs, adopted captures (1.4), eager allocation from a
//! pool (1.5), claims of a pool's free memory by address and pools at fixed addresses (1.6).

use super::*;

/// One reference on a private memory pool (`torch.cuda.graph_pool_handle()`). `Clone` takes
/// another reference (`cgc_pool_retain`), `Drop` releases one. Two `Pool`s are equal when they
/// are references on the same pool. Since 1.5 a pool may be an NCCL pool ([`Pool::nccl`]), whose
/// last release is collective and refused while it is in use ([`Pool::try_release`]), and since
/// 1.6 a pool at fixed addresses ([`Pool::create_at`]), whose last release is refused likewise.
pub struct Pool {
    pub(crate) raw: sys::cgc_pool_t,
    pub(crate) api: &'static sys::cgc_api_t,
}

// SAFETY: pool references are counted by the library under its allocator lock; any thread may
// call cgc; releasing needs ownership of this reference.
unsafe impl Send for Pool {}
// SAFETY: as for Send; &self only reads the handle.
unsafe impl Sync for Pool {}

impl Pool {
    /// A new pool holding one reference of the caller's.
    pub fn new(ctx: &Context) -> Result<Pool> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid out pointer.
        check(ctx.api, unsafe {
            (ctx.api.cgc_pool_create)(ctx.raw, &mut raw)
        })?;
        Ok(Pool { raw, api: ctx.api })
    }

    /// 1.6: a new pool (one reference of the caller's) whose memory lies at fixed virtual
    /// addresses (`cgc_pool_create_at`): `[base, base + capacity)` is reserved with the driver
    /// at exactly `base` and backed with device memory in 2 MiB steps as the pool's allocations
    /// need it. Captures ([`CaptureOptions::pool`]), [`Pool::alloc`] and [`Pool::claim`] allocate
    /// from it as from any pool, but its memory never moves and never goes to the device's
    /// cache: the same requests in the same order get the same addresses, in this process or in
    /// another that reserves the same base. `base` is only an address to reserve: it is never
    /// dereferenced here.
    ///
    /// Errors: [`Status::InvalidArgument`] for a null `base`, 0 bytes, or a `base` or
    /// `capacity` that is not a multiple of 2 MiB (of the device's granularity if larger: the
    /// message names it); [`Status::InvalidState`] when the driver cannot reserve that range in
    /// this process (part of it is in use, e.g. by another such pool). Allocations beyond the
    /// capacity are [`Status::OutOfMemory`]. Its last release synchronises the device and gives
    /// the range back; it is refused with [`Status::InvalidState`] while graphs, captures or
    /// allocated blocks hold the pool, and with [`Status::CaptureUnsupported`] while a capture is
    /// under way on its device: see [`Pool::try_release`], which hands the pool back then.
    pub fn create_at(ctx: &Context, base: *mut c_void, capacity: usize) -> Result<Pool> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid out pointer; the library hands `base` to the driver as an
        // address to reserve and never dereferences it.
        check(ctx.api, unsafe {
            (ctx.api.cgc_pool_create_at)(ctx.raw, base, capacity, &mut raw)
        })?;
        Ok(Pool { raw, api: ctx.api })
    }

    /// The raw handle (the reference stays owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_pool_t {
        self.raw
    }

    /// Another reference on the same pool, reporting the status.
    pub fn try_clone(&self) -> Result<Pool> {
        // SAFETY: live handle (we hold a reference).
        check(self.api, unsafe { (self.api.cgc_pool_retain)(self.raw) })?;
        Ok(Pool {
            raw: self.raw,
            api: self.api,
        })
    }

    /// 1.4: lets a capture that cgc did not begin (one another framework began with the
    /// driver, e.g. `torch.cuda.graph` with cgc as PyTorch's allocator, or a raw
    /// `cuStreamBeginCapture`) allocate from this pool. From this call until
    /// [`Pool::end_adopted_capture`], [`DeviceBuffer::alloc`] on any stream taking part in the
    /// capture that `native_stream` (a `CUstream` of the pool's device) takes part in gets its
    /// blocks from this pool, as in a capture begun with [`CaptureOptions::pool`] set to it;
    /// without an adoption such an allocation is refused ([`Status::CaptureUnsupported`]).
    ///
    /// Errors: [`Status::InvalidState`] when the stream is not capturing, when its capture is
    /// one of cgc's, or when the pool records another capture (a pool records one at a time);
    /// [`Status::CaptureInvalidated`] for an invalidated capture. The pool holds a reference of
    /// its own until the end. cgc does not see the replays of graphs it did not instantiate, so
    /// the pool's memory never goes to other streams once the pool is released: it returns to
    /// the driver at [`Context::empty_cache`]. [`Pool::adopt_stream_capture`] is the safe form
    /// for a [`Stream`].
    ///
    /// # Safety
    /// `native_stream` must be a live `CUstream` / `cudaStream_t` of the pool's device (or null,
    /// `cudaStreamLegacy` or `cudaStreamPerThread`): the library asks the driver about it.
    pub unsafe fn adopt_capture(&self, native_stream: *mut c_void) -> Result<()> {
        check(self.api, (self.api.cgc_pool_adopt_capture)(self.raw, native_stream))
    }

    /// [`Pool::adopt_capture`] of the capture `stream` takes part in (one begun on its
    /// [`Stream::native`] with the driver, not with cgc).
    pub fn adopt_stream_capture(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live Stream's native stream is alive (created by cgc, or wrapped under the
        // promise of Stream::wrap) and of the device it was made for.
        unsafe { self.adopt_capture(stream.native()) }
    }

    /// 1.4: ends the adoption begun by [`Pool::adopt_capture`]; call it after the capture ended
    /// (or was abandoned). Allocations on the capture's streams are refused again, and blocks
    /// freed during it that other streams used are settled. [`Status::InvalidState`] when the
    /// pool adopts no capture.
    pub fn end_adopted_capture(&self) -> Result<()> {
        // SAFETY: live handle (we hold a reference).
        check(self.api, unsafe {
            (self.api.cgc_pool_end_adopted_capture)(self.raw)
        })
    }

    /// 1.5: `bytes` bytes (512-byte aligned) from this pool outside captures, ordered on
    /// `stream` (of the pool's device, not capturing: inside a capture the capture's pool decides,
    /// and this is [`Status::CaptureUnsupported`]). 0 bytes gives a null pointer. Blocks allocated
    /// so are reused only by `Pool::alloc` on the same stream, never by a capture, so a pool's
    /// graph memory and its eager memory stay apart. An NCCL pool ([`Pool::nccl`]) never grows,
    /// and a pool at fixed addresses ([`Pool::create_at`]) grows only within its range: beyond
    /// its capacity this is [`Status::OutOfMemory`].
    pub fn alloc(&self, bytes: usize, stream: &Stream) -> Result<DeviceBuffer> {
        let mut p = ptr::null_mut();
        // SAFETY: live handles (we hold a reference on the pool), valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_pool_malloc)(self.raw, bytes, stream.raw, &mut p)
        })?;
        Ok(DeviceBuffer {
            ptr: p,
            len: bytes,
            api: self.api,
        })
    }

    /// 1.6: allocates exactly `[ptr, ptr + bytes rounded up to 512)` from this pool's free
    /// memory (`cgc_pool_claim`), as a block freed like [`Pool::alloc`]'s (on drop, or
    /// [`DeviceBuffer::free`]), at `ptr`: a range the pool holds and no block of it uses, after
    /// its free neighbours are merged. The block keeps the stream of the free memory it is cut
    /// from, so it is reused as that memory would have been. This puts a pool back to a state
    /// it had (its live blocks at their addresses, like PyTorch's `setCheckpointPoolState`).
    ///
    /// Errors: [`Status::InvalidState`] when the range is not wholly free memory of the pool
    /// (the message says what holds it); [`Status::InvalidArgument`] for a null or unaligned
    /// `ptr` or 0 bytes; [`Status::NotSupported`] for an NCCL pool ([`Pool::nccl`]).
    pub fn claim(&self, ptr: *mut c_void, bytes: usize) -> Result<DeviceBuffer> {
        // SAFETY: live handle (we hold a reference); the library only compares `ptr` with the
        // pool's blocks and never dereferences it.
        check(self.api, unsafe { (self.api.cgc_pool_claim)(self.raw, ptr, bytes) })?;
        Ok(DeviceBuffer {
            ptr,
            len: bytes,
            api: self.api,
        })
    }

    /// Drops this reference, reporting the status. The pool lives on while graphs captured into
    /// it or blocks allocated from it exist. For the last reference of an NCCL pool or of a pool
    /// at fixed addresses ([`Pool::create_at`]), which the library refuses to release while it
    /// is in use, see [`Pool::try_release`].
    pub fn release(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: we hold this reference; released once.
        check(self.api, unsafe { (self.api.cgc_pool_release)(raw) })
    }

    /// Like [`Pool::release`], but a refusal that leaves the reference held hands the pool back,
    /// unharmed, with the error (`Some`): the last release of an NCCL pool (1.5, collective) or
    /// of a pool at fixed addresses (1.6, [`Pool::create_at`]: it gives the range back) is
    /// refused with [`Status::InvalidState`] while a graph or capture holds the pool or a block
    /// of it is allocated, and with [`Status::CaptureUnsupported`] while a capture is under way
    /// on its device (the release synchronises the device). Free the blocks, destroy the graphs,
    /// then call again. After any other failure the reference is gone (`None`).
    pub fn try_release(mut self) -> std::result::Result<(), (Error, Option<Pool>)> {
        // SAFETY: we hold this reference; the library drops it unless it refuses as above.
        match check(self.api, unsafe { (self.api.cgc_pool_release)(self.raw) }) {
            Err(e) if matches!(e.status(), Some(Status::InvalidState) | Some(Status::CaptureUnsupported)) => {
                Err((e, Some(self)))
            }
            outcome => {
                self.raw = ptr::null_mut();
                outcome.map_err(|e| (e, None))
            }
        }
    }
}

impl Clone for Pool {
    /// Takes another reference. Panics only if the library refuses to retain a pool we hold a
    /// reference on, which its contract rules out; use [`Pool::try_clone`] to see the error.
    fn clone(&self) -> Pool {
        match self.try_clone() {
            Ok(p) => p,
            Err(e) => panic!("cgc_pool_retain failed on a live pool: {}", e),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: we hold this reference.
            unsafe { (self.api.cgc_pool_release)(self.raw) };
        }
    }
}

impl PartialEq for Pool {
    fn eq(&self, other: &Pool) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Pool {}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool").field("raw", &self.raw).finish()
    }
}
