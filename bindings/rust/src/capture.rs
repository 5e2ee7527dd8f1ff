//! Capture options ([`CaptureOptions`]) and modes, and this thread's capture-interaction mode ([`CaptureModeGuard`]).

use super::*;

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
    pub(crate) previous: sys::cgc_capture_mode_t,
    pub(crate) api: &'static sys::cgc_api_t,
    pub(crate) _not_send: PhantomData<*const ()>,
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
