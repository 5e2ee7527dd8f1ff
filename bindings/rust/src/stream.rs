//! [`Stream`]: streams cgc makes or borrows, their synchronisation, waits and captures (the closure forms end the capture whatever the body does).

use super::*;

/// A stream: owned (created by cgc, destroyed on drop) or borrowed (a wrapped native stream,
/// of which only the handle is freed).
pub struct Stream {
    pub(crate) raw: sys::cgc_stream_t,
    pub(crate) api: &'static sys::cgc_api_t,
    pub(crate) borrowed: bool,
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
    pub(crate) fn abandon_capture(&self) {
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
