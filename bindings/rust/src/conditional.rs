//! Conditional nodes: control flow on the device inside a capture. A node runs its body once
//! (IF), as long as (WHILE), or one of its bodies (SWITCH, 1.3) according to a `u32` in device
//! memory that the caller's kernels write, without the host in the loop.
//!
//! Bodies are captured on streams that the library lends (`cgc_capture_conditional_begin` for
//! one body, 1.2; `cgc_capture_conditional_begin_bodies` for all the bodies of a node at once,
//! 1.3) and takes back (`cgc_capture_conditional_end`, which frees the handle). Those streams are
//! never the caller's: [`Stream::conditional`] and [`Stream::conditional_bodies`] hand their
//! closure `Stream`s it can only borrow (it cannot move, drop or destroy them), and end every
//! body themselves, also when the closure fails or panics.

use std::fmt;
use std::ops::Deref;
use std::ptr;

use crate::error::{check, Result};
use crate::{sys, DeviceBuffer, Error, Status, Stream};

/// The kind of a conditional node (`cgc_conditional_kind_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionalKind {
    /// The body runs once if the condition is nonzero where the node stands. With two bodies
    /// ([`Stream::conditional_bodies`], 1.3) the second one runs if it is zero (IF/ELSE).
    If,
    /// The body runs while the condition is nonzero: read before the first iteration and again
    /// after each one, so a body that writes it decides whether it runs again.
    While,
    /// 1.3, [`Stream::conditional_bodies`] only: body `i` runs once if the condition is `i`;
    /// none runs if it is the number of bodies or more.
    Switch,
}

impl ConditionalKind {
    /// The raw `cgc_conditional_kind_t`.
    pub fn to_raw(self) -> sys::cgc_conditional_kind_t {
        match self {
            ConditionalKind::If => sys::CGC_CONDITIONAL_IF,
            ConditionalKind::While => sys::CGC_CONDITIONAL_WHILE,
            ConditionalKind::Switch => sys::CGC_CONDITIONAL_SWITCH,
        }
    }

    /// The kind for a raw `cgc_conditional_kind_t`, if it is one.
    pub fn from_raw(raw: sys::cgc_conditional_kind_t) -> Option<ConditionalKind> {
        match raw {
            sys::CGC_CONDITIONAL_IF => Some(ConditionalKind::If),
            sys::CGC_CONDITIONAL_WHILE => Some(ConditionalKind::While),
            sys::CGC_CONDITIONAL_SWITCH => Some(ConditionalKind::Switch),
            _ => None,
        }
    }
}

/// `CGC_CONDITIONAL_BODY_SETS_CONDITION` (1.3), a flag of [`Stream::conditional_bodies`] for a
/// [`ConditionalKind::While`] node: cgc reads the condition before the node only, and the body's
/// own kernels decide whether another iteration follows, by setting the node's condition through
/// its handle ([`ConditionalBodies::handle`], CUDA's `cudaGraphSetConditional`). cgc then adds no
/// kernel at the end of each iteration. A body that never sets it loops for ever.
pub const CONDITIONAL_BODY_SETS_CONDITION: u32 = sys::CGC_CONDITIONAL_BODY_SETS_CONDITION;

/// `CGC_LOOP_EAGER_ITERATIONS` (1.3): generator draws in a WHILE body give, at iteration `i` of
/// a replay, what the `i`-th of as many eager draws would give, for `i` below this many. Each
/// replay advances the generator's offset by this many iterations' worth (the numbers one
/// iteration draws, each draw rounded up to 4), so that what follows never repeats them.
pub const LOOP_EAGER_ITERATIONS: u64 = sys::CGC_LOOP_EAGER_ITERATIONS;

/// The most bodies a node can have: a SWITCH's 256, as the header documents
/// `cgc_capture_conditional_begin_bodies`. A larger count is refused here, before a vector of
/// that many handles is made for the library to fill.
const MOST_BODIES: usize = 256;

