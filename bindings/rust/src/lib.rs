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

/// Number of CUDA devices. Errors: [`Status::NoDriver`] without the CUDA driver,
/// [`Status::NoDevice`] when the driver sees no GPU.
pub fn device_count() -> Result<i32> {
    let api = api()?;
    let mut count: c_int = 0;
    // SAFETY: valid out pointer.
    check(api, unsafe { (api.cgc_device_count)(&mut count) })?;
    Ok(count)
}

// ---- context ------------------------------------------------------------------------------------

/// One device: a reference on its primary context (`cgc_context_t`).
pub struct Context {
    raw: sys::cgc_context_t,
    api: &'static sys::cgc_api_t,
    device: i32,
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

// ---- streams ------------------------------------------------------------------------------------

/// A stream: owned (created by cgc, destroyed on drop) or borrowed (a wrapped native stream,
/// of which only the handle is freed).
pub struct Stream {
    raw: sys::cgc_stream_t,
    api: &'static sys::cgc_api_t,
    borrowed: bool,
}

// SAFETY: the C contract allows every call from any thread; CUDA streams accept work from any
// thread and cgc guards its capture bookkeeping with a process-wide lock. Destruction needs
// ownership.
unsafe impl Send for Stream {}
// SAFETY: as for Send.
unsafe impl Sync for Stream {}

/// `CGC_STREAM_NON_BLOCKING`: the stream does not synchronise with the legacy default stream.
pub const STREAM_NON_BLOCKING: u32 = sys::CGC_STREAM_NON_BLOCKING;

impl Stream {
    /// A new non-blocking stream of default priority (what capture needs most often).
    pub fn new(ctx: &Context) -> Result<Stream> {
        Stream::with_flags(ctx, STREAM_NON_BLOCKING, 0)
    }

    /// A new stream with `flags` (`STREAM_NON_BLOCKING` or 0) and `priority` (0 the default,
    /// lower is higher priority, clamped to [`Context::stream_priority_range`]).
    pub fn with_flags(ctx: &Context, flags: u32, priority: i32) -> Result<Stream> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid out pointer.
        check(ctx.api, unsafe {
            (ctx.api.cgc_stream_create)(ctx.raw, flags, priority, &mut raw)
        })?;
        Ok(Stream {
            raw,
            api: ctx.api,
            borrowed: false,
        })
    }

    /// Borrows an existing `CUstream` / `cudaStream_t` of `ctx`'s device. Dropping the result
    /// frees only the handle.
    ///
    /// # Safety
    /// `native` must be a stream of `ctx`'s device (or null / `cudaStreamLegacy` /
    /// `cudaStreamPerThread`) that stays alive as long as the returned `Stream`, and work that
    /// cgc enqueues on it.
    pub unsafe fn wrap(ctx: &Context, native: *mut c_void) -> Result<Stream> {
        let mut raw = ptr::null_mut();
        check(
            ctx.api,
            (ctx.api.cgc_stream_wrap)(ctx.raw, native, &mut raw),
        )?;
        Ok(Stream {
            raw,
            api: ctx.api,
            borrowed: true,
        })
    }

    /// The legacy default stream of `ctx`'s device (borrowed). Graphs may be replayed on it
    /// but not captured.
    pub fn legacy_default(ctx: &Context) -> Result<Stream> {
        // SAFETY: NULL names the legacy default stream, which lives as long as the process.
        unsafe { Stream::wrap(ctx, ptr::null_mut()) }
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_stream_t {
        self.raw
    }

    /// The `CUstream` behind the handle (null for the legacy default stream).
    pub fn native(&self) -> *mut c_void {
        // SAFETY: live handle.
        unsafe { (self.api.cgc_stream_native)(self.raw) }
    }

    /// Whether the stream was wrapped rather than created.
    pub fn is_borrowed(&self) -> bool {
        self.borrowed
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe {
            (self.api.cgc_stream_synchronize)(self.raw)
        })
    }

