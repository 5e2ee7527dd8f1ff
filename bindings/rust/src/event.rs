//! [`Event`]: records, waits and timing; inside a capture, the fork and join of side streams.

use super::*;

/// An event, for fork/join inside captures and for ordering and timing outside.
pub struct Event {
    pub(crate) raw: sys::cgc_event_t,
    pub(crate) api: &'static sys::cgc_api_t,
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
