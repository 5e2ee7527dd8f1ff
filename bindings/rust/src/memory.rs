//! [`DeviceBuffer`]: device memory from cgc's caching allocator.

use super::*;

/// Device memory from cgc's caching allocator (`cgc_malloc`), freed on drop (`cgc_free`,
/// ordered on its allocation stream). Allocated during a capture, it comes from the capture's
/// pool and is one of the graph's outputs: keep it (or [`DeviceBuffer::into_raw`]) for as long
/// as the graph's results are read.
pub struct DeviceBuffer {
    pub(crate) ptr: *mut c_void,
    pub(crate) len: usize,
    pub(crate) api: &'static sys::cgc_api_t,
}

// SAFETY: a device address, not host memory; cgc_free/cgc_record_stream may be called from any
// thread (the allocator has one lock) and freeing needs ownership.
unsafe impl Send for DeviceBuffer {}
// SAFETY: as for Send; &self only hands out the address or records a stream use.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// `bytes` bytes (512-byte aligned), ordered on `stream`; from the capture's pool when
    /// `stream` is capturing. 0 bytes gives a null pointer.
    pub fn alloc(ctx: &Context, bytes: usize, stream: &Stream) -> Result<DeviceBuffer> {
        let mut p = ptr::null_mut();
        // SAFETY: live handles, valid out pointer.
        check(ctx.api, unsafe {
            (ctx.api.cgc_malloc)(ctx.raw, bytes, stream.raw, &mut p)
        })?;
        Ok(DeviceBuffer {
            ptr: p,
            len: bytes,
            api: ctx.api,
        })
    }

    /// Takes ownership of a block of `cgc_malloc` (e.g. one given up with
    /// [`DeviceBuffer::into_raw`]).
    ///
    /// # Safety
    /// `ptr` must be a live block of `cgc_malloc` of at least `len` bytes that nothing else
    /// will free.
    pub unsafe fn from_raw(ptr: *mut c_void, len: usize) -> Result<DeviceBuffer> {
        let api = api()?;
        Ok(DeviceBuffer { ptr, len, api })
    }

    /// The device address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The device address as a `CUdeviceptr`.
    pub fn device_ptr(&self) -> u64 {
        self.ptr as usize as u64
    }

    /// Size in bytes as requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Like `Tensor.record_stream`: the block is used by work on `stream` too, so after it is
    /// freed it is not reused before that work is done.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live block and handle.
        check(self.api, unsafe {
            (self.api.cgc_record_stream)(self.ptr, stream.raw)
        })
    }

    /// 1.4: [`DeviceBuffer::record_stream`] for a native `CUstream` (one cgc has no [`Stream`]
    /// for, e.g. a framework's): after the block is freed it is not reused before the work
    /// enqueued on `native_stream` so far is done. The stream is taken as one of the block's
    /// device.
    ///
    /// # Safety
    /// `native_stream` must be a live `CUstream` / `cudaStream_t` of the block's device (or
    /// null, `cudaStreamLegacy` or `cudaStreamPerThread`): the library asks the driver about it.
    pub unsafe fn record_stream_native(&self, native_stream: *mut c_void) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_record_stream_native)(self.ptr, native_stream),
        )
    }

    /// Frees the block, reporting the status.
    pub fn free(mut self) -> Result<()> {
        let p = std::mem::replace(&mut self.ptr, ptr::null_mut());
        // SAFETY: we own the block; freed once (cgc_free(NULL) is a no-op anyway).
        check(self.api, unsafe { (self.api.cgc_free)(p) })
    }

    /// Gives up ownership without freeing: the block stays allocated (free it later with
    /// `cgc_free` or [`DeviceBuffer::from_raw`]).
    pub fn into_raw(mut self) -> *mut c_void {
        std::mem::replace(&mut self.ptr, ptr::null_mut())
    }

    pub(crate) fn check_holds(&self, bytes: Option<usize>, what: &str) -> Result<()> {
        match bytes {
            Some(b) if b <= self.len => Ok(()),
            _ => Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{}: the buffer holds {} bytes, fewer than the call needs",
                    what, self.len
                ),
            )),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: we own the block.
            unsafe { (self.api.cgc_free)(self.ptr) };
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
