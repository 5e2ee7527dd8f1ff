//! Page-locked host memory (1.1): what copies inside a capture need. A captured copy reads (or
//! writes) its host buffer again at every replay, which the driver can do only with page-locked
//! memory; that is also how a graph takes new values at every replay without being captured
//! again: write them into the page-locked buffer between replays.
//!
//! [`HostBuffer`] is memory cgc allocates page-locked (`cgc_host_alloc`, freed on drop);
//! [`HostRegistration`] page-locks memory the caller already has (`cgc_host_register`, undone on
//! drop) for as long as it borrows it.

use std::fmt;
use std::mem::{align_of, size_of};
use std::ops::{Deref, DerefMut};
use std::os::raw::c_void;
use std::ptr::{self, NonNull};

use crate::error::{check, Result};
use crate::{sys, Context, Error, Status};

/// `CGC_HOST_WRITE_COMBINED` ([`HostBuffer::with_flags`]): fast for the GPU to read, very slow
/// for the CPU to read. For buffers the host only writes.
pub const HOST_WRITE_COMBINED: u32 = sys::CGC_HOST_WRITE_COMBINED;
/// `CGC_HOST_READ_ONLY` ([`HostRegistration::with_flags`]): the device only reads the memory.
pub const HOST_READ_ONLY: u32 = sys::CGC_HOST_READ_ONLY;

/// `len` elements of `T` as bytes, or the error naming `function`.
fn bytes_of<T>(len: usize, function: &str) -> Result<usize> {
    len.checked_mul(size_of::<T>()).ok_or_else(|| {
        Error::new(
            Status::InvalidArgument,
            format!(
                "{}: {} elements of {} bytes do not fit in usize",
                function,
                len,
                size_of::<T>()
            ),
        )
    })
}

/// Page-locked (pinned), portable and mapped host memory holding `len` values of `T`, from
/// `cgc_host_alloc`; it derefs to `[T]` and is freed (`cgc_host_free`) on drop.
///
/// Copies inside a capture need host memory like this ([`crate::Stream::copy_to_device`],
/// [`crate::Stream::copy_to_host`]); the graph then reads or writes it at every replay, so it
/// must outlive the graph (drop the graph first). Between replays, once the stream has been
/// synchronised, the host may read and write it freely.
pub struct HostBuffer<T: Copy> {
    // Never null: a dangling, aligned pointer when no bytes were allocated (len 0 or a
    // zero-sized T), so that the slice is always valid; `allocated` says whether to free it.
    ptr: NonNull<T>,
    len: usize,
    allocated: bool,
    api: &'static sys::cgc_api_t,
}

// SAFETY: the buffer owns its memory like a Box<[T]>; cgc_host_free may be called from any
// thread.
unsafe impl<T: Copy + Send> Send for HostBuffer<T> {}
// SAFETY: &HostBuffer only gives &[T].
unsafe impl<T: Copy + Sync> Sync for HostBuffer<T> {}

impl<T: Copy> HostBuffer<T> {
    /// `len` values, each `value`.
    pub fn new(ctx: &Context, len: usize, value: T) -> Result<HostBuffer<T>> {
        HostBuffer::with_flags(ctx, len, value, 0)
    }

    /// A copy of `values`.
    pub fn from_slice(ctx: &Context, values: &[T]) -> Result<HostBuffer<T>> {
        let mut buffer = HostBuffer::<T>::allocate(ctx, values.len(), 0)?;
        // SAFETY: the buffer has room for values.len() elements and is fresh memory, so the two
        // do not overlap.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), buffer.ptr.as_ptr(), values.len()) };
        buffer.len = values.len();
        Ok(buffer)
    }

    /// `len` values, each `value`, allocated with `flags` ([`HOST_WRITE_COMBINED`] or 0).
    pub fn with_flags(ctx: &Context, len: usize, value: T, flags: u32) -> Result<HostBuffer<T>> {
        let mut buffer = HostBuffer::<T>::allocate(ctx, len, flags)?;
        for i in 0..len {
            // SAFETY: i < len, inside the allocation; writing does not read the old value.
            unsafe { buffer.ptr.as_ptr().add(i).write(value) };
        }
        buffer.len = len;
        Ok(buffer)
    }