/// `cgc_capture_conditional_end`'s type.
pub(crate) type EndBody = unsafe extern "C" fn(body: sys::cgc_stream_t) -> sys::cgc_status_t;

/// The open bodies of a conditional node, which [`Stream::conditional_bodies`] lends to its
/// closure: the streams the library lent for them, in the node's order (it derefs to
/// `[Stream]`, so `bodies[i]` is body `i`), and the node's conditional handle.
///
/// The streams are borrowed from it only: the closure cannot keep, drop or destroy them, and
/// [`Stream::conditional_bodies`] ends each body exactly once after the closure.
pub struct ConditionalBodies {
    // Streams around the lent handles. None is ever destroyed as a stream (the library refuses
    // that for a lent stream, and after its end the handle is gone): each handle is taken out of
    // its Stream, leaving null (on which Stream's Drop does nothing), when its body is ended.
    streams: Vec<Stream>,
    handle: u64,
    api: &'static sys::cgc_api_t,
    // The table's cgc_capture_conditional_end, kept apart from `api` so that the unit tests
    // (no_gpu_tests.rs) can record the ends with a function of their own.
    end: EndBody,
}

impl ConditionalBodies {
    /// The bodies whose handles the library has just lent (`raw`, in the node's order).
    fn lent(api: &'static sys::cgc_api_t, raw: Vec<sys::cgc_stream_t>, handle: u64) -> ConditionalBodies {
        ConditionalBodies::with_end(api, raw, handle, api.cgc_capture_conditional_end)
    }

    /// As `lent`, with `end` standing for cgc_capture_conditional_end (the unit tests' own).
    pub(crate) fn with_end(
        api: &'static sys::cgc_api_t,
        raw: Vec<sys::cgc_stream_t>,
        handle: u64,
        end: EndBody,
    ) -> ConditionalBodies {
        let streams = raw
            .into_iter()
            .map(|raw| Stream {
                raw,
                api,
                borrowed: true,
            })
            .collect();
        ConditionalBodies {
            streams,
            handle,
            api,
            end,
        }
    }

    /// The node's conditional handle (a `cudaGraphConditionalHandle`), for kernels that set the
    /// condition themselves ([`CONDITIONAL_BODY_SETS_CONDITION`]): pass it to them as a 64-bit
    /// integer argument. It is valid in this capture's graph only.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// Ends every body not ended yet, the last first (the order in which nested scopes close;
    /// sibling bodies may end in any order). An end gives its handle back also when it fails, so
    /// every one is tried once; the first failure is returned, its message copied right after
    /// it. (The one refusal that keeps the handle, a body with a body begun inside it still
    /// open, does not arise through this binding: a nested node's closure ends its bodies before
    /// it returns.)
    pub(crate) fn end_all(&mut self) -> Result<()> {
        let mut outcome = Ok(());
        for stream in self.streams.iter_mut().rev() {
            let raw = std::mem::replace(&mut stream.raw, ptr::null_mut());
            if raw.is_null() {
                continue; // ended already
            }
            // SAFETY: a handle the library lent, ended once: its slot was emptied above.
            let ended = check(self.api, unsafe { (self.end)(raw) });
            if outcome.is_ok() {
                outcome = ended;
            }
        }
        outcome
    }
}

impl Deref for ConditionalBodies {
    type Target = [Stream];

    fn deref(&self) -> &[Stream] {
        &self.streams
    }
}

impl Drop for ConditionalBodies {
    fn drop(&mut self) {
        // Bodies are still open here only while the closure unwinds: they are ended so that the
        // capture can still end. The statuses are ignored: the panic is what the caller sees.
        let _ = self.end_all();
    }
}

impl fmt::Debug for ConditionalBodies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConditionalBodies")
            .field("streams", &self.streams)
            .field("handle", &self.handle)
            .finish()
    }
}

/// Runs `body` with the open `bodies`, then ends them all. If `body` returns an error, that
/// error is returned, whatever the ends said after it (it is the cause); if it panics, `bodies`'
/// Drop ends them while unwinding.
pub(crate) fn run_bodies<T, F>(mut bodies: ConditionalBodies, body: F) -> Result<T>
where
    F: FnOnce(&ConditionalBodies) -> Result<T>,
{
    let outcome = body(&bodies);
    let ended = bodies.end_all();
    let value = outcome?;
    ended?;
    Ok(value)
}

