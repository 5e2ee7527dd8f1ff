//! Status codes and the error type.

use std::ffi::CStr;
use std::fmt;

use crate::sys;

macro_rules! statuses {
    ($($(#[$doc:meta])* $variant:ident = $code:expr, $c_name:ident;)*) => {
        /// A `cgc_status_t`. Codes are pinned forever by the C ABI; a code this crate does not
        /// know (a newer library) is kept as [`Status::Unknown`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Status {
            $($(#[$doc])* $variant,)*
            /// A code this version of the crate does not know, kept as is.
            Unknown(i32),
        }

        impl Status {
            /// Every known status, in code order (0..=17).
            pub const ALL: &'static [Status] = &[$(Status::$variant),*];

            /// The status for a raw `cgc_status_t`.
            pub fn from_raw(code: i32) -> Status {
                match code {
                    $($code => Status::$variant,)*
                    other => Status::Unknown(other),
                }
            }

            /// The raw `cgc_status_t` value.
            pub fn to_raw(self) -> i32 {
                match self {
                    $(Status::$variant => $code,)*
                    Status::Unknown(code) => code,
                }
            }

            /// The C enumerator's name, e.g. `"CGC_ERROR_INVALID_ARGUMENT"`
            /// (`"CGC_ERROR_UNKNOWN"` for an unknown code, as `cgc_status_string` says).
            pub fn c_name(self) -> &'static str {
                match self {
                    $(Status::$variant => stringify!($c_name),)*
                    Status::Unknown(_) => "CGC_ERROR_UNKNOWN",
                }
            }
        }
    };
}

sys::with_status_list!(statuses);

impl Status {
    /// The library's own description (`cgc_status_string`), e.g.
    /// `"CGC_ERROR_INVALID_ARGUMENT: an argument is NULL, ..."`. Needs the library.
    pub fn description(self) -> Result<String> {
        let api = crate::api()?;
        // SAFETY: cgc_status_string never returns NULL and its strings are static.
        Ok(
            unsafe { CStr::from_ptr((api.cgc_status_string)(self.to_raw())) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown(code) => write!(f, "CGC_ERROR_UNKNOWN({})", code),
            s => f.write_str(s.c_name()),
        }
    }
}

/// The error of every fallible call: the [`Status`] and the library's message, copied from
/// `cgc_last_error()` on the failing thread right after the call. When libcgc itself could not
/// be loaded there is no status ([`Error::status`] is `None`) and the message says what was
/// tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Option<Status>,
    message: String,
}

impl Error {
    /// An error with this status and message (also for refusals made by the binding itself).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status: Some(status),
            message: message.into(),
        }
    }

    pub(crate) fn load(message: String) -> Error {
        Error {
            status: None,
            message,
        }
    }

    /// The status; `None` when the library could not be loaded.
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// Whether this is the "libcgc could not be loaded" error.
    pub fn is_load_error(&self) -> bool {
        self.status.is_none()
    }

    /// The message: the library's `cgc_last_error()` text, or the binding's own.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error for `code` returned by the call just made on this thread. Must run before any
    /// other cgc call on this thread: `cgc_last_error()` is only valid until then.
    pub(crate) fn from_call(api: &sys::cgc_api_t, code: sys::cgc_status_t) -> Error {
        // SAFETY: cgc_last_error returns a thread-local NUL-terminated string ("" when none),
        // copied here before any other cgc call on this thread.
        let message = unsafe {
            let p = (api.cgc_last_error)();
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Error {
            status: Some(Status::from_raw(code)),
            message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            None => f.write_str(&self.message),
            Some(status) if self.message.is_empty() => write!(f, "{}", status),
            Some(status) => write!(f, "{}: {}", status, self.message),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// `Ok(())` for `CGC_SUCCESS`, else the error with the message copied at once.
#[inline]
pub(crate) fn check(api: &sys::cgc_api_t, code: sys::cgc_status_t) -> Result<()> {
    if code == sys::CGC_SUCCESS {
        Ok(())
    } else {
        Err(Error::from_call(api, code))
    }
}
