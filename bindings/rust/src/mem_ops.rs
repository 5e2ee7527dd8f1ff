//! Stream memory operations (1.1): write a 32- or 64-bit value to memory, or wait until the
//! value there meets a condition, in stream order (`cuStreamWriteValue32` and its kin). Captured,
//! each becomes a memory-operation node. Two streams, or two graphs, hand work over through a
//! flag this way without the host.
//!
//! Writes take flags 0: a write is ordered after the stream's earlier writes (the driver's v2
//! operations have no unordered write); a batch may hold a [`MemOp::Barrier`].
//!
//! A wait for a value no work will write hangs the stream, as with the driver. Where the device
//! lacks an operation (64-bit operations, [`WaitCondition::Nor`], [`WAIT_FLUSH`] have their own
//! capabilities) the call is [`Status::NotSupported`](crate::Status::NotSupported) with the
//! reason.

use std::os::raw::c_void;
use std::ptr;

use crate::error::{check, Result};
use crate::{sys, DeviceBuffer, Stream};

/// `CGC_WAIT_FLUSH`, or-ed into a wait's `flags`: also make remote writes before the wait
/// visible.
pub const WAIT_FLUSH: u32 = sys::CGC_WAIT_FLUSH;

/// What a wait waits for (`CGC_WAIT_*`), with `*addr` the value in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitCondition {
    /// `(int32_t)(*addr - value) >= 0`: a counter that wraps has reached `value`.
    Geq,
    /// `*addr == value`.
    Eq,
    /// `(*addr & value) != 0`.
    And,
    /// `~(*addr | value) != 0` (devices with the NOR capability).
    Nor,
}

impl WaitCondition {
    /// The raw `CGC_WAIT_*` flag.
    pub fn to_raw(self) -> u32 {
        match self {
            WaitCondition::Geq => sys::CGC_WAIT_GEQ,
            WaitCondition::Eq => sys::CGC_WAIT_EQ,
            WaitCondition::And => sys::CGC_WAIT_AND,
            WaitCondition::Nor => sys::CGC_WAIT_NOR,
        }
    }
}

/// The scope of a [`MemOp::Barrier`] (`CGC_BARRIER_*`): whom earlier writes become visible to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierScope {
    /// The whole system: the host and peers (`CGC_BARRIER_SYSTEM`).
    System,
    /// The device (`CGC_BARRIER_GPU`).
    Gpu,
}

impl BarrierScope {
    /// The raw `CGC_BARRIER_*` flag.
    pub fn to_raw(self) -> u32 {
        match self {
            BarrierScope::System => sys::CGC_BARRIER_SYSTEM,
            BarrierScope::Gpu => sys::CGC_BARRIER_GPU,
        }
    }
}

/// One operation of [`Stream::batch_mem_op`], on the first 4 or 8 bytes of a buffer.
#[derive(Clone, Copy, Debug)]
pub enum MemOp<'a> {
    /// Write a 32-bit value (`flags` must be 0).
    WriteValue32 {
        /// Where (its first 4 bytes).
        address: &'a DeviceBuffer,
        /// What.
        value: u32,
        /// Must be 0: writes take no flags (any other value is refused).
        flags: u32,
    },
    /// Write a 64-bit value.
    WriteValue64 {
        /// Where (its first 8 bytes).
        address: &'a DeviceBuffer,
        /// What.
        value: u64,
        /// Must be 0: writes take no flags (any other value is refused).
        flags: u32,
    },
    /// Wait until the 32-bit value meets `condition`.
    WaitValue32 {
        /// Where (its first 4 bytes).
        address: &'a DeviceBuffer,
        /// The value compared with.
        value: u32,
        /// The comparison.
        condition: WaitCondition,
        /// [`WAIT_FLUSH`] or 0.
        flags: u32,
    },
    /// Wait until the 64-bit value meets `condition`.
    WaitValue64 {
        /// Where (its first 8 bytes).
        address: &'a DeviceBuffer,
        /// The value compared with.
        value: u64,
        /// The comparison.
        condition: WaitCondition,
        /// [`WAIT_FLUSH`] or 0.
        flags: u32,
    },
    /// Make remote writes visible (devices with the flush capability).
    FlushRemoteWrites,
    /// A memory barrier: earlier writes become visible to `scope` (batches only: no
    /// single-operation call takes one).
    Barrier {
        /// Whom the writes become visible to.
        scope: BarrierScope,
    },
}