    /// Whether all work on the stream has finished.
    pub fn query(&self) -> Result<bool> {
        let mut complete: c_int = 0;
        // SAFETY: live handle, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_stream_query)(self.raw, &mut complete)
        })?;
        Ok(complete != 0)
    }

    /// Makes future work on this stream wait for `event`'s last record: the fork and the join
    /// of a capture.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_stream_wait_event)(self.raw, event.raw)
        })
    }

    /// Whether the stream is capturing, and the driver's capture id (0 when not).
    pub fn capture_status(&self) -> Result<(CaptureStatus, u64)> {
        let mut status: sys::cgc_capture_status_t = 0;
        let mut id: u64 = 0;
        // SAFETY: live handle, valid out pointers.
        check(self.api, unsafe {
            (self.api.cgc_stream_capture_status)(self.raw, &mut status, &mut id)
        })?;
        let status = CaptureStatus::from_raw(status).ok_or_else(|| {
            Error::new(
                Status::Internal,
                format!(
                    "cgc_stream_capture_status: unknown capture status {}",
                    status
                ),
            )
        })?;
        Ok((status, id))
    }

    /// Starts capturing this stream into a new graph. Prefer [`Stream::capture`], which cannot
    /// leave the stream capturing.
    pub fn begin_capture(&self, options: &CaptureOptions<'_>) -> Result<()> {
        let raw_options = options.to_raw();
        // SAFETY: live handle; the options struct is valid for the call (cgc takes its own
        // reference on the pool).
        check(self.api, unsafe {
            (self.api.cgc_capture_begin)(self.raw, &raw_options)
        })
    }

    /// Ends the capture begun on this stream and instantiates the graph. Whatever the outcome,
    /// no stream is left capturing. The capture of a [`Stream::capture_update`] is ended by that
    /// call: ended here instead (from its body, or from another thread in Relaxed mode), it
    /// updates its graph all the same, and this returns [`Status::InvalidState`] rather than a
    /// second owner of that graph's handle.
    pub fn end_capture(&self) -> Result<Graph> {
        let mut raw = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_capture_end)(self.raw, &mut raw)
        })?;
        Graph::adopt(raw, self.api).ok_or_else(|| {
            Error::new(
                Status::InvalidState,
                format!(
                    "cgc_capture_end: the capture updated graph {:p}, which a Graph owns: the capture has ended and \
                     the graph is updated, but an update capture is ended by the Stream::capture_update that began it",
                    raw
                ),
            )
        })
    }

    /// Ends a capture whose result is not wanted: errors are ignored (the body's error, or
    /// the panic, is what the caller needs) and a new graph, if any, is destroyed.
    fn abandon_capture(&self) {
        let mut graph = ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        unsafe { (self.api.cgc_capture_end)(self.raw, &mut graph) };
        // A graph that a Graph owns (an update ended here) is that Graph's to keep.
        drop(Graph::adopt(graph, self.api));
    }

    /// Captures what `body` enqueues on this stream (and on streams it forks through events)
    /// into a graph. The capture is always ended: if `body` returns an error, the capture is
    /// ended, the graph discarded and `body`'s error returned; if it panics, the capture is
    /// ended while unwinding.
    pub fn capture<F>(&self, options: &CaptureOptions<'_>, body: F) -> Result<Graph>
    where
        F: FnOnce(&Stream) -> Result<()>,
    {
        self.begin_capture(options)?;
        // Ends the capture if `body` unwinds; disarmed (forgotten) on the normal paths.
        struct EndOnUnwind<'s>(&'s Stream);
        impl Drop for EndOnUnwind<'_> {
            fn drop(&mut self) {
                self.0.abandon_capture();
            }
        }
        let guard = EndOnUnwind(self);
        let outcome = body(self);
        std::mem::forget(guard);
        match outcome {
            Ok(()) => self.end_capture(),
            Err(e) => {
                self.abandon_capture();
                Err(e)
            }
        }
    }

    /// Recaptures `graph` (1.2, `cgc_capture_options_t.update`): what `body` enqueues on this
    /// stream (and on streams it forks) becomes `graph`'s content, in the same [`Graph`] and
    /// handle. Its executable is updated in place when the driver accepts the new graph (the
    /// same topology: new pointers or argument values, much cheaper than instantiating), else
    /// instantiated anew; the result says which, and [`Graph::info`] why
    /// ([`GraphInfo::last_update_result`]). The recapture allocates from the graph's own pool, so
    /// `options.pool` must be `None` or that pool. Kernels disabled or given new arguments
    /// ([`Graph::set_kernel_enabled`], [`Graph::set_kernel_args`]) are as captured again.
    ///
    /// The capture is always ended. If `body` returns an error or panics, the recapture is
    /// discarded and `graph` keeps its old content; the error is returned, the panic goes on.
    /// If the end fails (e.g. an unjoined side stream), `graph` keeps its old content too.
    pub fn capture_update<F>(
        &self,
        graph: &mut Graph,
        options: &CaptureOptions<'_>,
        body: F,
    ) -> Result<GraphUpdate>
    where
        F: FnOnce(&Stream) -> Result<()>,
    {
        // cgc_capture rather than begin, body and end from here (as Stream::capture does): an
        // update capture ended by cgc_capture_end always updates its graph, and only the
        // library's own cgc_capture can end one whose body failed without applying it. The body
        // runs inside that C call, through `run_body`, which must not let a panic unwind into C:
        // it keeps the panic for after the call.
        struct Call<'s, F> {
            stream: &'s Stream,
            body: Option<F>,
            failure: Option<Error>,
            panic: Option<Box<dyn std::any::Any + Send>>,
        }
        unsafe extern "C" fn run_body<F: FnOnce(&Stream) -> Result<()>>(
            _stream: sys::cgc_stream_t,
            user: *mut c_void,
        ) -> sys::cgc_status_t {
            // SAFETY: `user` is the `Call` below, alive and otherwise untouched during the call.
            let call = &mut *(user as *mut Call<'_, F>);
            let (stream, body) = match call.body.take() {
                Some(body) => (call.stream, body),
                None => return sys::CGC_ERROR_INTERNAL, // cgc_capture calls it once
            };
            match catch_unwind(AssertUnwindSafe(|| body(stream))) {
                Ok(Ok(())) => sys::CGC_SUCCESS,
                Ok(Err(e)) => {
                    // A failure status makes cgc_capture discard the capture.
                    let status = match e.status() {
                        Some(s) if s != Status::Success => s.to_raw(),
                        _ => sys::CGC_ERROR_INTERNAL,
                    };
                    call.failure = Some(e);
                    status
                }
                Err(payload) => {
                    call.panic = Some(payload);
                    sys::CGC_ERROR_INTERNAL
                }
            }
        }

        let mut raw_options = options.to_raw();
        raw_options.update = graph.raw;
        let mut call = Call {
            stream: self,
            body: Some(body),
            failure: None,
            panic: None,
        };
        let mut out = ptr::null_mut();
        // SAFETY: live handles (`graph` is borrowed mutably for the whole capture, so it cannot
        // be reset or dropped meanwhile); the options, `call` and `out` outlive the call, and
        // `run_body::<F>` is the function for this `Call<F>`.
        let status = unsafe {
            (self.api.cgc_capture)(
                self.raw,
                &raw_options,
                Some(run_body::<F>),
                &mut call as *mut Call<'_, F> as *mut c_void,
                &mut out,
            )
        };
        let ended = check(self.api, status);
        if let Some(payload) = call.panic.take() {
            resume_unwind(payload);
        }
        if let Some(e) = call.failure.take() {
            return Err(e); // the body's error is the cause, whatever the end said after it
        }
        ended?;
        if out != graph.raw {
            // `body` ended the update itself (end_capture kept the graph with its one owner) and
            // began another capture, whose new graph this is.
            drop(Graph::adopt(out, self.api));
            return Err(Error::new(
                Status::InvalidState,
                "cgc_capture: the capture ended here was not the update Stream::capture_update began: its body \
                 ended that one and began another (discarded)",
            ));
        }
        Ok(graph.info()?.last_update)
    }

    /// Destroys the stream (an owned one; a borrowed one only loses its handle), reporting the
    /// status. [`Status::InvalidState`] while a capture is under way on it; the handle is then
    /// leaked rather than left dangling.
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_stream_destroy)(raw) })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_stream_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("borrowed", &self.borrowed)
            .finish()
    }
}

