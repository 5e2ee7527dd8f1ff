//! [`Context`]: one device (its primary context), [`MemoryStats`] and (1.6) the memory
//! snapshot's [`Segment`]s and [`Block`]s.

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

    /// 1.6: the device's memory as cgc holds it (`cgc_memory_snapshot`), like PyTorch's
    /// `torch.cuda.memory_snapshot()`: every segment (a driver allocation of the device cache or
    /// of a pool), sorted by address, each with its blocks in address order. The segments' sizes
    /// add up to [`MemoryStats::bytes_reserved`] of the device. A diagnostic: the library walks
    /// every block with the device allocator's lock held (allocations on other threads wait
    /// meanwhile). Segments may come and go between the call that asks for the totals and the
    /// one that fills the arrays: the arrays get some slack and the call is repeated until they
    /// fit. Errors: [`Status::OutOfMemory`] when the library runs out of host memory.
    pub fn memory_snapshot(&self) -> Result<Vec<Segment>> {
        let (mut n_segments, mut n_blocks) = (0usize, 0usize);
        // SAFETY: live handle; NULL arrays with 0 capacities ask for the totals alone.
        check(self.api, unsafe {
            (self.api.cgc_memory_snapshot)(
                self.raw,
                ptr::null_mut(),
                0,
                ptr::null_mut(),
                0,
                &mut n_segments,
                &mut n_blocks,
            )
        })?;
        let empty_segment = sys::cgc_segment_info_t {
            address: ptr::null_mut(),
            size: 0,
            allocated_bytes: 0,
            pool: ptr::null_mut(),
            stream_id: 0,
            small: 0,
            first_block: 0,
            n_blocks: 0,
        };
        let empty_block = sys::cgc_block_info_t {
            address: ptr::null_mut(),
            size: 0,
            requested: 0,
            state: sys::CGC_BLOCK_STATE_FREE,
        };
        while n_segments > 0 || n_blocks > 0 {
            let max_segments = n_segments + n_segments / 4 + 4;
            let max_blocks = n_blocks + n_blocks / 4 + 16;
            let mut segments = vec![empty_segment; max_segments];
            let mut blocks = vec![empty_block; max_blocks];
            // SAFETY: live handle; each array holds as many elements as its capacity says.
            check(self.api, unsafe {
                (self.api.cgc_memory_snapshot)(
                    self.raw,
                    segments.as_mut_ptr(),
                    max_segments,
                    blocks.as_mut_ptr(),
                    max_blocks,
                    &mut n_segments,
                    &mut n_blocks,
                )
            })?;
            if n_segments > max_segments || n_blocks > max_blocks {
                continue; // grew in between: nothing was written but the totals
            }
            return Ok(segments[..n_segments]
                .iter()
                .map(|s| Segment {
                    address: s.address as u64,
                    size: s.size,
                    allocated_bytes: s.allocated_bytes,
                    pool: PoolId::from_raw(s.pool),
                    stream_id: s.stream_id,
                    small: s.small != 0,
                    blocks: blocks[s.first_block..s.first_block + s.n_blocks]
                        .iter()
                        .map(|b| Block {
                            address: b.address as u64,
                            size: b.size,
                            requested: b.requested,
                            state: BlockState::from_raw(b.state),
                        })
                        .collect(),
                })
                .collect());
        }
        Ok(Vec::new())
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

/// 1.6: one segment of [`Context::memory_snapshot`]: a driver allocation of the device cache or
/// of a private pool, with its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its device address.
    pub address: u64,
    /// Its size in bytes (its blocks' sizes add up to it).
    pub size: usize,
    /// Its blocks handed out and not yet freed.
    pub allocated_bytes: usize,
    /// The private pool it belongs to ([`PoolId::of`] a [`Pool`] to compare), `None` for the
    /// device's cache.
    pub pool: Option<PoolId>,
    /// The stream its free blocks are kept for ([`Stream::id`]), 0 for any stream.
    pub stream_id: u64,
    /// A segment of small requests (2 MiB, for requests up to 1 MiB).
    pub small: bool,
    /// Its blocks, in address order.
    pub blocks: Vec<Block>,
}

/// 1.6: one block of a [`Segment`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Its device address.
    pub address: u64,
    /// What it spans, in bytes (a 512-byte multiple).
    pub size: usize,
    /// What was asked for, for an allocated block; 0 otherwise.
    pub requested: usize,
    /// Its state.
    pub state: BlockState,
}

/// 1.6: a block's state in a memory snapshot (`cgc_block_state_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Cached: reusable.
    Free,
    /// Handed out and not yet freed.
    Allocated,
    /// Freed, not yet reusable: work recorded on it may still run.
    Waiting,
    /// A value this version of the crate does not know (a newer library), kept as is.
    Unknown(i32),
}

impl BlockState {
    /// The state for a raw `cgc_block_state_t`.
    pub fn from_raw(raw: sys::cgc_block_state_t) -> BlockState {
        match raw {
            sys::CGC_BLOCK_STATE_FREE => BlockState::Free,
            sys::CGC_BLOCK_STATE_ALLOCATED => BlockState::Allocated,
            sys::CGC_BLOCK_STATE_WAITING => BlockState::Waiting,
            other => BlockState::Unknown(other),
        }
    }

    /// The raw `cgc_block_state_t`.
    pub fn to_raw(self) -> sys::cgc_block_state_t {
        match self {
            BlockState::Free => sys::CGC_BLOCK_STATE_FREE,
            BlockState::Allocated => sys::CGC_BLOCK_STATE_ALLOCATED,
            BlockState::Waiting => sys::CGC_BLOCK_STATE_WAITING,
            BlockState::Unknown(raw) => raw,
        }
    }
}

/// 1.6: which pool a [`Segment`] belongs to: the pool's handle as an identity, holding no
/// reference (the pool may be gone by the time it is read, so it is never used as a handle
/// here). Equal to [`PoolId::of`] a [`Pool`] on the same pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId(usize);

impl PoolId {
    /// The identity of `pool`.
    pub fn of(pool: &Pool) -> PoolId {
        PoolId(pool.raw as usize)
    }

    /// The identity of a raw handle, `None` for NULL.
    pub fn from_raw(raw: sys::cgc_pool_t) -> Option<PoolId> {
        if raw.is_null() {
            None
        } else {
            Some(PoolId(raw as usize))
        }
    }

    /// The raw handle it was made from: a live handle only while the caller holds a reference
    /// on that pool.
    pub fn as_raw(self) -> sys::cgc_pool_t {
        self.0 as sys::cgc_pool_t
    }
}
