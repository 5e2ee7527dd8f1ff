//! Helpers shared by the test files: re-running this test binary as a child process; what every
//! GPU test file needs (one test at a time, the skip when there is no GPU, reading results back);
//! and the few CUDA driver calls the 1.0 GPU tests read results with: through the driver, not
//! cgc's own copies (1.1), so that those tests check cgc's graphs with nothing of cgc's in the way;
//! and a capture begun with the driver (1.4's adopted captures), as a framework begins one.
#![allow(dead_code)] // each test file uses a part

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use cgc::{Context, DeviceBuffer, Error, Status, Stream};

#[link(name = "dl")]
extern "C" {
    pub fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
pub const RTLD_NOW: c_int = 2;

/// Env marker telling a re-run test binary which child role to play.
pub const CHILD_ENV: &str = "CGC_RS_TEST_CHILD";

/// The child role this process plays, if it is a child.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// What a child prints when its checks passed, so that the parent knows the test really ran
/// (a mistyped name would make libtest run nothing and still exit 0).
pub fn child_passed(test: &str) {
    println!("CHILD-PASSED {}", test);
}

/// Re-runs this test binary for `test` alone, as child role `role`, with `env` added. Process-
/// wide state (the loaded library, the loaded CUDA driver) is then fresh. Panics unless the
/// child's checks passed.
pub fn run_child(test: &str, role: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, role);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("could not start the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("CHILD-PASSED {}", test)),
        "child test {} ({}) failed: {}\n--- stdout\n{}\n--- stderr\n{}",
        test,
        role,
        out.status,
        stdout,
        stderr
    );
}

/// The path the binding loads libcgc from (as the binding computes it).
pub fn library_path() -> String {
    std::env::var("CGC_LIBRARY")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "libcgc.so.1".to_string())
}

pub fn dlopen_path(path: &str) -> *mut c_void {
    let c = CString::new(path).unwrap();
    // SAFETY: valid C string; never closed.
    unsafe { dlopen(c.as_ptr(), RTLD_NOW) }
}

pub fn dlsym_name(handle: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: valid handle and C string.
    unsafe { dlsym(handle, c.as_ptr()) }
}

// ---- GPU tests ---------------------------------------------------------------------------------

// A test binary's GPU tests run one at a time: a Global-mode capture is broken by an unsafe call
// from any thread, so one test's synchronisation must not overlap another test's capture.
static GPU_LOCK: Mutex<()> = Mutex::new(());

/// Held for the whole of a GPU test.
pub fn serial() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the next test must still run.
    GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0's context, or None after printing why the test is skipped.
pub fn gpu(test: &str) -> Option<Context> {
    match cgc::device_count() {
        Err(e) => {
            println!("skipping: {}: no usable GPU: {}", test, e);
            None
        }
        Ok(0) => {
            println!("skipping: {}: cgc_device_count found 0 devices", test);
            None
        }
        Ok(_) => Some(Context::new(0).expect("cgc_context_create(0)")),
    }
}

/// `n` values of `buffer`, copied to the host through cgc (eagerly, into pageable memory).
pub fn read_back<T: Copy + Default>(stream: &Stream, buffer: &DeviceBuffer, n: usize) -> Vec<T> {
    let mut values = vec![T::default(); n];
    // SAFETY: an eager copy into pageable memory has written it when the call returns (and the
    // stream is synchronised below anyway); the tests read plain numbers, valid for any bytes.
    unsafe { stream.copy_to_host(&mut values, buffer) }.expect("cgc_memcpy_dtoh_async");
    stream.synchronize().expect("cgc_stream_synchronize");
    values
}

/// Asserts `e` has `status` and a message naming `what`.
#[track_caller]
pub fn assert_error(e: &Error, status: Status, what: &str) {
    assert_eq!(e.status(), Some(status), "{}", e);
    assert!(e.message().contains(what), "the message does not name {}: {}", what, e.message());
}

// ---- the CUDA driver ----------------------------------------------------------------------------

type CuResult = c_int;

/// The driver entry points the GPU tests need, resolved by plain dlsym of libcuda.so.1.
pub struct Cuda {
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    memcpy_dtod_async: unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> CuResult,
    // A capture begun with the driver, not cgc (1.4's adopted captures), and its graph.
    memset_d32_async: unsafe extern "C" fn(u64, u32, usize, *mut c_void) -> CuResult,
    stream_begin_capture: unsafe extern "C" fn(*mut c_void, c_int) -> CuResult,
    stream_end_capture: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> CuResult,
    graph_instantiate: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> CuResult,
    graph_launch: unsafe extern "C" fn(*mut c_void, *mut c_void) -> CuResult,
    graph_exec_destroy: unsafe extern "C" fn(*mut c_void) -> CuResult,
    graph_destroy: unsafe extern "C" fn(*mut c_void) -> CuResult,
}