// ---- events -------------------------------------------------------------------------------------

/// An event, for fork/join inside captures and for ordering and timing outside.
pub struct Event {
    raw: sys::cgc_event_t,
    api: &'static sys::cgc_api_t,
}

// SAFETY: the C contract allows every call from any thread (cgc notes records under its capture
// lock); destruction needs ownership.
unsafe impl Send for Event {}
// SAFETY: as for Send.
unsafe impl Sync for Event {}

/// `CGC_EVENT_TIMING`: the event records times (slower).
pub const EVENT_TIMING: u32 = sys::CGC_EVENT_TIMING;

impl Event {
    /// An event without timing (the fast kind, for fork/join).
    pub fn new(ctx: &Context) -> Result<Event> {
        Event::with_flags(ctx, 0)
    }

    /// An event with `flags` (`EVENT_TIMING` or 0).
    pub fn with_flags(ctx: &Context, flags: u32) -> Result<Event> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid out pointer.
        check(ctx.api, unsafe {
            (ctx.api.cgc_event_create)(ctx.raw, flags, &mut raw)
        })?;
        Ok(Event { raw, api: ctx.api })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_event_t {
        self.raw
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_event_record)(self.raw, stream.raw)
        })
    }

    /// Waits for the recorded work.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe {
            (self.api.cgc_event_synchronize)(self.raw)
        })
    }

    /// Whether the recorded work has finished (an unsafe call during a Global capture).
    pub fn query(&self) -> Result<bool> {
        let mut complete: c_int = 0;
        // SAFETY: live handle, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_event_query)(self.raw, &mut complete)
        })?;
        Ok(complete != 0)
    }

    /// Milliseconds from this event's record to `end`'s (both timing events, both completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        let mut ms = 0.0f32;
        // SAFETY: live handles, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_event_elapsed_ms)(self.raw, end.raw, &mut ms)
        })?;
        Ok(ms)
    }

    /// Destroys the event, reporting the status.
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_event_destroy)(raw) })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_event_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("raw", &self.raw).finish()
    }
}

