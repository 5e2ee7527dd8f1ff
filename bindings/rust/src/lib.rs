//! Rust binding of **cgc**: CUDA-graph capture with the semantics of PyTorch's
//! `torch.cuda.graph` (private memory pools shared across graphs, fork/join capture through
//! events, graph-safe Philox random numbers, NCCL), over the stable C ABI of `libcgc.so.1`.
//!
//! The crate has no dependencies and does not link libcgc: the library is opened with `dlopen`
//! on first use, from `$CGC_LIBRARY` (a full path) if set, else `libcgc.so.1` through the
//! dynamic loader's search path. When it cannot be loaded every call returns an [`Error`] whose
//! message says what was tried ([`Error::is_load_error`]). The CUDA driver is in turn loaded by
//! libcgc (`$CGC_CUDA_DRIVER`, default `libcuda.so.1`); without it calls fail with
//! [`Status::NoDriver`].
//!
//! Hello graph:
//!
//! ```no_run
//! # fn main() -> Result<(), cgc::Error> {
//! let ctx = cgc::Context::new(0)?;
//! let (stream, rng) = (cgc::Stream::new(&ctx)?, cgc::Rng::new(&ctx, 42)?);
//! let x = cgc::DeviceBuffer::alloc(&ctx, 1024 * 4, &stream)?;
//! let graph = stream.capture(&cgc::CaptureOptions::default(), |s| rng.uniform(&x, 1024, s))?;
//! graph.launch(&stream)?; stream.synchronize()?; // fresh numbers in x at every launch
//! # Ok(()) }
//! ```
//!
//! Since 1.1 a graph can hold the caller's own work too: copies and sets
//! ([`Stream::copy_to_device`], [`Stream::memset_d32`], ... with page-locked [`HostBuffer`]s,
//! which a captured copy reads or writes again at every replay), host functions
//! ([`Stream::launch_host_func`]), stream memory operations ([`Stream::write_value32`],
//! [`Stream::wait_value32`]) and kernels of the caller's modules ([`Module`],
//! [`Function::launch`]). [`Graph::info`] counts the nodes by kind.
//! `examples/rust/graph_work.rs` (`cargo run --example graph_work`) uses all of them.
//!
//! Since 1.2 a graph changes without a new [`Graph`]: [`Stream::capture_update`] recaptures it,
//! its executable updated in place when the driver accepts the new graph (same topology: new
//! pointers or values), else instantiated anew; [`Graph::set_kernel_enabled`] and
//! [`Graph::set_kernel_args`] change one captured kernel. Inside a capture,
//! [`Stream::conditional`] adds a conditional node: a body that runs once ([`ConditionalKind::If`])
//! or in a loop ([`ConditionalKind::While`]) as long as a device `u32` the caller's kernels
//! write is nonzero, on a body stream the library lends to a closure.
//!
//! Since 1.3 [`Stream::conditional_bodies`] adds a node with all its bodies at once, lent to a
//! closure as [`ConditionalBodies`]: IF/ELSE (two bodies), SWITCH ([`ConditionalKind::Switch`],
//! the body the condition numbers) and WHILE loops whose own kernels set the condition through
//! the node's handle ([`CONDITIONAL_BODY_SETS_CONDITION`]). Bodies may allocate from the
//! capture's pool and draw from generators ([`LOOP_EAGER_ITERATIONS`] says what a loop draws).
//!
//! Since 1.4 a capture that cgc did not begin, one another framework began with the driver
//! (`torch.cuda.graph` with cgc as PyTorch's allocator), can allocate from a cgc pool:
//! [`Pool::adopt_capture`] (or [`Pool::adopt_stream_capture`]) until
//! [`Pool::end_adopted_capture`]; [`DeviceBuffer::record_stream_native`] records a use by a
//! native stream.
//!
//! Since 1.5 [`Pool::nccl`] makes a pool of memory registered with a [`Comm`] (a fixed arena,
//! [`NcclMemory::Registered`] or [`NcclMemory::Symmetric`] where NCCL has them), which captures
//! allocate from as from any pool, and [`Pool::alloc`] allocates from a pool outside captures.
//!
//! Since 1.6 [`last_status`] is the status that goes with the library's last message on this
//! thread, for calls of the raw table that return no status (`cgc_torch_malloc`), and
//! [`Context::memory_snapshot`] lists the device's memory as cgc holds it, like PyTorch's
//! `torch.cuda.memory_snapshot()`: every [`Segment`] (a driver allocation of the device cache or
//! of a pool) with its [`Block`]s, [`Pool::claim`] allocates a given range of a pool's free
//! memory, at its address (to put a pool back to a state it had), and [`Pool::create_at`] makes
//! a pool whose memory is a virtual range reserved at a given base, so that the same requests in
//! the same order get the same addresses. Graphs whose memory lies in such pools can be saved:
//! [`save_graphs`] writes them, with their kernels and the layout of their pools (and
//! [`save_graphs_with`] with [`SaveOptions::with_verify`] replays each graph beside its rebuild
//! from those bytes, failing when they write different bytes), to bytes that
//! [`SavedInfo::read`] describes without a driver and [`Context::restore_graphs`] rebuilds (in
//! another process on the same architecture and driver version) into new [`Graph`]s and
//! [`Pool`]s at the same addresses, ready to launch (graphs that draw from an [`Rng`] are saved
//! with its state, and [`Context::restore_graphs_with_generators`] hands back the generators
//! created again); [`Context::add_module_image`] names a module
//! cgc did not load by a key, and [`module_record`] records the image of every module the driver
//! loads (through CUPTI), so that a save embeds kernels of libraries cgc did not load. Graphs of
//! one topology that differ in their nodes' parameters (one per batch size) can share one
//! executable: [`Graph::share_executable`] makes a graph a member of another's family, updated
//! in place to each member's nodes before its launch ([`GraphInfo::family_size`],
//! [`GraphInfo::family_result`]), and [`RestoreOptions::with_families`] makes restored graphs of
//! one structure share theirs ([`RestoreOptions::with_threads`]: how many host threads build and
//! instantiate them).
//!
//! Objects own their handle and destroy it on `Drop` (errors there are ignored); each also has
//! a `destroy(self)` (or `free`, `release`) that reports the library's status. Objects made from
//! a [`Context`] keep the device state alive on their own, so they borrow nothing from it.
//!
//! Threads: the C contract is that every function may be called from any thread, and that an
//! object must not be destroyed while another thread uses it. Destroying takes ownership here
//! (`Drop` or `destroy(self)`), so the borrow checker gives the second half; the types are
//! `Send` and `Sync` accordingly, except [`Graph`] (`Send` only: CUDA executable graphs are not
//! internally synchronised and cgc adds no lock to launch) and [`CaptureModeGuard`] (neither:
//! the capture mode belongs to one OS thread). Each `unsafe impl` says why.
//!
//! What cannot be checked is `unsafe`, with the caller's duties under "Safety": copies into
//! host memory (the device writes it after the call returns, and at every replay of a graph),
//! kernel launches (nothing knows a kernel's parameters), and the `_raw` methods that take any
//! address. Writes to a [`DeviceBuffer`] are safe: its size is checked, and device memory is
//! not the Rust program's.
#![warn(missing_docs)]