impl MemOp<'_> {
    /// The buffer and the bytes the operation needs in it, if it has one.
    fn target(&self) -> Option<(&DeviceBuffer, usize)> {
        match *self {
            MemOp::WriteValue32 { address, .. } | MemOp::WaitValue32 { address, .. } => {
                Some((address, 4))
            }
            MemOp::WriteValue64 { address, .. } | MemOp::WaitValue64 { address, .. } => {
                Some((address, 8))
            }
            MemOp::FlushRemoteWrites | MemOp::Barrier { .. } => None,
        }
    }

    /// The C struct (`cgc_mem_op_t`).
    pub fn to_raw(&self) -> sys::cgc_mem_op_t {
        let (kind, flags, address, value) = match *self {
            MemOp::WriteValue32 {
                address,
                value,
                flags,
            } => (
                sys::CGC_MEM_OP_WRITE_VALUE_32,
                flags,
                address.as_ptr(),
                value as u64,
            ),
            MemOp::WriteValue64 {
                address,
                value,
                flags,
            } => (
                sys::CGC_MEM_OP_WRITE_VALUE_64,
                flags,
                address.as_ptr(),
                value,
            ),
            MemOp::WaitValue32 {
                address,
                value,
                condition,
                flags,
            } => (
                sys::CGC_MEM_OP_WAIT_VALUE_32,
                condition.to_raw() | flags,
                address.as_ptr(),
                value as u64,
            ),
            MemOp::WaitValue64 {
                address,
                value,
                condition,
                flags,
            } => (
                sys::CGC_MEM_OP_WAIT_VALUE_64,
                condition.to_raw() | flags,
                address.as_ptr(),
                value,
            ),
            MemOp::FlushRemoteWrites => {
                (sys::CGC_MEM_OP_FLUSH_REMOTE_WRITES, 0, ptr::null_mut(), 0)
            }
            MemOp::Barrier { scope } => {
                (sys::CGC_MEM_OP_BARRIER, scope.to_raw(), ptr::null_mut(), 0)
            }
        };
        sys::cgc_mem_op_t {
            kind,
            flags,
            address,
            value,
        }
    }
}

impl Stream {
    /// Writes `value` to the first 4 bytes of `dst` in stream order
    /// (`cgc_stream_write_value32`; `flags` must be 0: writes take no flags).
    pub fn write_value32(&self, dst: &DeviceBuffer, value: u32, flags: u32) -> Result<()> {
        dst.check_holds(Some(4), "cgc_stream_write_value32")?;
        // SAFETY: dst holds 4 bytes (and cgc_malloc blocks are aligned).
        unsafe { self.write_value32_raw(dst.as_ptr(), value, flags) }
    }

    /// Writes `value` to the first 8 bytes of `dst` in stream order
    /// (`cgc_stream_write_value64`; `flags` must be 0).
    pub fn write_value64(&self, dst: &DeviceBuffer, value: u64, flags: u32) -> Result<()> {
        dst.check_holds(Some(8), "cgc_stream_write_value64")?;
        // SAFETY: dst holds 8 bytes.
        unsafe { self.write_value64_raw(dst.as_ptr(), value, flags) }
    }

    /// Makes later work on the stream wait until the first 4 bytes of `src` meet `condition`
    /// with `value` (`cgc_stream_wait_value32`; `flags`: [`WAIT_FLUSH`] or 0).
    pub fn wait_value32(
        &self,
        src: &DeviceBuffer,
        value: u32,
        condition: WaitCondition,
        flags: u32,
    ) -> Result<()> {
        src.check_holds(Some(4), "cgc_stream_wait_value32")?;
        // SAFETY: src holds 4 bytes; a wait only reads.
        unsafe { self.wait_value32_raw(src.as_ptr(), value, condition.to_raw() | flags) }
    }