// ---- capture options and modes ------------------------------------------------------------------

/// How calls on other threads interact with a capture (`cgc_capture_mode_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// The default: an unsafe call from any thread breaks the capture.
    #[default]
    Global,
    /// Only the capturing thread's unsafe calls break it.
    ThreadLocal,
    /// No call is checked.
    Relaxed,
}

impl CaptureMode {
    /// The raw `cgc_capture_mode_t`.
    pub fn to_raw(self) -> sys::cgc_capture_mode_t {
        match self {
            CaptureMode::Global => sys::CGC_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => sys::CGC_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => sys::CGC_CAPTURE_MODE_RELAXED,
        }
    }

    /// The mode for a raw value, `None` if unknown.
    pub fn from_raw(raw: sys::cgc_capture_mode_t) -> Option<CaptureMode> {
        match raw {
            sys::CGC_CAPTURE_MODE_GLOBAL => Some(CaptureMode::Global),
            sys::CGC_CAPTURE_MODE_THREAD_LOCAL => Some(CaptureMode::ThreadLocal),
            sys::CGC_CAPTURE_MODE_RELAXED => Some(CaptureMode::Relaxed),
            _ => None,
        }
    }
}

/// Whether a stream is capturing (`cgc_capture_status_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing.
    None,
    /// Capturing.
    Active,
    /// Capturing, but invalidated: ending it will fail.
    Broken,
}

impl CaptureStatus {
    /// The status for a raw value, `None` if unknown.
    pub fn from_raw(raw: sys::cgc_capture_status_t) -> Option<CaptureStatus> {
        match raw {
            sys::CGC_CAPTURE_NONE => Some(CaptureStatus::None),
            sys::CGC_CAPTURE_ACTIVE => Some(CaptureStatus::Active),
            sys::CGC_CAPTURE_BROKEN => Some(CaptureStatus::Broken),
            _ => None,
        }
    }
}

/// Options of a capture (`cgc_capture_options_t`). `Default` is Global mode, a new private
/// pool, no upload. The graph a capture updates (1.2) is not an option here but the `&mut Graph`
/// of [`Stream::capture_update`], so that the updated graph keeps its one owner.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureOptions<'a> {
    /// The capture mode.
    pub mode: CaptureMode,
    /// `None`: a new private pool; `Some`: allocate into (share) this pool, like passing
    /// `pool=g1.pool()` to torch.cuda.graph.
    pub pool: Option<&'a Pool>,
    /// Upload the executable at capture end (`CGC_CAPTURE_UPLOAD`).
    pub upload: bool,
}

impl<'a> CaptureOptions<'a> {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// With this capture mode.
    pub fn with_mode(mut self, mode: CaptureMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sharing `pool`.
    pub fn with_pool(mut self, pool: &'a Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Uploading at capture end.
    pub fn with_upload(mut self, upload: bool) -> Self {
        self.upload = upload;
        self
    }

    /// The C struct.
    pub fn to_raw(&self) -> sys::cgc_capture_options_t {
        sys::cgc_capture_options_t {
            struct_size: std::mem::size_of::<sys::cgc_capture_options_t>(),
            mode: self.mode.to_raw(),
            pool: self.pool.map_or(ptr::null_mut(), |p| p.raw),
            flags: if self.upload {
                sys::CGC_CAPTURE_UPLOAD
            } else {
                0
            },
            // No update here: an update hands back a graph that a Graph already owns, which only
            // Stream::capture_update (holding that Graph) can take back safely.
            update: ptr::null_mut(),
        }
    }
}

/// Swaps this thread's capture-interaction mode with `mode` and returns the previous one (raw,
/// so that it can be restored exactly). [`CaptureModeGuard`] does the push/pop for you.
pub fn exchange_capture_mode(mode: sys::cgc_capture_mode_t) -> Result<sys::cgc_capture_mode_t> {
    let api = api()?;
    let mut m = mode;
    // SAFETY: valid in/out pointer.
    check(api, unsafe { (api.cgc_capture_mode_exchange)(&mut m) })?;
    Ok(m)
}

/// Sets this OS thread's capture mode and restores the previous one on drop (like
/// `torch.cuda.graph`'s mode context). Neither `Send` nor `Sync`: the mode belongs to the
/// thread that set it, so it must be restored there.
pub struct CaptureModeGuard {
    previous: sys::cgc_capture_mode_t,
    api: &'static sys::cgc_api_t,
    _not_send: PhantomData<*const ()>,
}

impl CaptureModeGuard {
    /// Pushes `mode` for this thread.
    pub fn new(mode: CaptureMode) -> Result<CaptureModeGuard> {
        let api = api()?;
        let previous = exchange_capture_mode(mode.to_raw())?;
        Ok(CaptureModeGuard {
            previous,
            api,
            _not_send: PhantomData,
        })
    }

    /// The mode that was in force before (and will be again after drop).
    pub fn previous(&self) -> Option<CaptureMode> {
        CaptureMode::from_raw(self.previous)
    }
}

impl Drop for CaptureModeGuard {
    fn drop(&mut self) {
        let mut m = self.previous;
        // SAFETY: valid in/out pointer; we are on the thread that pushed (the guard is !Send).
        unsafe { (self.api.cgc_capture_mode_exchange)(&mut m) };
    }
}

impl fmt::Debug for CaptureModeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureModeGuard")
            .field("previous", &self.previous)
            .finish()
    }
}

