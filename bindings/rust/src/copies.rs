//! Copies and sets ordered on a stream (1.1): eagerly they run once, inside a capture they
//! become graph nodes that run again at every replay.
//!
//! The typed methods check sizes against the [`DeviceBuffer`] and copy to or from its start; the
//! `_raw` ones take any addresses. Host memory inside a capture must be page-locked
//! ([`crate::HostBuffer`], [`crate::HostRegistration`]): a pageable buffer (a `Vec`, an array) is
//! refused with [`Status::CaptureUnsupported`](crate::Status::CaptureUnsupported) before it
//! could break the capture. Eagerly, pageable memory is fine.

use std::mem::size_of_val;
use std::os::raw::c_void;

use crate::error::{check, Result};
use crate::{DeviceBuffer, Stream};

impl Stream {
    /// Copies `src` from the host into the start of `dst` (`cgc_memcpy_htod_async`).
    ///
    /// From pageable memory an eager copy has read `src` when this returns. From page-locked
    /// memory the copy reads `src` when the stream reaches it, so what `src` holds then is what
    /// is copied; a captured copy reads it again at every replay (write new values there
    /// between replays), so it must outlive the graph.
    pub fn copy_to_device<T: Copy>(&self, dst: &DeviceBuffer, src: &[T]) -> Result<()> {
        let bytes = size_of_val(src);
        dst.check_holds(Some(bytes), "cgc_memcpy_htod_async (dst)")?;
        // SAFETY: dst holds `bytes`; src is `bytes` of readable host memory. A later read (page-
        // locked memory, a replay) only reads it: at worst it copies other values, or the driver
        // reports the memory gone.
        unsafe { self.memcpy_htod_raw(dst.as_ptr(), src.as_ptr() as *const c_void, bytes) }
    }

    /// Copies the start of `src` into `dst` on the host (`cgc_memcpy_dtoh_async`).
    ///
    /// # Safety
    /// The copy writes `dst` when the stream reaches it, which may be after this returns (always
    /// for page-locked memory; a pageable `dst` is written before an eager call returns) and, for
    /// a copy captured into a graph, again at every replay. Until then (for a captured copy:
    /// until the graph is dropped) `dst` must stay allocated, and it must not be read or written
    /// while a copy into it may be running (synchronise the stream first). The bytes copied
    /// must be valid values of `T`.
    pub unsafe fn copy_to_host<T: Copy>(&self, dst: &mut [T], src: &DeviceBuffer) -> Result<()> {
        let bytes = size_of_val(dst);
        src.check_holds(Some(bytes), "cgc_memcpy_dtoh_async (src)")?;
        self.memcpy_dtoh_raw(dst.as_mut_ptr() as *mut c_void, src.as_ptr(), bytes)
    }

    /// Copies the first `bytes` of `src` into the start of `dst`, on the device
    /// (`cgc_memcpy_dtod_async`).
    pub fn copy_device_to_device(
        &self,
        dst: &DeviceBuffer,
        src: &DeviceBuffer,
        bytes: usize,
    ) -> Result<()> {
        dst.check_holds(Some(bytes), "cgc_memcpy_dtod_async (dst)")?;
        src.check_holds(Some(bytes), "cgc_memcpy_dtod_async (src)")?;
        // SAFETY: both buffers hold `bytes`.
        unsafe { self.memcpy_dtod_raw(dst.as_ptr(), src.as_ptr(), bytes) }
    }

    /// Sets the first `count` bytes of `dst` to `value` (`cgc_memset_d8_async`).
    pub fn memset_d8(&self, dst: &DeviceBuffer, value: u8, count: usize) -> Result<()> {
        dst.check_holds(Some(count), "cgc_memset_d8_async")?;
        // SAFETY: dst holds `count` bytes.
        unsafe { self.memset_d8_raw(dst.as_ptr(), value, count) }
    }

    /// Sets the first `count` 16-bit elements of `dst` to `value` (`cgc_memset_d16_async`).
    pub fn memset_d16(&self, dst: &DeviceBuffer, value: u16, count: usize) -> Result<()> {
        dst.check_holds(count.checked_mul(2), "cgc_memset_d16_async")?;
        // SAFETY: dst holds `count` elements (and cgc_malloc blocks are 512-byte aligned).
        unsafe { self.memset_d16_raw(dst.as_ptr(), value, count) }
    }

    /// Sets the first `count` 32-bit elements of `dst` to `value` (`cgc_memset_d32_async`; for
    /// floats pass `x.to_bits()`).
    pub fn memset_d32(&self, dst: &DeviceBuffer, value: u32, count: usize) -> Result<()> {
        dst.check_holds(count.checked_mul(4), "cgc_memset_d32_async")?;
        // SAFETY: dst holds `count` elements (and cgc_malloc blocks are 512-byte aligned).
        unsafe { self.memset_d32_raw(dst.as_ptr(), value, count) }
    }

    /// `cgc_memcpy_htod_async`: `bytes` from host `src` to device `dst`.
    ///
    /// # Safety
    /// `dst` must be device memory of the stream's device with room for `bytes`, and `src`
    /// `bytes` of readable host memory, both alive until the copy (or, captured, every replay
    /// of its graph) has run.
    pub unsafe fn memcpy_htod_raw(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memcpy_htod_async)(dst, src, bytes, self.raw),
        )
    }

    /// `cgc_memcpy_dtoh_async`: `bytes` from device `src` to host `dst`.
    ///
    /// # Safety
    /// As for [`Stream::copy_to_host`], with `src` device memory holding `bytes`.
    pub unsafe fn memcpy_dtoh_raw(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memcpy_dtoh_async)(dst, src, bytes, self.raw),
        )
    }

    /// `cgc_memcpy_dtod_async`: `bytes` from device `src` to device `dst`.
    ///
    /// # Safety
    /// Both must be device memory holding `bytes`, alive until the copy (or every replay of a
    /// graph capturing it) has run.
    pub unsafe fn memcpy_dtod_raw(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memcpy_dtod_async)(dst, src, bytes, self.raw),
        )
    }

    /// `cgc_memset_d8_async`: `count` bytes at `dst` set to `value`.
    ///
    /// # Safety
    /// `dst` must be device memory holding `count` bytes, alive until the set (or every replay
    /// of a graph capturing it) has run.
    pub unsafe fn memset_d8_raw(&self, dst: *mut c_void, value: u8, count: usize) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memset_d8_async)(dst, value, count, self.raw),
        )
    }

    /// `cgc_memset_d16_async`: `count` 16-bit elements at `dst` (2-byte aligned) set to `value`.
    ///
    /// # Safety
    /// As for [`Stream::memset_d8_raw`], for `count` elements.
    pub unsafe fn memset_d16_raw(&self, dst: *mut c_void, value: u16, count: usize) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memset_d16_async)(dst, value, count, self.raw),
        )
    }

    /// `cgc_memset_d32_async`: `count` 32-bit elements at `dst` (4-byte aligned) set to `value`.
    ///
    /// # Safety
    /// As for [`Stream::memset_d8_raw`], for `count` elements.
    pub unsafe fn memset_d32_raw(&self, dst: *mut c_void, value: u32, count: usize) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_memset_d32_async)(dst, value, count, self.raw),
        )
    }
}