impl Stream {
    /// Adds a conditional node at this point of the capture under way on this stream (a
    /// capture, or the body of another conditional node) and runs `body` with the node's body
    /// stream: what `body` enqueues there becomes the body. `condition` holds the `u32` (at its
    /// start) that decides: [`ConditionalKind::If`] runs the body once if it is nonzero where
    /// the node stands, [`ConditionalKind::While`] as long as it is nonzero.
    /// [`ConditionalKind::Switch`] has bodies of its own: [`Stream::conditional_bodies`] (here
    /// it is refused with [`Status::InvalidArgument`]).
    ///
    /// ```no_run
    /// # fn f(stream: &cgc::Stream, more: &cgc::DeviceBuffer, step: cgc::Function<'_>,
    /// #      counter: &cgc::DeviceBuffer, n: &cgc::DeviceBuffer) -> cgc::Result<()> {
    /// // Inside a capture: loop on the device while `step` sets *more.
    /// stream.conditional(cgc::ConditionalKind::While, more, |body| {
    ///     // SAFETY: step(unsigned* counter, const unsigned* n, unsigned* more).
    ///     unsafe { step.launch(&cgc::LaunchConfig::linear(1, 1), &[counter, n, more], body) }
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// A body holds kernels ([`crate::Function::launch`]), copies, sets, nested conditionals
    /// (`body.conditional(...)`) and, since 1.3, allocations ([`DeviceBuffer::alloc`] on the body,
    /// from the capture's pool) and generator draws ([`crate::Rng::uniform`] on the body: in a
    /// WHILE body, see [`LOOP_EAGER_ITERATIONS`]). Host functions, stream memory operations,
    /// events and collectives are refused there with
    /// [`Status::CaptureUnsupported`]. The capture cannot end
    /// while a body is open. [`Status::NotSupported`] with a driver
    /// older than CUDA 12.4; [`Status::InvalidState`] when this
    /// stream is not capturing.
    ///
    /// The body stream is lent by the library: `body` gets it borrowed, so it cannot keep, drop
    /// or destroy it. The body is always ended: if `body` returns an error, that error is
    /// returned (whatever ending the body said); if it panics, the body is ended while
    /// unwinding. Otherwise `body`'s value is returned once the body has ended.
    pub fn conditional<T, F>(
        &self,
        kind: ConditionalKind,
        condition: &DeviceBuffer,
        body: F,
    ) -> Result<T>
    where
        F: FnOnce(&Stream) -> Result<T>,
    {
        condition.check_holds(Some(4), "cgc_capture_conditional_begin (condition)")?;
        // SAFETY: the buffer holds the u32 at its start and lives as long as the borrow; that it
        // outlives the graph's replays is the same duty as a captured kernel's buffers, which
        // only the device reads (a stale address is a device fault, not host memory).
        unsafe { self.conditional_raw(kind, condition.as_ptr() as *const u32, body) }
    }

    /// [`Stream::conditional`] with the condition at any device address (e.g. a word inside a
    /// larger buffer).
    ///
    /// # Safety
    /// `condition` must be the device address of a 4-byte aligned `u32` that stays allocated as
    /// long as the graph may be replayed (cgc's kernel reads it at every replay).
    pub unsafe fn conditional_raw<T, F>(
        &self,
        kind: ConditionalKind,
        condition: *const u32,
        body: F,
    ) -> Result<T>
    where
        F: FnOnce(&Stream) -> Result<T>,
    {
        let mut raw = ptr::null_mut();
        check(
            self.api,
            (self.api.cgc_capture_conditional_begin)(self.raw, kind.to_raw(), condition, &mut raw),
        )?;
        run_bodies(ConditionalBodies::lent(self.api, vec![raw], 0), |bodies| {
            body(&bodies[0])
        })
    }