// ---- graphs -------------------------------------------------------------------------------------

/// A captured graph and its executable, like `torch.cuda.CUDAGraph`.
pub struct Graph {
    raw: sys::cgc_graph_t,
    api: &'static sys::cgc_api_t,
}

// SAFETY: any thread may call cgc; destruction and reset need ownership / &mut.
unsafe impl Send for Graph {}
// Not Sync: CUDA does not synchronise concurrent use of one graph or executable graph, and
// cgc_graph_launch adds no lock (by design, for speed). Share a Graph across threads through a
// Mutex, which also gives PyTorch's rule that graphs are never replayed concurrently.

/// What [`Graph::info`] reports (`cgc_graph_info_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphInfo {
    /// Nodes in the graph (0 after reset); cgc's own completion record is not counted.
    pub node_count: usize,
    /// Successful launches.
    pub replay_count: u64,
    /// Whether the executable was uploaded.
    pub uploaded: bool,
    /// Bytes its pool holds.
    pub pool_bytes_reserved: usize,
    /// The captured nodes by kind (since 1.1; all 0 after reset).
    pub nodes: NodeCounts,
    /// Captures that updated the graph ([`Stream::capture_update`], since 1.2).
    pub update_count: u64,
    /// How the last of them did it.
    pub last_update: GraphUpdate,
    /// The driver's `CUgraphExecUpdateResult` of the last update: 0 when the executable took
    /// the new graph in place, else why it did not (e.g. 2, `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`).
    pub last_update_result: i32,
}

/// How a [`Stream::capture_update`] changed its graph (`cgc_graph_update_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GraphUpdate {
    /// Never updated.
    #[default]
    None,
    /// The executable took the new graph in place (`cuGraphExecUpdate`).
    InPlace,
    /// The driver refused the new graph ([`GraphInfo::last_update_result`] says why): a new
    /// executable replaced the old one.
    Reinstantiated,
    /// A value this version of the crate does not know (a newer library), kept as is.
    Unknown(i32),
}

impl GraphUpdate {
    /// The kind for a raw `cgc_graph_update_t`.
    pub fn from_raw(raw: sys::cgc_graph_update_t) -> GraphUpdate {
        match raw {
            sys::CGC_GRAPH_UPDATE_NONE => GraphUpdate::None,
            sys::CGC_GRAPH_UPDATE_IN_PLACE => GraphUpdate::InPlace,
            sys::CGC_GRAPH_UPDATE_REINSTANTIATED => GraphUpdate::Reinstantiated,
            other => GraphUpdate::Unknown(other),
        }
    }

    /// The raw `cgc_graph_update_t`.
    pub fn to_raw(self) -> sys::cgc_graph_update_t {
        match self {
            GraphUpdate::None => sys::CGC_GRAPH_UPDATE_NONE,
            GraphUpdate::InPlace => sys::CGC_GRAPH_UPDATE_IN_PLACE,
            GraphUpdate::Reinstantiated => sys::CGC_GRAPH_UPDATE_REINSTANTIATED,
            GraphUpdate::Unknown(raw) => raw,
        }
    }
}

/// The captured nodes of a graph by kind (the header's `CGC_GRAPH_NODE_KINDS`). Their sum is
/// [`GraphInfo::node_count`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// Kernels (cgc's own, e.g. random numbers, and those of [`Function::launch`]).
    pub kernel: usize,
    /// Copies.
    pub memcpy: usize,
    /// Sets.
    pub memset: usize,
    /// Host functions ([`Stream::launch_host_func`]).
    pub host: usize,
    /// Child graphs.
    pub child_graph: usize,
    /// Empty nodes.
    pub empty: usize,
    /// Event waits (on events recorded outside the capture).
    pub event_wait: usize,
    /// Event records (cgc's own completion record is not counted).
    pub event_record: usize,
    /// Memory allocations of the driver's graph allocator.
    pub mem_alloc: usize,
    /// Memory frees of the driver's graph allocator.
    pub mem_free: usize,
    /// Stream memory operations (write/wait-value and batches of them).
    pub mem_op: usize,
    /// Conditional nodes.
    pub conditional: usize,
    /// Kinds not listed (external semaphores, kinds newer than the library's header).
    pub other: usize,
}

