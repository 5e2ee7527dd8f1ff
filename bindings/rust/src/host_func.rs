//! Host functions (1.1): a Rust closure run by the driver in stream order, once eagerly, or at
//! every replay when captured into a graph (`cgc_launch_host_func`).
//!
//! The closure travels to C as `user`: a pointer to a boxed [`HostFunction`], called by the
//! `extern "C"` trampoline [`run_host_function`] and freed by [`release_host_function`], which
//! cgc calls exactly once when nothing can call the function any more (after the eager call,
//! when the graph is reset or dropped after its last replay, when the capture fails, or at once
//! when the launch itself fails).

use std::any::Any;
use std::io::Write;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{check, Result};
use crate::Stream;

/// Panics caught in host functions (and in dropping them) so far in this process.
static HOST_FUNCTION_PANICS: AtomicU64 = AtomicU64::new(0);

/// How many host functions (or drops of them) have panicked so far in this process. A panic
/// must not unwind into the driver's thread, so the binding catches it, writes it to stderr and
/// counts it here; the function stays in place (a graph calls it again at its next replay).
pub fn host_function_panics() -> u64 {
    HOST_FUNCTION_PANICS.load(Ordering::Relaxed)
}

/// The closure behind `user`. The lock is there because the driver may run two replays' calls
/// at once (graphs launched on two streams), and an `FnMut` must not be entered twice.
struct HostFunction {
    body: Mutex<Box<dyn FnMut() + Send>>,
}

/// The text of a panic's payload (what `panic!` was given, when it was a string).
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(a payload that is not a string)"
    }
}

/// Counts and reports a caught panic. Writes with `writeln!` and ignores its error: `eprintln!`
/// would panic if stderr is closed, and this runs where no panic may escape.
fn report_panic(what: &str, payload: &(dyn Any + Send)) {
    HOST_FUNCTION_PANICS.fetch_add(1, Ordering::Relaxed);
    let _ = writeln!(
        std::io::stderr(),
        "cgc: {} panicked: {}; the panic was caught (it must not unwind into cgc or the driver)",
        what,
        panic_text(payload)
    );
}

/// The `fn` given to `cgc_launch_host_func`: runs the closure behind `user`.
unsafe extern "C" fn run_host_function(user: *mut c_void) {
    // SAFETY: `user` is the HostFunction leaked by launch_host_func, alive until
    // release_host_function, which cgc calls only once no call of this can happen any more.
    let function = &*(user as *const HostFunction);
    // A previous caught panic cannot have poisoned the lock (it was caught inside it), but a
    // poisoned lock still holds a usable closure, so go on either way.
    let mut body = function.body.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (*body)())) {
        report_panic("a host function", &*payload);
    }
}

/// The `release` given to `cgc_launch_host_func`: frees the closure behind `user`.
unsafe extern "C" fn release_host_function(user: *mut c_void) {
    // Dropping what the closure captured may panic too.
    let dropped = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the HostFunction leaked by launch_host_func; cgc releases it exactly once.
        drop(Box::from_raw(user as *mut HostFunction));
    }));
    if let Err(payload) = dropped {
        report_panic("dropping a host function", &*payload);
    }
}

impl Stream {
    /// Runs `function` on a driver thread once the stream's earlier work is done; later work on
    /// the stream waits for it (`cgc_launch_host_func`). Eagerly it runs once; inside a capture
    /// begun with cgc it becomes a host node that runs at every replay, and the graph keeps the
    /// closure until it is reset or dropped (after its last replay). In a capture cgc did not
    /// begin it is refused ([`Status::CaptureUnsupported`](crate::Status::CaptureUnsupported)).
    ///
    /// The closure is dropped when nothing can call it any more, also when this call fails.
    ///
    /// `function` must not call cgc or CUDA, not even by dropping a cgc object: the driver
    /// forbids it on its thread, and cgc refuses such calls there with
    /// [`Status::InvalidState`](crate::Status::InvalidState) (a `Drop` ignores the error, so the
    /// object would leak). Let it touch host data only (counters, channels, page-locked
    /// buffers). It should be quick: later work on the stream waits for it. A panic inside it is
    /// caught, written to stderr and counted ([`host_function_panics`]).
    pub fn launch_host_func<F>(&self, function: F) -> Result<()>
    where
        F: FnMut() + Send + 'static,
    {
        let user = Box::into_raw(Box::new(HostFunction {
            body: Mutex::new(Box::new(function)),
        })) as *mut c_void;
        // SAFETY: live stream; the trampolines match cgc_host_fn. From here cgc owns `user`: it
        // calls release_host_function(user) exactly once, whatever the outcome, so it is not
        // freed here on failure.
        check(self.api, unsafe {
            (self.api.cgc_launch_host_func)(
                self.raw,
                Some(run_host_function),
                user,
                Some(release_host_function),
            )
        })
    }
}