use std::collections::HashSet;
use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

mod comm;
mod conditional;
mod copies;
mod error;
mod host_func;
mod host_memory;
mod mem_ops;
mod module;
#[cfg(test)]
mod no_gpu_tests;
mod stream_attributes;
#[allow(missing_docs)]
pub mod sys;

pub use comm::{group_end, group_start, nccl_version, Comm, CommId, DType, NcclMemory, ReduceOp};
pub use conditional::{ConditionalBodies, ConditionalKind, CONDITIONAL_BODY_SETS_CONDITION, LOOP_EAGER_ITERATIONS};
pub use error::{Error, Result, Status};
pub use host_func::host_function_panics;
pub use host_memory::{HostBuffer, HostRegistration, HOST_READ_ONLY, HOST_WRITE_COMBINED};
pub use mem_ops::{BarrierScope, MemOp, WaitCondition, WAIT_FLUSH};
pub use module::{Function, FunctionAttribute, KernelArg, LaunchConfig, Module};
pub use stream_attributes::{AccessPolicy, AccessProperty, StreamPriorityRange};

use error::check;

/// The library's function table, loading libcgc on first use (see the crate docs for where it
/// is looked for). The raw table is for what the safe layer does not cover.
pub fn api() -> Result<&'static sys::cgc_api_t> {
    sys::api().map_err(Error::load)
}

/// The version of the loaded library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major version (1; also the soname).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The loaded library's version (`cgc_version`). Loading already checked the major version.
pub fn version() -> Result<Version> {
    let api = api()?;
    // SAFETY: no arguments; always safe to call.
    let v = unsafe { (api.cgc_version)() };
    Ok(Version {
        major: v >> 16,
        minor: (v >> 8) & 0xff,
        patch: v & 0xff,
    })
}

/// 1.6: the status that goes with this thread's `cgc_last_error()` (`cgc_last_status`): the
/// status of the failure that message describes, [`Status::Success`] when it is a warning or
/// there is none. A failed call's [`Error`] already carries its status; this is for what returns
/// none through the raw table (`cgc_torch_malloc` returns NULL: [`Status::OutOfMemory`] here then
/// tells out of memory from other refusals). A call that succeeds without a warning changes it
/// not, the next failure (on this thread) sets it.
pub fn last_status() -> Result<Status> {
    let api = api()?;
    // SAFETY: no arguments; reads a thread-local value, always safe to call.
    Ok(Status::from_raw(unsafe { (api.cgc_last_status)() }))
}

/// Number of CUDA devices. Errors: [`Status::NoDriver`] without the CUDA driver,
/// [`Status::NoDevice`] when the driver sees no GPU.
pub fn device_count() -> Result<i32> {
    let api = api()?;
    let mut count: c_int = 0;
    // SAFETY: valid out pointer.
    check(api, unsafe { (api.cgc_device_count)(&mut count) })?;
    Ok(count)
}

// The safe layer, one module per kind of object (each re-exported at the crate's root).
mod capture;
mod context;
mod event;
mod graph;
mod memory;
mod pool;
mod rng;
mod saved;
mod stream;
pub use capture::*;
pub use context::*;
pub use event::*;
pub use graph::*;
pub use memory::*;
pub use pool::*;
pub use rng::*;
pub use saved::*;
pub use stream::*;