impl NodeCounts {
    fn from_raw(i: &sys::cgc_graph_info_t) -> NodeCounts {
        NodeCounts {
            kernel: i.kernel_nodes,
            memcpy: i.memcpy_nodes,
            memset: i.memset_nodes,
            host: i.host_nodes,
            child_graph: i.child_graph_nodes,
            empty: i.empty_nodes,
            event_wait: i.event_wait_nodes,
            event_record: i.event_record_nodes,
            mem_alloc: i.mem_alloc_nodes,
            mem_free: i.mem_free_nodes,
            mem_op: i.mem_op_nodes,
            conditional: i.conditional_nodes,
            other: i.other_nodes,
        }
    }

    /// All nodes counted, whatever their kind.
    pub fn total(&self) -> usize {
        self.kernel
            + self.memcpy
            + self.memset
            + self.host
            + self.child_graph
            + self.empty
            + self.event_wait
            + self.event_record
            + self.mem_alloc
            + self.mem_free
            + self.mem_op
            + self.conditional
            + self.other
    }
}

/// The handles (as numbers) that a [`Graph`] owns. A capture that updates a graph hands back
/// that graph's own handle from whichever call ends it ([`Stream::capture_update`], or
/// [`Stream::end_capture`] called from its body or, in Relaxed mode, from another thread), so a
/// handle is wrapped only if no Graph owns it yet: each handle has one owner, destroyed once.
static OWNED_GRAPHS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn owned_graphs() -> MutexGuard<'static, Option<HashSet<usize>>> {
    // An insert or a remove cannot be left half-done by a panic: go on after one.
    OWNED_GRAPHS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Graph {
    /// Takes ownership of a handle that a capture's end handed back: `None` when a Graph owns it
    /// already (the graph of an update) or when it is null.
    fn adopt(raw: sys::cgc_graph_t, api: &'static sys::cgc_api_t) -> Option<Graph> {
        if raw.is_null() {
            return None;
        }
        let newly_owned = owned_graphs()
            .get_or_insert_with(HashSet::new)
            .insert(raw as usize);
        if newly_owned {
            Some(Graph { raw, api })
        } else {
            None
        }
    }

    /// Gives up ownership of `raw`, before it is destroyed (the next graph may get its address).
    fn disown(raw: sys::cgc_graph_t) {
        if let Some(owned) = owned_graphs().as_mut() {
            owned.remove(&(raw as usize));
        }
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_graph_t {
        self.raw
    }

    /// Replays the graph on `stream` (any stream of its device). Does not synchronise.
    /// Graphs sharing a pool must be replayed in capture order and never concurrently.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_graph_launch)(self.raw, stream.raw)
        })
    }

    /// Uploads the executable on `stream` ahead of the first launch.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_graph_upload)(self.raw, stream.raw)
        })
    }

    /// Node count (also by kind), replay count, upload state and pool size. The counts by kind
    /// are asked of the driver at this call.
    pub fn info(&self) -> Result<GraphInfo> {
        let mut i = sys::cgc_graph_info_t {
            struct_size: std::mem::size_of::<sys::cgc_graph_info_t>(),
            ..Default::default()
        };
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(self.api, unsafe {
            (self.api.cgc_graph_info)(self.raw, &mut i)
        })?;
        Ok(GraphInfo {
            node_count: i.node_count,
            replay_count: i.replay_count,
            uploaded: i.uploaded != 0,
            pool_bytes_reserved: i.pool_bytes_reserved,
            nodes: NodeCounts::from_raw(&i),
            update_count: i.update_count,
            last_update: GraphUpdate::from_raw(i.last_update),
            last_update_result: i.last_update_result,
        })
    }

    /// The pool the graph allocated into, as a new reference of the caller's (retained, so
    /// it outlives the graph's reset or destroy). Pass it in [`CaptureOptions::pool`] to share
    /// it, like `CUDAGraph.pool()`. [`Status::InvalidState`] after reset.
    pub fn pool(&self) -> Result<Pool> {
        let mut raw = ptr::null_mut();
        // SAFETY: live handle, valid out pointer. The lent pool stays valid until reset or
        // destroy, which need &mut self / self, so retaining it now is race-free.
        check(self.api, unsafe {
            (self.api.cgc_graph_pool)(self.raw, &mut raw)
        })?;
        check(self.api, unsafe { (self.api.cgc_pool_retain)(raw) })?;
        Ok(Pool { raw, api: self.api })
    }

    /// Writes the graph in Graphviz DOT form to `path`.
    pub fn debug_dump(&self, path: impl AsRef<Path>) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = path.as_ref();
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("cgc_graph_debug_dump: path {:?} contains a NUL byte", path),
            )
        })?;
        // SAFETY: live handle, valid C string.
        check(self.api, unsafe {
            (self.api.cgc_graph_debug_dump)(self.raw, c_path.as_ptr())
        })
    }

    /// Like `CUDAGraph.reset()`: frees the executable and graph now and drops the pool
    /// reference; launching is then [`Status::InvalidState`]. Resetting twice is fine. What the
    /// graph holds for its replays (the closures of [`Stream::launch_host_func`], the code of
    /// [`Module`]s whose kernels it launches) is let go once its last replay is over: this
    /// waits for that replay.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: live handle; &mut self: no one else uses the executable.
        check(self.api, unsafe { (self.api.cgc_graph_reset)(self.raw) })
    }

    /// The `CUgraph` behind the handle (null after reset); valid until reset or drop.
    pub fn native(&self) -> *mut c_void {
        // SAFETY: live handle.
        unsafe { (self.api.cgc_graph_native)(self.raw) }
    }

    /// The `CUgraphExec` behind the handle (null after reset); valid until reset or drop.
    pub fn native_exec(&self) -> *mut c_void {
        // SAFETY: live handle.
        unsafe { (self.api.cgc_graph_native_exec)(self.raw) }
    }

    /// Enables or disables (1.2) the graph's kernel number `kernel_index`: kernels are numbered
    /// 0 .. [`NodeCounts::kernel`] in the order the capture launched them (cgc's own kernels,
    /// e.g. random numbers, count too). A disabled kernel does nothing at later replays; what
    /// depends on it still waits for it. [`Status::InvalidArgument`] past the last kernel,
    /// [`Status::InvalidState`] after reset.
    pub fn set_kernel_enabled(&mut self, kernel_index: usize, enabled: bool) -> Result<()> {
        // SAFETY: live handle; &mut self: no other thread launches or changes the graph.
        check(self.api, unsafe {
            (self.api.cgc_graph_kernel_node_set_enabled)(self.raw, kernel_index, c_int::from(enabled))
        })
    }

    /// Gives the graph's kernel number `kernel_index` (numbered as for
    /// [`Graph::set_kernel_enabled`]) new argument values for later replays, e.g. another
    /// buffer; the kernel, grid and block stay. The values are copied at the call, as with
    /// [`Function::launch`].
    ///
    /// # Safety
    /// As for [`Function::launch`], for the captured kernel: `args` must hold exactly one value
    /// per parameter of that kernel, each of the parameter's type, and the memory they point to
    /// must be large enough for what the kernel does with it and stay alive until the graph's
    /// last replay with them is over.
    pub unsafe fn set_kernel_args(&mut self, kernel_index: usize, args: &[&dyn KernelArg]) -> Result<()> {
        module::with_kernel_params(args, |params| {
            // &mut self: no other thread launches or changes the graph meanwhile.
            check(
                self.api,
                (self.api.cgc_graph_kernel_node_set_args)(self.raw, kernel_index, params),
            )
        })
    }

    /// Resets and frees the handle, reporting the status (see [`Graph::reset`]). Buffers
    /// allocated in the capture (its outputs) stay valid.
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        Graph::disown(raw);
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_graph_destroy)(raw) })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            Graph::disown(self.raw);
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_graph_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph").field("raw", &self.raw).finish()
    }
}

