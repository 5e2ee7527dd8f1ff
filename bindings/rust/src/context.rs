//! [`Context`]: one device (its primary context), and [`MemoryStats`].

use super::*;

/// One device: a reference on its primary context (`cgc_context_t`).
pub struct Context {
    pub(crate) raw: sys::cgc_context_t,
    pub(crate) api: &'static sys::cgc_api_t,
    pub(crate) device: i32,
}

// SAFETY: cgc functions may be called from any thread, and a context handle is a ticket on
// per-device state guarded by the library; destruction needs ownership, so no other thread can
// be using it then.
unsafe impl Send for Context {}
// SAFETY: as for Send; every &self method is a thread-safe library call.
unsafe impl Sync for Context {}

impl Context {
    /// A handle on `device`'s primary context (shared with the CUDA runtime and frameworks).
    pub fn new(device: i32) -> Result<Context> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        // SAFETY: valid out pointer.
        check(api, unsafe { (api.cgc_context_create)(device, &mut raw) })?;
        Ok(Context { raw, api, device })
    }

    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_context_t {
        self.raw
    }

    /// Waits for all work on the device. Not allowed during a Global capture.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe {
            (self.api.cgc_context_synchronize)(self.raw)
        })
    }

    /// Allocator statistics of the whole device (`pool` `None`) or of one pool.
    pub fn memory_stats(&self, pool: Option<&Pool>) -> Result<MemoryStats> {
        let mut s = sys::cgc_memory_stats_t {
            struct_size: std::mem::size_of::<sys::cgc_memory_stats_t>(),
            ..Default::default()
        };
        let pool_raw = pool.map_or(ptr::null_mut(), |p| p.raw);
        // SAFETY: live handles, valid out pointer with struct_size set.
        check(self.api, unsafe {
            (self.api.cgc_memory_stats)(self.raw, pool_raw, &mut s)
        })?;
        Ok(MemoryStats {
            bytes_reserved: s.bytes_reserved,
            bytes_allocated: s.bytes_allocated,
            peak_bytes_allocated: s.peak_bytes_allocated,
            peak_bytes_reserved: s.peak_bytes_reserved,
            num_driver_allocs: s.num_driver_allocs,
            num_driver_frees: s.num_driver_frees,
        })
    }

    /// Gives the device cache's unused segments back to the driver (pools still referenced keep
    /// theirs). [`Status::InvalidState`] while a capture is under way.
    pub fn empty_cache(&self) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe { (self.api.cgc_empty_cache)(self.raw) })
    }

    /// Drops this reference, reporting the status. Objects made from it keep working.
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, destroyed once (Drop sees null).
        check(self.api, unsafe { (self.api.cgc_context_destroy)(raw) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle; nothing else uses it (we hold it by value).
            unsafe { (self.api.cgc_context_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device)
            .field("raw", &self.raw)
            .finish()
    }
}

/// Allocator statistics (`cgc_memory_stats_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes obtained from the driver.
    pub bytes_reserved: usize,
    /// Bytes handed out and not yet freed (512-byte rounded block sizes).
    pub bytes_allocated: usize,
    /// Peak of `bytes_allocated`.
    pub peak_bytes_allocated: usize,
    /// Peak of `bytes_reserved`.
    pub peak_bytes_reserved: usize,
    /// cuMemAlloc calls so far.
    pub num_driver_allocs: u64,
    /// cuMemFree calls so far.
    pub num_driver_frees: u64,
}
