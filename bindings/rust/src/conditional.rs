//! Conditional nodes (1.2): control flow on the device inside a capture. A node runs its body
//! once (IF) or as long as (WHILE) a `u32` in device memory that the caller's kernels write is
//! nonzero, without the host in the loop.
//!
//! The body is captured on a stream that the library lends (`cgc_capture_conditional_begin`)
//! and takes back (`cgc_capture_conditional_end`, which frees its handle). That stream is never
//! the caller's: [`Stream::conditional`] hands the body closure a `&Stream` that cannot be
//! moved, dropped or destroyed, and ends the body itself, also when the closure fails or panics.

use std::mem::ManuallyDrop;
use std::ptr;

use crate::error::{check, Result};
use crate::{sys, DeviceBuffer, Stream};

/// The kind of a conditional node (`cgc_conditional_kind_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionalKind {
    /// The body runs once if the condition is nonzero where the node stands.
    If,
    /// The body runs while the condition is nonzero: read before the first iteration and again
    /// after each one, so a body that writes it decides whether it runs again.
    While,
}

impl ConditionalKind {
    /// The raw `cgc_conditional_kind_t`.
    pub fn to_raw(self) -> sys::cgc_conditional_kind_t {
        match self {
            ConditionalKind::If => sys::CGC_CONDITIONAL_IF,
            ConditionalKind::While => sys::CGC_CONDITIONAL_WHILE,
        }
    }

    /// The kind for a raw `cgc_conditional_kind_t`, if it is one.
    pub fn from_raw(raw: sys::cgc_conditional_kind_t) -> Option<ConditionalKind> {
        match raw {
            sys::CGC_CONDITIONAL_IF => Some(ConditionalKind::If),
            sys::CGC_CONDITIONAL_WHILE => Some(ConditionalKind::While),
            _ => None,
        }
    }
}

/// Ends a lent body when dropped: while the body closure unwinds, so that no body is left open
/// (the capture could not end with one open).
struct EndOnUnwind {
    body: sys::cgc_stream_t,
    api: &'static sys::cgc_api_t,
}

impl Drop for EndOnUnwind {
    fn drop(&mut self) {
        // SAFETY: the lent handle, ended once (the normal paths forget this guard). The status
        // is ignored: the panic is what the caller sees.
        unsafe { (self.api.cgc_capture_conditional_end)(self.body) };
    }
}

impl Stream {
    /// Adds a conditional node at this point of the capture under way on this stream (a
    /// capture, or the body of another conditional node) and runs `body` with the node's body
    /// stream: what `body` enqueues there becomes the body. `condition` holds the `u32` (at its
    /// start) that decides: [`ConditionalKind::If`] runs the body once if it is nonzero where
    /// the node stands, [`ConditionalKind::While`] as long as it is nonzero.
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
    /// A body holds kernels ([`crate::Function::launch`]), copies, sets and nested conditionals
    /// (`body.conditional(...)`); allocations, host functions, stream memory operations,
    /// events, generator draws and collectives are refused there with
    /// [`Status::CaptureUnsupported`](crate::Status::CaptureUnsupported). The capture cannot end
    /// while a body is open. [`Status::NotSupported`](crate::Status::NotSupported) with a driver
    /// older than CUDA 12.4; [`Status::InvalidState`](crate::Status::InvalidState) when this
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
        // A Stream around the lent handle, never dropped: its Drop would call
        // cgc_stream_destroy, which the library refuses for a lent stream, and after the end the
        // handle is gone. `body` only borrows it, so it cannot move it out or destroy it.
        let lent = ManuallyDrop::new(Stream {
            raw,
            api: self.api,
            borrowed: true,
        });
        let guard = EndOnUnwind {
            body: raw,
            api: self.api,
        };
        let outcome = body(&lent);
        std::mem::forget(guard);
        // The end frees the handle whatever it returns.
        let ended = check(self.api, (self.api.cgc_capture_conditional_end)(raw));
        let value = outcome?; // the body's error is the cause, whatever the end said after it
        ended?;
        Ok(value)
    }
}