// ---- pools --------------------------------------------------------------------------------------

/// One reference on a private memory pool (`torch.cuda.graph_pool_handle()`). `Clone` takes
/// another reference (`cgc_pool_retain`), `Drop` releases one. Two `Pool`s are equal when they
/// are references on the same pool. Since 1.5 a pool may be an NCCL pool ([`Pool::nccl`]), whose
/// last release is collective and refused while it is in use ([`Pool::try_release`]).
pub struct Pool {
    raw: sys::cgc_pool_t,
    api: &'static sys::cgc_api_t,
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
    /// graph memory and its eager memory stay apart. An NCCL pool ([`Pool::nccl`]) never grows:
    /// beyond its capacity this is [`Status::OutOfMemory`].
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

    /// Drops this reference, reporting the status. The pool lives on while graphs captured into
    /// it or blocks allocated from it exist. For the last reference of an NCCL pool, which the
    /// library refuses to release while it is in use, see [`Pool::try_release`].
    pub fn release(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: we hold this reference; released once.
        check(self.api, unsafe { (self.api.cgc_pool_release)(raw) })
    }

    /// Like [`Pool::release`], but a refusal that leaves the reference held hands the pool back,
    /// unharmed, with the error (`Some`): the last release of an NCCL pool (1.5, collective) is
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

// ---- device memory ------------------------------------------------------------------------------

/// Device memory from cgc's caching allocator (`cgc_malloc`), freed on drop (`cgc_free`,
/// ordered on its allocation stream). Allocated during a capture, it comes from the capture's
/// pool and is one of the graph's outputs: keep it (or [`DeviceBuffer::into_raw`]) for as long
/// as the graph's results are read.
pub struct DeviceBuffer {
    ptr: *mut c_void,
    len: usize,
    api: &'static sys::cgc_api_t,
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

// ---- random numbers -----------------------------------------------------------------------------

/// A graph-safe Philox4x32-10 generator: a draw captured into a graph gives fresh numbers at
/// every replay. Graphs drawing from one generator must not run concurrently on different
/// streams.
pub struct Rng {
    raw: sys::cgc_rng_t,
    api: &'static sys::cgc_api_t,
}

// SAFETY: the generator's state is guarded by a lock in the library; any thread may call cgc;
// destruction needs ownership.
unsafe impl Send for Rng {}
// SAFETY: as for Send.
unsafe impl Sync for Rng {}

impl Rng {
    /// A generator on `ctx`'s device at (seed, offset 0).
    pub fn new(ctx: &Context, seed: u64) -> Result<Rng> {
        let mut raw = ptr::null_mut();
        // SAFETY: live context, valid out pointer.
        check(ctx.api, unsafe {
            (ctx.api.cgc_rng_create)(ctx.raw, seed, &mut raw)
        })?;
        Ok(Rng { raw, api: ctx.api })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_rng_t {
        self.raw
    }

    /// `n` floats in [0, 1) into the start of `out`, ordered on `stream` (captured if it
    /// captures).
    pub fn uniform(&self, out: &DeviceBuffer, n: usize, stream: &Stream) -> Result<()> {
        out.check_holds(n.checked_mul(4), "cgc_rng_uniform")?;
        // SAFETY: `out` holds n floats.
        unsafe { self.uniform_raw(out.as_ptr() as *mut f32, n, stream) }
    }

    /// `n` normal floats with `mean` and `stddev` into the start of `out`.
    pub fn normal(
        &self,
        out: &DeviceBuffer,
        n: usize,
        mean: f32,
        stddev: f32,
        stream: &Stream,
    ) -> Result<()> {
        out.check_holds(n.checked_mul(4), "cgc_rng_normal")?;
        // SAFETY: `out` holds n floats.
        unsafe { self.normal_raw(out.as_ptr() as *mut f32, n, mean, stddev, stream) }
    }

    /// [`Rng::uniform`] into any device memory.
    ///
    /// # Safety
    /// `out` must be device memory of the generator's device with room for `n` floats, alive
    /// until the draw (or every replay of a graph capturing it) has run.
    pub unsafe fn uniform_raw(&self, out: *mut f32, n: usize, stream: &Stream) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_rng_uniform)(self.raw, out, n, stream.raw),
        )
    }