    /// Makes later work on the stream wait until the first 8 bytes of `src` meet `condition`
    /// with `value` (`cgc_stream_wait_value64`).
    pub fn wait_value64(
        &self,
        src: &DeviceBuffer,
        value: u64,
        condition: WaitCondition,
        flags: u32,
    ) -> Result<()> {
        src.check_holds(Some(8), "cgc_stream_wait_value64")?;
        // SAFETY: src holds 8 bytes; a wait only reads.
        unsafe { self.wait_value64_raw(src.as_ptr(), value, condition.to_raw() | flags) }
    }

    /// 1 to 255 operations (the driver's limit) in one call, in order
    /// (`cgc_stream_batch_mem_op`).
    pub fn batch_mem_op(&self, ops: &[MemOp<'_>]) -> Result<()> {
        for (index, op) in ops.iter().enumerate() {
            if let Some((buffer, bytes)) = op.target() {
                buffer.check_holds(
                    Some(bytes),
                    &format!("cgc_stream_batch_mem_op (ops[{}])", index),
                )?;
            }
        }
        let raw: Vec<sys::cgc_mem_op_t> = ops.iter().map(MemOp::to_raw).collect();
        // SAFETY: every buffer holds what its operation touches (checked above).
        unsafe { self.batch_mem_op_raw(&raw) }
    }

    /// `cgc_stream_write_value32` at any address (`flags` must be 0).
    ///
    /// # Safety
    /// `address` must be 4 bytes of memory the device may write (device memory, or mapped
    /// page-locked host memory that nothing else uses meanwhile), alive until the write (or
    /// every replay of a graph capturing it) has run.
    pub unsafe fn write_value32_raw(
        &self,
        address: *mut c_void,
        value: u32,
        flags: u32,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_stream_write_value32)(self.raw, address, value, flags),
        )
    }

    /// `cgc_stream_write_value64` at any address.
    ///
    /// # Safety
    /// As for [`Stream::write_value32_raw`], for 8 bytes.
    pub unsafe fn write_value64_raw(
        &self,
        address: *mut c_void,
        value: u64,
        flags: u32,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_stream_write_value64)(self.raw, address, value, flags),
        )
    }

    /// `cgc_stream_wait_value32` at any address; `flags` is a raw `CGC_WAIT_*` condition,
    /// optionally | [`WAIT_FLUSH`] (e.g. `WaitCondition::Eq.to_raw()`).
    ///
    /// # Safety
    /// `address` must be 4 bytes of memory the device may read (device memory, or mapped
    /// page-locked host memory: a flag the host sets), alive until the wait (or every replay of
    /// a graph capturing it) is over.
    pub unsafe fn wait_value32_raw(
        &self,
        address: *mut c_void,
        value: u32,
        flags: u32,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_stream_wait_value32)(self.raw, address, value, flags),
        )
    }

    /// `cgc_stream_wait_value64` at any address.
    ///
    /// # Safety
    /// As for [`Stream::wait_value32_raw`], for 8 bytes.
    pub unsafe fn wait_value64_raw(
        &self,
        address: *mut c_void,
        value: u64,
        flags: u32,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_stream_wait_value64)(self.raw, address, value, flags),
        )
    }

    /// `cgc_stream_batch_mem_op` of 1 to 255 raw operations.
    ///
    /// # Safety
    /// Every operation's address must be as [`Stream::write_value32_raw`] and
    /// [`Stream::wait_value32_raw`] require for its kind and width.
    pub unsafe fn batch_mem_op_raw(&self, ops: &[sys::cgc_mem_op_t]) -> Result<()> {
        // An empty slice's pointer is dangling but not NULL; cgc refuses count 0 first.
        check(
            self.api,
            (self.api.cgc_stream_batch_mem_op)(self.raw, ops.as_ptr(), ops.len()),
        )
    }
}
