//! [`Rng`]: graph-safe Philox generators.

use super::*;

/// A graph-safe Philox4x32-10 generator: a draw captured into a graph gives fresh numbers at
/// every replay. Graphs drawing from one generator must not run concurrently on different
/// streams.
pub struct Rng {
    pub(crate) raw: sys::cgc_rng_t,
    pub(crate) api: &'static sys::cgc_api_t,
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