    /// Room for `capacity` values, none of them initialised yet (`len` is 0 until the caller
    /// has written them), so that dropping it on an error path never reads them.
    fn allocate(ctx: &Context, capacity: usize, flags: u32) -> Result<HostBuffer<T>> {
        let bytes = bytes_of::<T>(capacity, "cgc_host_alloc")?;
        let mut raw: *mut c_void = ptr::null_mut();
        if bytes > 0 {
            // SAFETY: live context, valid out pointer.
            check(ctx.api, unsafe {
                (ctx.api.cgc_host_alloc)(ctx.raw, bytes, flags, &mut raw)
            })?;
        }
        let buffer = HostBuffer {
            ptr: NonNull::new(raw as *mut T).unwrap_or_else(NonNull::dangling),
            len: 0,
            allocated: !raw.is_null(),
            api: ctx.api,
        };
        // The driver gives page-aligned memory; checked rather than assumed, since a slice of
        // misaligned T would be undefined behaviour. (Dropping `buffer` frees it.)
        if buffer.ptr.as_ptr() as usize % align_of::<T>() != 0 {
            return Err(Error::new(
                Status::Internal,
                format!(
                    "cgc_host_alloc: {:p} is not aligned to the {} bytes of the element type",
                    raw,
                    align_of::<T>()
                ),
            ));
        }
        Ok(buffer)
    }

    /// The host address of the first value.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The host address of the first value, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// Frees the memory, reporting the status. No work (no graph) may still use it.
    pub fn free(mut self) -> Result<()> {
        if !std::mem::replace(&mut self.allocated, false) {
            return Ok(());
        }
        // SAFETY: our allocation, freed once (Drop sees allocated == false).
        check(self.api, unsafe {
            (self.api.cgc_host_free)(self.ptr.as_ptr() as *mut c_void)
        })
    }
}

impl<T: Copy> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr is non-null, aligned and points at len initialised values we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for deref; &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        if self.allocated {
            // SAFETY: our allocation, freed once.
            unsafe { (self.api.cgc_host_free)(self.ptr.as_ptr() as *mut c_void) };
        }
    }
}

impl<T: Copy> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// The caller's memory, page-locked (`cgc_host_register`, portable and mapped) for as long as
/// this registration borrows it, so that copies inside captures may use it; unregistered
/// (`cgc_host_unregister`) on drop. It derefs to the borrowed slice.
///
/// A graph whose copies use the memory must be dropped before the registration ends.
pub struct HostRegistration<'a, T: Copy> {
    data: &'a mut [T],
    registered: bool,
    api: &'static sys::cgc_api_t,
}

// SAFETY: as for the &mut [T] it holds; cgc_host_unregister may be called from any thread.
unsafe impl<T: Copy + Send> Send for HostRegistration<'_, T> {}
// SAFETY: &HostRegistration only gives &[T].
unsafe impl<T: Copy + Sync> Sync for HostRegistration<'_, T> {}

impl<'a, T: Copy> HostRegistration<'a, T> {
    /// Page-locks `data`. An empty slice is [`Status::InvalidArgument`] (there is nothing to
    /// lock).
    pub fn new(ctx: &Context, data: &'a mut [T]) -> Result<HostRegistration<'a, T>> {
        HostRegistration::with_flags(ctx, data, 0)
    }

    /// Page-locks `data` with `flags` ([`HOST_READ_ONLY`] or 0).
    pub fn with_flags(
        ctx: &Context,
        data: &'a mut [T],
        flags: u32,
    ) -> Result<HostRegistration<'a, T>> {
        let bytes = std::mem::size_of_val(data);
        // SAFETY: live context; the range is the slice, which stays borrowed (so alive and in
        // place) until the registration is undone.
        check(ctx.api, unsafe {
            (ctx.api.cgc_host_register)(ctx.raw, data.as_mut_ptr() as *mut c_void, bytes, flags)
        })?;
        Ok(HostRegistration {
            data,
            registered: true,
            api: ctx.api,
        })
    }

    /// Undoes the registration, reporting the status. No work (no graph) may still use it.
    pub fn unregister(mut self) -> Result<()> {
        self.registered = false;
        // SAFETY: registered by us, undone once (Drop sees registered == false).
        check(self.api, unsafe {
            (self.api.cgc_host_unregister)(self.data.as_mut_ptr() as *mut c_void)
        })
    }
}

impl<T: Copy> Deref for HostRegistration<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.data
    }
}

impl<T: Copy> DerefMut for HostRegistration<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.data
    }
}

impl<T: Copy> Drop for HostRegistration<'_, T> {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: registered by us, undone once.
            unsafe { (self.api.cgc_host_unregister)(self.data.as_mut_ptr() as *mut c_void) };
        }
    }
}

impl<T: Copy> fmt::Debug for HostRegistration<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRegistration")
            .field("ptr", &self.data.as_ptr())
            .field("len", &self.data.len())
            .finish()
    }
}