    /// 1.3: adds a conditional node with `n_bodies` bodies at this point of the capture under way
    /// on this stream (a capture, or a body of another node) and runs `body` with them: what it
    /// enqueues on `bodies[i]` becomes body `i`. `condition` holds the `u32` (at its start) that
    /// decides:
    /// - [`ConditionalKind::If`], 1 body: it runs once if the condition is nonzero; 2 bodies
    ///   (IF/ELSE): the second runs instead when it is zero;
    /// - [`ConditionalKind::While`], 1 body: it runs as long as the condition is nonzero;
    /// - [`ConditionalKind::Switch`], 1 to 256 bodies: body `i` runs once if the condition is
    ///   `i`, none if it is `n_bodies` or more.
    ///
    /// `flags` is 0 or [`CONDITIONAL_BODY_SETS_CONDITION`] (While only: the body's kernels set the
    /// condition through [`ConditionalBodies::handle`]). A wrong count, kind or flag is refused
    /// with [`Status::InvalidArgument`]. IF/ELSE and SWITCH need a driver for CUDA 12.8, the
    /// others 12.4 ([`Status::NotSupported`] before). Otherwise as [`Stream::conditional`]: what
    /// a body may hold, and that the capture cannot end while a body is open.
    ///
    /// ```no_run
    /// # fn f(stream: &cgc::Stream, which: &cgc::DeviceBuffer, out: &cgc::DeviceBuffer)
    /// #      -> cgc::Result<()> {
    /// // Inside a capture: write 10, 11 or 12 into `out` as *which is 0, 1 or 2.
    /// stream.conditional_bodies(cgc::ConditionalKind::Switch, which, 3, 0, |bodies| {
    ///     for (i, body) in bodies.iter().enumerate() {
    ///         body.memset_d32(out, 10 + i as u32, 1)?;
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// The bodies' streams are lent by the library: `body` gets them borrowed, so it cannot keep,
    /// drop or destroy them. Every body is always ended, exactly once, the last first: if `body`
    /// returns an error, that error is returned (whatever ending the bodies said); if it panics,
    /// they are ended while unwinding. Otherwise `body`'s value is returned once all have ended.
    pub fn conditional_bodies<T, F>(
        &self,
        kind: ConditionalKind,
        condition: &DeviceBuffer,
        n_bodies: usize,
        flags: u32,
        body: F,
    ) -> Result<T>
    where
        F: FnOnce(&ConditionalBodies) -> Result<T>,
    {
        condition.check_holds(Some(4), "cgc_capture_conditional_begin_bodies (condition)")?;
        // SAFETY: as in `conditional`.
        unsafe {
            self.conditional_bodies_raw(kind, condition.as_ptr() as *const u32, n_bodies, flags, body)
        }
    }

    /// [`Stream::conditional_bodies`] with the condition at any device address.
    ///
    /// # Safety
    /// As [`Stream::conditional_raw`]: `condition` must be the device address of a 4-byte aligned
    /// `u32` that stays allocated as long as the graph may be replayed.
    pub unsafe fn conditional_bodies_raw<T, F>(
        &self,
        kind: ConditionalKind,
        condition: *const u32,
        n_bodies: usize,
        flags: u32,
        body: F,
    ) -> Result<T>
    where
        F: FnOnce(&ConditionalBodies) -> Result<T>,
    {
        if n_bodies > MOST_BODIES {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "cgc_capture_conditional_begin_bodies: n_bodies is {}: a node has at most {} bodies",
                    n_bodies, MOST_BODIES
                ),
            ));
        }
        let mut raw = vec![ptr::null_mut(); n_bodies];
        let mut handle = 0u64;
        check(
            self.api,
            (self.api.cgc_capture_conditional_begin_bodies)(
                self.raw,
                kind.to_raw(),
                condition,
                flags,
                n_bodies,
                raw.as_mut_ptr(),
                &mut handle,
            ),
        )?;
        run_bodies(ConditionalBodies::lent(self.api, raw, handle), body)
    }
}