    /// [`Rng::normal`] into any device memory.
    ///
    /// # Safety
    /// As for [`Rng::uniform_raw`].
    pub unsafe fn normal_raw(
        &self,
        out: *mut f32,
        n: usize,
        mean: f32,
        stddev: f32,
        stream: &Stream,
    ) -> Result<()> {
        check(
            self.api,
            (self.api.cgc_rng_normal)(self.raw, out, n, mean, stddev, stream.raw),
        )
    }

    /// (seed, offset) the next eager draw or replay starts from.
    pub fn state(&self) -> Result<(u64, u64)> {
        let (mut seed, mut offset) = (0u64, 0u64);
        // SAFETY: live handle, valid out pointers.
        check(self.api, unsafe {
            (self.api.cgc_rng_get_state)(self.raw, &mut seed, &mut offset)
        })?;
        Ok((seed, offset))
    }

    /// Sets the state (offset a multiple of 4). [`Status::InvalidState`] while a capture draws
    /// from the generator, unless nothing changes.
    pub fn set_state(&self, seed: u64, offset: u64) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe {
            (self.api.cgc_rng_set_state)(self.raw, seed, offset)
        })
    }

    /// Destroys the generator, reporting the status (graphs drawing from it keep its state).
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_rng_destroy)(raw) })
    }
}

impl Drop for Rng {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_rng_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Rng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rng").field("raw", &self.raw).finish()
    }
}