impl Cuda {
    /// Loads the driver and makes device `device`'s primary context current on this thread
    /// (cgc_context_create does not, and the copies below need one). Panics on failure: only
    /// called once cgc has found a GPU.
    pub fn load_and_make_current(device: c_int) -> Cuda {
        // The same file cgc loaded, so that both see one driver state.
        let path = std::env::var("CGC_CUDA_DRIVER")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "libcuda.so.1".into());
        let lib = dlopen_path(&path);
        assert!(!lib.is_null(), "cannot dlopen {}", path);
        let sym = |name: &str| {
            let p = dlsym_name(lib, name);
            assert!(!p.is_null(), "{} has no {}", path, name);
            p
        };
        // SAFETY: each symbol has the CUDA driver API signature it is transmuted to.
        unsafe {
            let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult =
                std::mem::transmute(sym("cuDeviceGet"));
            let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult =
                std::mem::transmute(sym("cuDevicePrimaryCtxRetain"));
            let set_current: unsafe extern "C" fn(*mut c_void) -> CuResult =
                std::mem::transmute(sym("cuCtxSetCurrent"));
            let mut dev: c_int = 0;
            assert_eq!(device_get(&mut dev, device), 0, "cuDeviceGet");
            let mut ctx = std::ptr::null_mut();
            assert_eq!(retain(&mut ctx, dev), 0, "cuDevicePrimaryCtxRetain");
            assert_eq!(set_current(ctx), 0, "cuCtxSetCurrent");
            let memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult =
                std::mem::transmute(sym("cuMemcpyDtoH_v2"));
            let memcpy_dtod_async: unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> CuResult =
                std::mem::transmute(sym("cuMemcpyDtoDAsync_v2"));
            Cuda {
                memcpy_dtoh,
                memcpy_dtod_async,
                memset_d32_async: std::mem::transmute(sym("cuMemsetD32Async")),
                stream_begin_capture: std::mem::transmute(sym("cuStreamBeginCapture_v2")),
                stream_end_capture: std::mem::transmute(sym("cuStreamEndCapture")),
                graph_instantiate: std::mem::transmute(sym("cuGraphInstantiateWithFlags")),
                graph_launch: std::mem::transmute(sym("cuGraphLaunch")),
                graph_exec_destroy: std::mem::transmute(sym("cuGraphExecDestroy")),
                graph_destroy: std::mem::transmute(sym("cuGraphDestroy")),
            }
        }
    }

    /// Copies device memory at `src` into `dst` (synchronous).
    pub fn to_host(&self, src: u64, dst: &mut [f32]) {
        // SAFETY: dst holds dst.len() floats; src is a live device block at least as large.
        let r = unsafe { (self.memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, src, dst.len() * 4) };
        assert_eq!(r, 0, "cuMemcpyDtoH_v2 failed: CUresult {}", r);
    }

    /// Enqueues `count` 32-bit `value`s into device memory at `dst` on `stream` (a CUstream);
    /// captured if it captures.
    pub fn memset_d32_async(&self, dst: u64, value: u32, count: usize, stream: *mut c_void) {
        // SAFETY: dst is a live block of at least `count` 32-bit words.
        let r = unsafe { (self.memset_d32_async)(dst, value, count, stream) };
        assert_eq!(r, 0, "cuMemsetD32Async failed: CUresult {}", r);
    }

    /// Begins a Global-mode capture on `stream` (a CUstream) with the driver, as a framework
    /// (torch.cuda.graph) does: a capture cgc did not begin.
    pub fn begin_capture(&self, stream: *mut c_void) {
        // SAFETY: a live stream; 0 is CU_STREAM_CAPTURE_MODE_GLOBAL.
        let r = unsafe { (self.stream_begin_capture)(stream, 0) };
        assert_eq!(r, 0, "cuStreamBeginCapture_v2 failed: CUresult {}", r);
    }

    /// Ends the driver capture on `stream`: its CUgraph.
    pub fn end_capture(&self, stream: *mut c_void) -> *mut c_void {
        let mut graph = std::ptr::null_mut();
        // SAFETY: a live stream, a valid out pointer.
        let r = unsafe { (self.stream_end_capture)(stream, &mut graph) };
        assert_eq!(r, 0, "cuStreamEndCapture failed: CUresult {}", r);
        graph
    }

    /// Instantiates `graph` (a CUgraph), launches it once on `stream` and destroys both the
    /// executable and the graph (the launch is ordered on the stream; synchronise it to read).
    pub fn launch_once_and_destroy(&self, graph: *mut c_void, stream: *mut c_void) {
        let mut exec = std::ptr::null_mut();
        // SAFETY: a live graph and stream; each handle is destroyed once, the executable after
        // its launch was enqueued (the driver waits for it).
        unsafe {
            let r = (self.graph_instantiate)(&mut exec, graph, 0);
            assert_eq!(r, 0, "cuGraphInstantiateWithFlags failed: CUresult {}", r);
            let r = (self.graph_launch)(exec, stream);
            assert_eq!(r, 0, "cuGraphLaunch failed: CUresult {}", r);
            assert_eq!((self.graph_exec_destroy)(exec), 0, "cuGraphExecDestroy");
            assert_eq!((self.graph_destroy)(graph), 0, "cuGraphDestroy");
        }
    }

    /// Enqueues a device-to-device copy on `stream` (a CUstream); captured if it captures.
    pub fn copy_async(&self, dst: u64, src: u64, bytes: usize, stream: *mut c_void) {
        // SAFETY: both blocks are live and hold `bytes` bytes.
        let r = unsafe { (self.memcpy_dtod_async)(dst, src, bytes, stream) };
        assert_eq!(r, 0, "cuMemcpyDtoDAsync_v2 failed: CUresult {}", r);
    }
}
