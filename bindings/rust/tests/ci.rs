//! Tests that need no GPU (they also pass on a GPU machine). Find libcgc through CGC_LIBRARY.
//!
//! Loading libcgc and the CUDA driver happen once per process, so the tests that need another
//! environment (no driver, no library) re-run this binary as a child process with it.

mod common;

use std::os::raw::{c_char, c_void};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use cgc::{sys, CaptureMode, Error, Status};
use common::{child_passed, child_role, run_child};

#[test]
fn library_loads_and_version_is_1() {
    let v = cgc::version().unwrap_or_else(|e| panic!("libcgc did not load: {}", e));
    assert_eq!(v.major, 1, "version {}", v);
    let api = cgc::api().unwrap();
    // SAFETY: no arguments.
    assert_eq!(unsafe { (api.cgc_version)() } >> 16, sys::CGC_VERSION_MAJOR);
}

#[test]
fn no_driver_error_in_child() {
    if child_role().as_deref() == Some("no_driver") {
        let e = cgc::device_count().expect_err("device_count must fail without the driver");
        assert_eq!(e.status(), Some(Status::NoDriver), "{}", e);
        // 1.6: the status goes with the message, also for a call that returns none.
        assert_eq!(cgc::last_status().unwrap(), Status::NoDriver);
        let api = cgc::api().unwrap();
        // SAFETY: cgc_torch_malloc takes any size, device and stream; it fails here (NULL).
        assert!(unsafe { (api.cgc_torch_malloc)(1024, 0, ptr::null_mut()) }.is_null());
        assert_eq!(cgc::last_status().unwrap(), Status::NoDriver);
        assert!(
            e.message().contains("cgc_device_count"),
            "message: {}",
            e.message()
        );
        assert!(
            e.message().contains("CGC_CUDA_DRIVER"),
            "message: {}",
            e.message()
        );
        assert!(
            e.to_string().starts_with("CGC_ERROR_NO_DRIVER: "),
            "display: {}",
            e
        );
        // 1.6: cgc_saved_info needs no driver: bytes that are no saved buffer are a mismatch.
        let e = cgc::SavedInfo::read(b"not a saved graph").expect_err("garbage without the driver");
        assert_eq!(e.status(), Some(Status::SavedMismatch), "{}", e);
        assert!(e.message().contains("cgc_saved_info"), "message: {}", e.message());
        // The safe layer reports the same status from any entry point.
        let e = cgc::Context::new(0).expect_err("context without the driver");
        assert_eq!(e.status(), Some(Status::NoDriver), "{}", e);
        assert!(
            e.message().contains("cgc_context_create"),
            "message: {}",
            e.message()
        );
        child_passed("no_driver_error_in_child");
        return;
    }
    run_child(
        "no_driver_error_in_child",
        "no_driver",
        &[("CGC_CUDA_DRIVER", "/nonexistent/libcuda.so.1")],
    );
}

#[test]
fn status_codes_round_trip() {
    assert_eq!(Status::ALL.len(), 18);
    for code in 0..18 {
        let s = Status::from_raw(code);
        assert!(!matches!(s, Status::Unknown(_)), "code {} is unknown", code);
        assert_eq!(s.to_raw(), code);
        assert_eq!(Status::ALL[code as usize], s);
        let text = s.description().unwrap();
        assert!(
            text.starts_with(&format!("{}:", s.c_name())),
            "{} -> {}",
            code,
            text
        );
    }
    assert_eq!(Status::from_raw(1), Status::InvalidArgument);
    assert_eq!(Status::from_raw(9), Status::CaptureUnjoined);
    assert!(Status::InvalidArgument
        .description()
        .unwrap()
        .starts_with("CGC_ERROR_INVALID_ARGUMENT"));
    let unknown = Status::from_raw(99);
    assert_eq!(unknown, Status::Unknown(99));
    assert_eq!(unknown.to_raw(), 99);
    assert!(unknown
        .description()
        .unwrap()
        .starts_with("CGC_ERROR_UNKNOWN"));
    assert_eq!(unknown.to_string(), "CGC_ERROR_UNKNOWN(99)");
    // The raw constants agree with the enum.
    assert_eq!(Status::from_raw(sys::CGC_ERROR_INTERNAL), Status::Internal);
    // 1.6's saved graphs.
    assert_eq!(Status::from_raw(sys::CGC_ERROR_NOT_SAVABLE), Status::NotSavable);
    assert_eq!(Status::from_raw(sys::CGC_ERROR_SAVED_MISMATCH), Status::SavedMismatch);
    assert_eq!((sys::CGC_ERROR_NOT_SAVABLE, sys::CGC_ERROR_SAVED_MISMATCH), (16, 17));
    assert_eq!(Status::SavedMismatch.c_name(), "CGC_ERROR_SAVED_MISMATCH");
    assert_eq!(
        Status::from_raw(sys::CGC_ERROR_NCCL_UNAVAILABLE),
        Status::NcclUnavailable
    );
}

#[test]
fn error_display_and_traits() {
    let e = Error::new(Status::InvalidState, "cgc_graph_launch: graph was reset");
    assert_eq!(
        e.to_string(),
        "CGC_ERROR_INVALID_STATE: cgc_graph_launch: graph was reset"
    );
    assert!(!e.is_load_error());
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert!(boxed.to_string().contains("INVALID_STATE"));
}

#[test]
fn missing_library_gives_clear_error() {
    if child_role().as_deref() == Some("no_library") {
        for e in [
            cgc::version().expect_err("version without the library"),
            cgc::device_count().expect_err("device_count without the library"),
            cgc::Context::new(0).expect_err("context without the library"),
        ] {
            assert!(e.is_load_error(), "{:?}", e);
            assert_eq!(e.status(), None);
            assert!(
                e.message().contains("/nonexistent/libcgc.so.1"),
                "message: {}",
                e
            );
            assert!(e.message().contains("CGC_LIBRARY"), "message: {}", e);
        }
        println!("load error: {}", cgc::version().unwrap_err());
        child_passed("missing_library_gives_clear_error");
        return;
    }
    run_child(
        "missing_library_gives_clear_error",
        "no_library",
        &[("CGC_LIBRARY", "/nonexistent/libcgc.so.1")],
    );
}

#[test]
fn bad_calls_give_the_right_status() {
    let api = cgc::api().unwrap();
    // NULL handles are refused by the library, naming the function.
    // SAFETY: NULL is a documented input (refused with INVALID_ARGUMENT).
    let st = unsafe { (api.cgc_stream_destroy)(ptr::null_mut()) };
    assert_eq!(Status::from_raw(st), Status::InvalidArgument);
    // SAFETY: the message is read right after the failing call, on this thread.
    let msg = unsafe { std::ffi::CStr::from_ptr((api.cgc_last_error)()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("cgc_stream_destroy"), "{}", msg);
    // SAFETY: as above.
    assert_eq!(
        unsafe { (api.cgc_graph_launch)(ptr::null_mut(), ptr::null_mut()) },
        sys::CGC_ERROR_INVALID_ARGUMENT
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { (api.cgc_pool_release)(ptr::null_mut()) },
        sys::CGC_ERROR_INVALID_ARGUMENT
    );

    // Freeing memory cgc did not hand out: refused, nothing changed, message copied.
    // SAFETY: the "block" is a bogus address that cgc_free refuses without touching it.
    let bogus = unsafe { cgc::DeviceBuffer::from_raw(0x1234 as *mut c_void, 16) }.unwrap();
    let e = bogus.free().expect_err("freeing a bogus pointer");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_free"), "{}", e);

    // A bad capture mode is refused before the driver is needed.
    let e = cgc::exchange_capture_mode(7).expect_err("mode 7");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert_eq!(CaptureMode::from_raw(7), None);
    assert_eq!(
        CaptureMode::from_raw(CaptureMode::Relaxed.to_raw()),
        Some(CaptureMode::Relaxed)
    );

    // A device that does not exist: refused (NO_DRIVER here, an argument error on a GPU machine).
    let e = cgc::Context::new(-1).expect_err("device -1");
    assert!(
        matches!(
            e.status(),
            Some(Status::InvalidArgument)
                | Some(Status::NoDriver)
                | Some(Status::NoDevice)
                | Some(Status::Cuda)
        ),
        "{}",
        e
    );
}

/// 1.6: after a failed call `last_status()` is the status it returned, on each thread apart; a
/// call that succeeds leaves it, and a fresh thread has none.
#[test]
fn last_status_is_the_failed_calls_status_on_each_thread() {
    let api = cgc::api().unwrap();
    let first = std::thread::spawn(move || {
        assert_eq!(cgc::last_status().unwrap(), Status::Success, "a fresh thread");
        // SAFETY: NULL is a documented input (refused with INVALID_ARGUMENT).
        let st = unsafe { (api.cgc_stream_destroy)(ptr::null_mut()) };
        assert_eq!(Status::from_raw(st), Status::InvalidArgument);
        assert_eq!(cgc::last_status().unwrap(), Status::InvalidArgument);
        // SAFETY: freeing NULL succeeds and does nothing.
        assert_eq!(unsafe { (api.cgc_free)(ptr::null_mut()) }, sys::CGC_SUCCESS);
        assert_eq!(cgc::last_status().unwrap(), Status::InvalidArgument, "a success leaves it");
        // The safe layer's errors carry the same status.
        let e = cgc::exchange_capture_mode(7).expect_err("mode 7");
        assert_eq!(e.status(), Some(cgc::last_status().unwrap()));
    });
    first.join().unwrap();
    let second = std::thread::spawn(move || {
        assert_eq!(cgc::last_status().unwrap(), Status::Success, "the other thread's failure is not this one's");
        let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
        let foreign = not_an_object.as_mut_ptr() as sys::cgc_stream_t;
        // SAFETY: a pointer that is no cgc stream is refused by a check that only reads it.
        let st = unsafe { (api.cgc_capture_begin)(foreign, ptr::null()) };
        assert_eq!(Status::from_raw(st), Status::InvalidHandle);
        assert_eq!(cgc::last_status().unwrap(), Status::InvalidHandle);
    });
    second.join().unwrap();
}

/// The status of a call just made and this thread's message, which must name `function`.
#[track_caller]
fn assert_named_refusal(api: &sys::cgc_api_t, status: sys::cgc_status_t, want: Status, function: &str) {
    // SAFETY: the message is read right after the call, on this thread.
    let message = unsafe { std::ffi::CStr::from_ptr((api.cgc_last_error)()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(Status::from_raw(status), want, "{}: {}", function, message);
    assert!(message.contains(function), "the message does not name {}: {}", function, message);
}

/// 1.6: cgc_memory_snapshot refuses NULL totals, a NULL context (INVALID_ARGUMENT) and a pointer
/// that is no cgc context (INVALID_HANDLE) by name, before it needs the driver, and writes no
/// totals then.
#[test]
fn memory_snapshot_refuses_null_and_foreign_arguments_by_name() {
    let api = cgc::api().unwrap();
    let (mut n_segments, mut n_blocks) = (7usize, 7usize);
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_context_t;
    let null = ptr::null_mut();
    // SAFETY: NULL and foreign contexts are refused by checks that only read the handle; the
    // arrays are NULL with capacity 0, the totals valid or NULL (refused first).
    unsafe {
        let st = (api.cgc_memory_snapshot)(null, null as _, 0, null as _, 0, &mut n_segments, &mut n_blocks);
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_memory_snapshot");
        let st = (api.cgc_memory_snapshot)(foreign, null as _, 0, null as _, 0, &mut n_segments, &mut n_blocks);
        assert_named_refusal(api, st, Status::InvalidHandle, "cgc_memory_snapshot");
        let st = (api.cgc_memory_snapshot)(foreign, null as _, 0, null as _, 0, null as _, &mut n_blocks);
        assert_named_refusal(api, st, Status::InvalidArgument, "n_segments");
        let st = (api.cgc_memory_snapshot)(foreign, null as _, 0, null as _, 0, &mut n_segments, null as _);
        assert_named_refusal(api, st, Status::InvalidArgument, "n_blocks");
    }
    assert_eq!((n_segments, n_blocks), (7, 7), "a refused call writes no totals");
}

// What the callbacks of the refused host function saw, for the test below (this binary's only
// user of them). They only record: a panic must not unwind into C.
static HOST_FUNCTION_RUNS: AtomicUsize = AtomicUsize::new(0);
static RELEASES: AtomicUsize = AtomicUsize::new(0);
static RELEASED_USER: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn never_called(_user: *mut c_void) {
    HOST_FUNCTION_RUNS.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn count_release(user: *mut c_void) {
    RELEASED_USER.store(user as usize, Ordering::SeqCst);
    RELEASES.fetch_add(1, Ordering::SeqCst);
}

/// Every 1.1 function refuses a NULL handle or out pointer, naming itself, before it needs the
/// driver (so also here, without one).
#[test]
fn the_1_1_functions_refuse_bad_arguments_by_name() {
    let api = cgc::api().unwrap();
    let null = ptr::null_mut();
    let mut buffer = [0u8; 64];
    let host = buffer.as_mut_ptr() as *mut c_void;
    let device = 0x10000 as *mut c_void; // never reached: each call fails on its handle first
    let (mut a, mut b): (i32, i32) = (7, 7);
    let mut id = 7u64;
    let mut out_ptr: *mut c_void = 0x1 as *mut c_void;
    let mut policy = sys::cgc_access_policy_t {
        struct_size: std::mem::size_of::<sys::cgc_access_policy_t>(),
        base: null,
        bytes: 0,
        hit_ratio: 0.5,
        hit_property: sys::CGC_ACCESS_PERSISTING,
        miss_property: sys::CGC_ACCESS_STREAMING,
    };
    let op = sys::cgc_mem_op_t {
        kind: sys::CGC_MEM_OP_WRITE_VALUE_32,
        flags: 0,
        address: device,
        value: 1,
    };
    let ptx = b".version 7.0\0";
    let name = b"scale_add\0";
    let mut module: sys::cgc_module_t = 0x1 as sys::cgc_module_t;
    let mut function: sys::cgc_function_t = 0x1 as sys::cgc_function_t;
    let mut args = [null];
    let invalid = Status::InvalidArgument;
    // SAFETY: every call gets NULL where a handle or an out pointer is required, which the
    // library documents as refused (INVALID_ARGUMENT); other pointers are valid or never read.
    unsafe {
        // streams
        let st = (api.cgc_stream_priority_range)(null as _, &mut a, &mut b);
        assert_named_refusal(api, st, invalid, "cgc_stream_priority_range");
        assert_eq!((a, b), (0, 0), "outputs are cleared on failure");
        let st = (api.cgc_stream_priority_range)(null as _, ptr::null_mut(), &mut b);
        assert_named_refusal(api, st, invalid, "cgc_stream_priority_range");
        let st = (api.cgc_stream_priority)(null as _, &mut a);
        assert_named_refusal(api, st, invalid, "cgc_stream_priority");
        let st = (api.cgc_stream_id)(null as _, &mut id);
        assert_named_refusal(api, st, invalid, "cgc_stream_id");
        assert_eq!(id, 0);
        let st = (api.cgc_stream_device)(null as _, &mut a, &mut out_ptr);
        assert_named_refusal(api, st, invalid, "cgc_stream_device");
        assert_eq!((a, out_ptr), (-1, null), "outputs are cleared on failure");
        let st = (api.cgc_stream_copy_attributes)(null as _, null as _);
        assert_named_refusal(api, st, invalid, "cgc_stream_copy_attributes");
        let st = (api.cgc_stream_set_access_policy)(null as _, &policy);
        assert_named_refusal(api, st, invalid, "cgc_stream_set_access_policy");
        let st = (api.cgc_stream_get_access_policy)(null as _, &mut policy);
        assert_named_refusal(api, st, invalid, "cgc_stream_get_access_policy");
        // host memory, copies, sets
        out_ptr = 0x1 as *mut c_void;
        let st = (api.cgc_host_alloc)(null as _, 4096, 0, &mut out_ptr);
        assert_named_refusal(api, st, invalid, "cgc_host_alloc");
        assert!(out_ptr.is_null(), "out is cleared on failure");
        let st = (api.cgc_host_alloc)(null as _, 4096, 0, ptr::null_mut());
        assert_named_refusal(api, st, invalid, "cgc_host_alloc");
        let st = (api.cgc_host_register)(null as _, host, buffer.len(), 0);
        assert_named_refusal(api, st, invalid, "cgc_host_register");
        let st = (api.cgc_host_unregister)(null);
        assert_named_refusal(api, st, invalid, "cgc_host_unregister");
        // Memory that is not page-locked: the driver decides (NO_DRIVER here, INVALID_ARGUMENT
        // on a GPU machine), and the message names the function either way.
        let st = (api.cgc_host_free)(host);
        let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
        assert!(
            matches!(Status::from_raw(st), Status::NoDriver | Status::InvalidArgument),
            "cgc_host_free of pageable memory: {}",
            message
        );
        assert!(message.contains("cgc_host_free"), "{}", message);
        let st = (api.cgc_memcpy_htod_async)(device, host, 16, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memcpy_htod_async");
        let st = (api.cgc_memcpy_dtoh_async)(host, device, 16, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memcpy_dtoh_async");
        let st = (api.cgc_memcpy_dtod_async)(device, device, 16, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memcpy_dtod_async");
        let st = (api.cgc_memset_d8_async)(device, 0xab, 16, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memset_d8_async");
        let st = (api.cgc_memset_d16_async)(device, 0xabcd, 8, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memset_d16_async");
        let st = (api.cgc_memset_d32_async)(device, 0xabcd_ef01, 4, null as _);
        assert_named_refusal(api, st, invalid, "cgc_memset_d32_async");
        // host functions: refused, and the release still runs, exactly once, before the return
        let st = (api.cgc_launch_host_func)(
            null as _,
            Some(never_called),
            0x5eed as *mut c_void,
            Some(count_release),
        );
        assert_named_refusal(api, st, invalid, "cgc_launch_host_func");
        assert_eq!(RELEASES.load(Ordering::SeqCst), 1);
        assert_eq!(RELEASED_USER.load(Ordering::SeqCst), 0x5eed);
        assert_eq!(HOST_FUNCTION_RUNS.load(Ordering::SeqCst), 0);
        // stream memory operations
        let st = (api.cgc_stream_write_value32)(null as _, device, 1, 0);
        assert_named_refusal(api, st, invalid, "cgc_stream_write_value32");
        let st = (api.cgc_stream_write_value64)(null as _, device, 1, 0);
        assert_named_refusal(api, st, invalid, "cgc_stream_write_value64");
        let st = (api.cgc_stream_wait_value32)(null as _, device, 1, sys::CGC_WAIT_EQ);
        assert_named_refusal(api, st, invalid, "cgc_stream_wait_value32");
        let st = (api.cgc_stream_wait_value64)(null as _, device, 1, sys::CGC_WAIT_GEQ);
        assert_named_refusal(api, st, invalid, "cgc_stream_wait_value64");
        let st = (api.cgc_stream_batch_mem_op)(null as _, &op, 1);
        assert_named_refusal(api, st, invalid, "cgc_stream_batch_mem_op");
        // modules and kernels
        let st = (api.cgc_module_load)(null as _, ptx.as_ptr() as *const c_void, &mut module);
        assert_named_refusal(api, st, invalid, "cgc_module_load");
        assert!(module.is_null(), "out is cleared on failure");
        let st = (api.cgc_module_unload)(null as _);
        assert_named_refusal(api, st, invalid, "cgc_module_unload");
        let st = (api.cgc_module_get_function)(null as _, name.as_ptr() as *const _, &mut function);
        assert_named_refusal(api, st, invalid, "cgc_module_get_function");
        assert!(function.is_null(), "out is cleared on failure");
        let st = (api.cgc_function_get_attribute)(null as _, sys::CGC_FUNC_NUM_REGS, &mut a);
        assert_named_refusal(api, st, invalid, "cgc_function_get_attribute");
        let st = (api.cgc_function_set_attribute)(
            null as _,
            sys::CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            0,
        );
        assert_named_refusal(api, st, invalid, "cgc_function_set_attribute");
        let st = (api.cgc_launch_kernel)(null as _, 1, 1, 1, 32, 1, 1, 0, null as _, args.as_mut_ptr());
        assert_named_refusal(api, st, invalid, "cgc_launch_kernel");
    }
}

/// 1.2's per-node updates refuse a NULL graph (INVALID_ARGUMENT) and a pointer that is no cgc
/// graph (INVALID_HANDLE), naming themselves, before they need the driver; a capture that
/// would update a foreign graph on a foreign stream is refused by name too.
#[test]
fn the_1_2_functions_refuse_null_and_foreign_graphs_by_name() {
    let api = cgc::api().unwrap();
    // Memory that is not a cgc object (its first word is no cgc magic), as a stale or foreign
    // handle looks to the library, which reads that word before anything else.
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_graph_t;
    let mut args = [ptr::null_mut::<c_void>(); 1];
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); `args` is a valid array, never read.
    unsafe {
        for (graph, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            let st = (api.cgc_graph_kernel_node_set_enabled)(graph, 0, 0);
            assert_named_refusal(api, st, want, "cgc_graph_kernel_node_set_enabled");
            let st = (api.cgc_graph_kernel_node_set_args)(graph, 0, args.as_mut_ptr());
            assert_named_refusal(api, st, want, "cgc_graph_kernel_node_set_args");
        }
        // The graph is checked before the arguments.
        let st = (api.cgc_graph_kernel_node_set_args)(foreign, 0, ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidHandle, "cgc_graph_kernel_node_set_args");
        // An update of a foreign graph on a foreign stream: the stream answers first.
        let options = sys::cgc_capture_options_t {
            struct_size: std::mem::size_of::<sys::cgc_capture_options_t>(),
            mode: sys::CGC_CAPTURE_MODE_GLOBAL,
            pool: ptr::null_mut(),
            flags: 0,
            update: foreign,
        };
        let st = (api.cgc_capture_begin)(foreign as sys::cgc_stream_t, &options);
        assert_named_refusal(api, st, Status::InvalidHandle, "cgc_capture_begin");
    }
    // The table's 1.2 functions come right after 1.1's last one, 1.3's after them, 1.4's after
    // 1.3's, then 1.5's and 1.6's last.
    let names = sys::FUNCTION_NAMES;
    let at = names.iter().position(|n| *n == "cgc_launch_kernel").unwrap();
    assert_eq!(
        &names[at + 1..],
        &[
            "cgc_graph_kernel_node_set_enabled",
            "cgc_graph_kernel_node_set_args",
            "cgc_capture_conditional_begin",
            "cgc_capture_conditional_end",
            "cgc_capture_conditional_begin_bodies",
            "cgc_pool_adopt_capture",
            "cgc_pool_end_adopted_capture",
            "cgc_record_stream_native",
            "cgc_nccl_pool_create",
            "cgc_pool_malloc",
            "cgc_last_status",
            "cgc_memory_snapshot",
            "cgc_pool_claim",
            "cgc_pool_create_at",
            "cgc_graphs_save",
            "cgc_saved_info",
            "cgc_graphs_restore",
            "cgc_module_add_image",
            "cgc_graph_share_executable",
            "cgc_module_record"
        ]
    );
    // 1.0's 63 functions, 1.1's 29, 1.2's 4, 1.3's 1, 1.4's 3, 1.5's 2 and 1.6's 10.
    assert_eq!(names.len(), 63 + 29 + 4 + 1 + 3 + 2 + 10);
}

/// 1.2's conditional nodes refuse a NULL stream (INVALID_ARGUMENT) and a pointer that is no cgc
/// stream (INVALID_HANDLE), naming themselves, before they need the driver; begin clears *body
/// on failure and refuses a NULL out pointer.
#[test]
fn the_conditional_functions_refuse_null_and_foreign_streams_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_stream_t;
    let condition = not_an_object.as_ptr() as *const u32; // never read: refused before
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the out pointers are valid.
    unsafe {
        for (stream, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            let mut body = foreign; // not NULL: the refusal must clear it
            let st = (api.cgc_capture_conditional_begin)(stream, sys::CGC_CONDITIONAL_WHILE, condition, &mut body);
            assert_named_refusal(api, st, want, "cgc_capture_conditional_begin");
            assert!(body.is_null(), "*body is cleared on failure");
            let st = (api.cgc_capture_conditional_end)(stream);
            assert_named_refusal(api, st, want, "cgc_capture_conditional_end");
        }
        // A kind the header does not have is refused too, but only once the stream is a live
        // one (the GPU tests); with a foreign stream the handle answers first.
        let mut body = ptr::null_mut();
        let st = (api.cgc_capture_conditional_begin)(foreign, 7, condition, &mut body);
        assert_named_refusal(api, st, Status::InvalidHandle, "cgc_capture_conditional_begin");
        let st = (api.cgc_capture_conditional_begin)(foreign, sys::CGC_CONDITIONAL_IF, condition, ptr::null_mut());
        let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_capture_conditional_begin");
        assert!(message.contains("is NULL"), "{}", message);
    }
    assert_eq!((sys::CGC_CONDITIONAL_IF, sys::CGC_CONDITIONAL_WHILE), (0, 1));
}

/// 1.3's cgc_capture_conditional_begin_bodies refuses, naming itself, before it needs the
/// driver: a NULL bodies array (checked first, whatever the stream), a NULL stream
/// (INVALID_ARGUMENT) and a pointer that is no cgc stream (INVALID_HANDLE, also with a kind,
/// count or flags that a live stream would have refused: the handle answers first). Every body
/// slot and the handle are cleared on failure; the handle may be NULL.
#[test]
fn begin_bodies_refuses_null_arrays_and_null_and_foreign_streams_by_name() {
    const BEGIN_BODIES: &str = "cgc_capture_conditional_begin_bodies";
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_stream_t;
    let condition = not_an_object.as_ptr() as *const u32; // never read: refused before
    let (switch, sets) = (sys::CGC_CONDITIONAL_SWITCH, sys::CGC_CONDITIONAL_BODY_SETS_CONDITION);
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the arrays hold n_bodies slots.
    unsafe {
        for stream in [ptr::null_mut(), foreign] {
            let mut handle = 7u64;
            let st = (api.cgc_capture_conditional_begin_bodies)(stream, switch, condition, 0, 3, ptr::null_mut(), &mut handle);
            assert_named_refusal(api, st, Status::InvalidArgument, BEGIN_BODIES);
            let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
            assert!(message.contains("bodies is NULL"), "{}", message);
        }
        // (kind, flags, n_bodies): valid ones, and ones only a live stream's check reaches.
        let arguments = [
            (switch, 0, 3),
            (sys::CGC_CONDITIONAL_IF, 0, 2),
            (sys::CGC_CONDITIONAL_WHILE, sets, 1),
            (7, 0, 1),                          // no such kind
            (sys::CGC_CONDITIONAL_IF, 0, 3),    // IF has 1 or 2 bodies
            (sys::CGC_CONDITIONAL_IF, sets, 1), // the flag is WHILE's
            (sys::CGC_CONDITIONAL_WHILE, 0x80, 1),
            (switch, 0, 0),
        ];
        for (stream, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            for (kind, flags, n_bodies) in arguments {
                let mut bodies = [foreign; 4]; // not NULL: the refusal must clear the slots it was given
                let mut handle = 7u64;
                let st = (api.cgc_capture_conditional_begin_bodies)(
                    stream, kind, condition, flags, n_bodies, bodies.as_mut_ptr(), &mut handle,
                );
                assert_named_refusal(api, st, want, BEGIN_BODIES);
                assert!(bodies[..n_bodies].iter().all(|b| b.is_null()), "bodies are cleared on failure");
                assert!(bodies[n_bodies..].iter().all(|&b| b == foreign), "slots past n_bodies are not written");
                assert_eq!(handle, 0, "*handle is cleared on failure");
            }
            let mut body = foreign;
            let st = (api.cgc_capture_conditional_begin_bodies)(stream, sys::CGC_CONDITIONAL_IF, condition, 0, 1,
                                                                 &mut body, ptr::null_mut());
            assert_named_refusal(api, st, want, BEGIN_BODIES);
            assert!(body.is_null());
        }
        // The 1.2 function leaves SWITCH to this one; with a foreign stream the kind answers
        // first there (the library checks it before the stream).
        let mut body = ptr::null_mut();
        let st = (api.cgc_capture_conditional_begin)(foreign, switch, condition, &mut body);
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_capture_conditional_begin");
        let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
        assert!(message.contains(BEGIN_BODIES), "SWITCH is refused pointing at {}: {}", BEGIN_BODIES, message);
    }
    assert_eq!((sys::CGC_CONDITIONAL_SWITCH, sys::CGC_CONDITIONAL_BODY_SETS_CONDITION), (2, 1));
    assert_eq!(sys::CGC_LOOP_EAGER_ITERATIONS, 65536);
}

/// 1.4's functions refuse, naming themselves, before they need the driver: a NULL pool
/// (INVALID_ARGUMENT), a pointer that is no cgc pool (INVALID_HANDLE), whatever the stream; a
/// NULL block, and a block cgc did not hand out (INVALID_ARGUMENT), for record_stream_native.
#[test]
fn the_1_4_functions_refuse_null_and_foreign_pools_and_blocks_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_pool_t;
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the "streams" are never reached, and the
    // "blocks" are looked up in cgc's tables only.
    unsafe {
        for (pool, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            for native in [ptr::null_mut(), 0x2 as *mut c_void, not_an_object.as_mut_ptr() as *mut c_void] {
                let st = (api.cgc_pool_adopt_capture)(pool, native);
                assert_named_refusal(api, st, want, "cgc_pool_adopt_capture");
            }
            let st = (api.cgc_pool_end_adopted_capture)(pool);
            assert_named_refusal(api, st, want, "cgc_pool_end_adopted_capture");
        }
        let st = (api.cgc_record_stream_native)(ptr::null_mut(), ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_record_stream_native");
        let st = (api.cgc_record_stream_native)(0x1234 as *mut c_void, ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_record_stream_native");
        let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
        assert!(message.contains("not a live allocation"), "{}", message);
    }
}

/// 1.5's functions refuse, naming themselves, before they need the driver: a NULL out pointer
/// (INVALID_ARGUMENT, checked before NCCL is loaded), a NULL communicator (INVALID_ARGUMENT, or
/// NCCL_UNAVAILABLE where there is no NCCL) and a pointer that is no cgc communicator
/// (INVALID_HANDLE, likewise) for cgc_nccl_pool_create, which clears *out and leaves *got alone;
/// NULL and foreign pools and streams for cgc_pool_malloc, which clears *out.
#[test]
fn the_1_5_functions_refuse_null_and_foreign_arguments_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as *mut c_void;
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the out pointers are valid or NULL.
    unsafe {
        let mut got = -7;
        let st = (api.cgc_nccl_pool_create)(foreign as sys::cgc_comm_t, 1 << 20, sys::CGC_NCCL_MEMORY_REGISTERED,
                                            ptr::null_mut(), &mut got);
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_nccl_pool_create");
        for (comm, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign as sys::cgc_comm_t, Status::InvalidHandle)] {
            for wanted in [sys::CGC_NCCL_MEMORY_PLAIN, sys::CGC_NCCL_MEMORY_SYMMETRIC] {
                let mut out = foreign as sys::cgc_pool_t; // not NULL: the refusal must clear it
                let st = (api.cgc_nccl_pool_create)(comm, 1 << 20, wanted, &mut out, &mut got);
                let status = if Status::from_raw(st) == Status::NcclUnavailable { Status::NcclUnavailable } else { want };
                assert_named_refusal(api, st, status, "cgc_nccl_pool_create");
                assert!(out.is_null(), "*out is cleared on failure");
            }
        }
        assert_eq!(got, -7, "*got is written only on success");

        let st = (api.cgc_pool_malloc)(foreign as sys::cgc_pool_t, 512, foreign as sys::cgc_stream_t, ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_pool_malloc");
        for (pool, stream, want) in [
            (ptr::null_mut(), foreign as sys::cgc_stream_t, Status::InvalidArgument),
            (foreign as sys::cgc_pool_t, ptr::null_mut(), Status::InvalidHandle),
            (foreign as sys::cgc_pool_t, foreign as sys::cgc_stream_t, Status::InvalidHandle),
        ] {
            for size in [0, 512, usize::MAX] {
                let mut out = foreign;
                let st = (api.cgc_pool_malloc)(pool, size, stream, &mut out);
                assert_named_refusal(api, st, want, "cgc_pool_malloc");
                assert!(out.is_null(), "*out is cleared on failure");
            }
        }
    }
}

/// 1.6: cgc_pool_claim refuses a NULL pool (INVALID_ARGUMENT) and a pointer that is no cgc pool
/// (INVALID_HANDLE) by name, before it looks at the range: whatever the address (NULL,
/// unaligned) and the size (0 too).
#[test]
fn pool_claim_refuses_null_and_foreign_pools_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_pool_t;
    for (pool, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
        for (address, size) in [(0x10000usize, 512usize), (0, 512), (0x10001, 512), (0x10000, 0), (0x10000, usize::MAX)] {
            // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of
            // the handle, which only reads the foreign memory); the address is never read.
            let st = unsafe { (api.cgc_pool_claim)(pool, address as *mut c_void, size) };
            assert_named_refusal(api, st, want, "cgc_pool_claim");
        }
    }
}

/// 1.6: cgc_pool_create_at refuses a NULL out pointer and a NULL context (INVALID_ARGUMENT) and
/// a pointer that is no cgc context (INVALID_HANDLE) by name, before it looks at the range or
/// needs the driver: whatever the base (NULL, unaligned) and the capacity (0 too); it clears
/// *out.
#[test]
fn pool_create_at_refuses_null_and_foreign_contexts_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_context_t;
    const BASE: usize = 0x6400_0000_0000;
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the base is never read; the out pointers
    // are valid or NULL.
    unsafe {
        let st = (api.cgc_pool_create_at)(foreign, BASE as *mut c_void, 2 << 20, ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_pool_create_at");
        for (ctx, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            for (base, capacity) in [(BASE, 64usize << 20), (0, 64 << 20), (BASE + 4096, 64 << 20), (BASE, 0),
                                     (BASE, (64 << 20) + 1), (BASE, usize::MAX)] {
                let mut out = foreign as sys::cgc_pool_t; // not NULL: the refusal must clear it
                let st = (api.cgc_pool_create_at)(ctx, base as *mut c_void, capacity, &mut out);
                assert_named_refusal(api, st, want, "cgc_pool_create_at");
                assert!(out.is_null(), "*out is cleared on failure");
            }
        }
    }
}

/// 1.6: cgc_graphs_save refuses, by name and before it needs the driver, a NULL size, no graphs
/// (a NULL array or a count of 0), a NULL buffer with a capacity, bad options (a struct_size of
/// 0, NULL pools with a count, flags with bits other than CGC_SAVE_VERIFY), a NULL graph
/// (INVALID_ARGUMENT) and a pointer that is no cgc graph or pool (INVALID_HANDLE), naming the
/// entry; CGC_SAVE_VERIFY itself is taken, the graphs checked next.
#[test]
fn graphs_save_refuses_bad_arguments_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign_graph = not_an_object.as_mut_ptr() as sys::cgc_graph_t;
    let foreign_pool = not_an_object.as_mut_ptr() as sys::cgc_pool_t;
    let flagged = |pools: *const sys::cgc_pool_t, n_pools: usize, flags: u32| sys::cgc_save_options_t {
        struct_size: std::mem::size_of::<sys::cgc_save_options_t>(),
        pools,
        n_pools,
        flags,
    };
    let options = |pools: *const sys::cgc_pool_t, n_pools: usize| flagged(pools, n_pools, 0);
    assert_eq!(sys::CGC_SAVE_VERIFY, 1);
    let mut buffer = [0u8; 64];
    let buffer_ptr = buffer.as_mut_ptr() as *mut c_void;
    let (null_graphs, foreign_graphs) = ([ptr::null_mut::<sys::cgc_graph_s>()], [foreign_graph]);
    let foreign_pools = [foreign_pool];
    let no_options = sys::cgc_save_options_t { struct_size: 0, pools: ptr::null(), n_pools: 0, flags: 0 };
    // SAFETY: NULL and the foreign pointers are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the arrays hold the counts given; the buffer
    // holds 64 bytes; nothing is written but *size.
    unsafe {
        let st = (api.cgc_graphs_save)(null_graphs.as_ptr(), 1, ptr::null(), ptr::null_mut(), 0, ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_graphs_save");
        let cases: [(*const sys::cgc_graph_t, usize, sys::cgc_save_options_t, *mut c_void, usize, Status, &str); 11] = [
            (ptr::null(), 1, options(ptr::null(), 0), ptr::null_mut(), 0, Status::InvalidArgument, "graphs is NULL"),
            (foreign_graphs.as_ptr(), 0, options(ptr::null(), 0), ptr::null_mut(), 0, Status::InvalidArgument,
             "n_graphs is 0"),
            (foreign_graphs.as_ptr(), 1, options(ptr::null(), 0), ptr::null_mut(), 64, Status::InvalidArgument,
             "buffer is NULL"),
            (foreign_graphs.as_ptr(), 1, no_options, buffer_ptr, 64, Status::InvalidArgument, "struct_size"),
            (foreign_graphs.as_ptr(), 1, options(ptr::null(), 1), buffer_ptr, 64, Status::InvalidArgument, "pools"),
            (null_graphs.as_ptr(), 1, options(ptr::null(), 0), ptr::null_mut(), 0, Status::InvalidArgument, "graphs"),
            (foreign_graphs.as_ptr(), 1, options(foreign_pools.as_ptr(), 1), buffer_ptr, 64, Status::InvalidHandle,
             "graphs[0]"),
            (foreign_graphs.as_ptr(), 1, flagged(ptr::null(), 0, 2), buffer_ptr, 64, Status::InvalidArgument,
             "options->flags has unknown bits 0x2"),
            (foreign_graphs.as_ptr(), 1, flagged(ptr::null(), 0, sys::CGC_SAVE_VERIFY | 4), ptr::null_mut(), 0,
             Status::InvalidArgument, "options->flags has unknown bits 0x4"),
            (foreign_graphs.as_ptr(), 1, flagged(ptr::null(), 0, sys::CGC_SAVE_VERIFY), buffer_ptr, 64,
             Status::InvalidHandle, "graphs[0]"),
            (foreign_graphs.as_ptr(), 1, flagged(foreign_pools.as_ptr(), 1, sys::CGC_SAVE_VERIFY), ptr::null_mut(), 0,
             Status::InvalidHandle, "graphs[0]"),
        ];
        for (graphs, n_graphs, options, buffer, capacity, want, words) in cases {
            let mut size = 12345usize;
            let st = (api.cgc_graphs_save)(graphs, n_graphs, &options, buffer, capacity, &mut size);
            assert_named_refusal(api, st, want, "cgc_graphs_save");
            let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
            assert!(message.contains(words), "{:?}: {}", words, message);
        }
    }
}

/// 1.6: cgc_saved_info needs no driver: a NULL info or data is refused (INVALID_ARGUMENT) and
/// bytes that are no saved buffer (garbage, zeros, too few, none) are CGC_ERROR_SAVED_MISMATCH,
/// by name; cgc_graphs_restore and cgc_module_add_image refuse a NULL context (INVALID_ARGUMENT)
/// and a pointer that is no cgc context (INVALID_HANDLE) by name, before they need the driver.
#[test]
fn saved_info_restore_and_add_image_refuse_bad_arguments_by_name() {
    let api = cgc::api().unwrap();
    let garbage: Vec<u8> = (0..256u32).map(|i| (i * 37 + 11) as u8).collect();
    let zeros = [0u8; 256];
    let mut info = sys::cgc_saved_info_t {
        struct_size: std::mem::size_of::<sys::cgc_saved_info_t>(),
        ..Default::default()
    };
    // SAFETY: every data pointer is NULL or readable for the size given; info is a valid struct
    // with struct_size set, or NULL.
    unsafe {
        let st = (api.cgc_saved_info)(garbage.as_ptr() as *const c_void, garbage.len(), ptr::null_mut());
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_saved_info");
        let st = (api.cgc_saved_info)(ptr::null(), 64, &mut info);
        assert_named_refusal(api, st, Status::InvalidArgument, "cgc_saved_info");
        for (data, size) in [(&garbage[..], 256), (&garbage[..], 7), (&garbage[..], 0), (&zeros[..], 256), (&zeros[..], 8)] {
            let st = (api.cgc_saved_info)(data.as_ptr() as *const c_void, size, &mut info);
            assert_named_refusal(api, st, Status::SavedMismatch, "cgc_saved_info");
        }
    }

    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_context_t;
    let key = b"cgc-rust-ci\0";
    let options = sys::cgc_restore_options_t {
        struct_size: std::mem::size_of::<sys::cgc_restore_options_t>(),
        flags: 0,
        threads: 0,
        generators: ptr::null_mut(),
        n_generators: 0,
    };
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory); the data, key and image are readable and the
    // out arrays hold one handle each.
    unsafe {
        for (ctx, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign, Status::InvalidHandle)] {
            // Not NULL: a refusal must clear them (outputs are NULL on failure).
            let (mut graphs, mut pools) = ([foreign as sys::cgc_graph_t], [foreign as sys::cgc_pool_t]);
            let st = (api.cgc_graphs_restore)(ctx, garbage.as_ptr() as *const c_void, garbage.len(), &options,
                                              graphs.as_mut_ptr(), 1, pools.as_mut_ptr(), 1);
            assert_named_refusal(api, st, want, "cgc_graphs_restore");
            assert!(graphs[0].is_null() && pools[0].is_null(), "a refused restore hands out no handle");
            let st = (api.cgc_module_add_image)(ctx, key.as_ptr() as *const c_char, garbage.as_ptr() as *const c_void,
                                                garbage.len());
            assert_named_refusal(api, st, want, "cgc_module_add_image");
        }
    }
}

/// 1.6: cgc_graph_share_executable refuses a NULL graph or leader (INVALID_ARGUMENT) and a
/// pointer that is no cgc graph (INVALID_HANDLE) by name, the graph before the leader, before it
/// needs the driver; a restore with CGC_RESTORE_FAMILIES refuses a NULL or foreign context as one
/// without it does.
#[test]
fn share_executable_and_families_refuse_null_and_foreign_handles_by_name() {
    let api = cgc::api().unwrap();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = not_an_object.as_mut_ptr() as sys::cgc_graph_t;
    let null: sys::cgc_graph_t = ptr::null_mut();
    // SAFETY: NULL and the foreign pointer are documented inputs (refused by a check of the
    // handle, which only reads the foreign memory).
    unsafe {
        for (graph, leader, want, named) in [
            (null, null, Status::InvalidArgument, "graph is NULL"),
            (null, foreign, Status::InvalidArgument, "graph is NULL"),
            (foreign, null, Status::InvalidHandle, "graph (0x"),
            (foreign, foreign, Status::InvalidHandle, "graph (0x"),
        ] {
            let st = (api.cgc_graph_share_executable)(graph, leader);
            let message = std::ffi::CStr::from_ptr((api.cgc_last_error)()).to_string_lossy().into_owned();
            assert_named_refusal(api, st, want, "cgc_graph_share_executable");
            assert!(message.contains(named), "{:?}: {}", named, message);
        }
    }
    assert_eq!(sys::CGC_RESTORE_FAMILIES, 1);
    let garbage = [0x11u8; 64];
    let options = sys::cgc_restore_options_t {
        struct_size: std::mem::size_of::<sys::cgc_restore_options_t>(),
        flags: sys::CGC_RESTORE_FAMILIES,
        threads: 1,
        ..Default::default()
    };
    let foreign_ctx = not_an_object.as_mut_ptr() as sys::cgc_context_t;
    // SAFETY: as above; the data is readable and the out arrays hold one handle each.
    unsafe {
        for (ctx, want) in [(ptr::null_mut(), Status::InvalidArgument), (foreign_ctx, Status::InvalidHandle)] {
            let (mut graphs, mut pools) = ([foreign], [foreign as sys::cgc_pool_t]);
            let st = (api.cgc_graphs_restore)(ctx, garbage.as_ptr() as *const c_void, garbage.len(), &options,
                                              graphs.as_mut_ptr(), 1, pools.as_mut_ptr(), 1);
            assert_named_refusal(api, st, want, "cgc_graphs_restore");
            assert!(graphs[0].is_null() && pools[0].is_null(), "a refused restore hands out no handle");
        }
    }
}

/// 1.6: the record of module images (cgc_module_record) needs no context and no driver call, so
/// it runs here for real: turning it off while it is off succeeds and sets both counts (0: this
/// process never recorded), with NULL counts too; turning it on succeeds where CUPTI can
/// subscribe (a GPU machine with libcupti) and is otherwise refused by name, NOT_SUPPORTED
/// (no libcupti, or CUPTI without a driver) or INVALID_STATE (another CUPTI client subscribed),
/// the counts set either way; a second call answers as the first, the safe layer as the raw
/// table; and the record is off again at the end, the counts never going down. (The only test
/// of this process that records.)
#[test]
fn module_record_runs_without_a_gpu_and_is_off_at_the_end() {
    let api = cgc::api().unwrap();
    let message = || {
        // SAFETY: read right after the call, on this thread.
        unsafe { std::ffi::CStr::from_ptr((api.cgc_last_error)()) }.to_string_lossy().into_owned()
    };
    let (mut images, mut bytes) = (12345usize, 12345usize);
    // SAFETY: the out pointers are valid or NULL (documented); the call takes no handle.
    let st = unsafe { (api.cgc_module_record)(0, &mut images, &mut bytes) };
    assert_eq!(Status::from_raw(st), Status::Success, "record off while off: {}", message());
    assert_eq!((images, bytes), (0, 0), "nothing was recorded in this process");
    // SAFETY: as above.
    let st = unsafe { (api.cgc_module_record)(0, ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(Status::from_raw(st), Status::Success, "NULL counts: {}", message());

    let (mut images, mut bytes) = (12345usize, 12345usize);
    // SAFETY: as above.
    let on = Status::from_raw(unsafe { (api.cgc_module_record)(1, &mut images, &mut bytes) });
    assert_ne!((images, bytes), (12345, 12345), "the counts are set whatever the status");
    if on != Status::Success {
        assert!(matches!(on, Status::NotSupported | Status::InvalidState), "record on: {:?}: {}", on, message());
        assert!(message().contains("cgc_module_record"), "the message does not name the call: {}", message());
    }
    let after_on = cgc::RecordedImages { images, bytes };
    // Again, through the safe layer: the same answer (on while on changes nothing; a refusal
    // stays one).
    match cgc::module_record(true) {
        Ok(recorded) => {
            assert_eq!(on, Status::Success, "the raw call was refused, the safe one not");
            assert!(recorded.images >= after_on.images && recorded.bytes >= after_on.bytes, "{:?}", recorded);
        }
        Err(e) => {
            assert_eq!(e.status(), Some(on), "{}", e);
            assert!(e.message().contains("cgc_module_record"), "{}", e);
        }
    }
    // Off again: what the record holds stays.
    let off = cgc::module_record(false).unwrap_or_else(|e| panic!("record off: {}", e));
    assert!(off.images >= after_on.images && off.bytes >= after_on.bytes, "{:?} after {:?}", off, after_on);
    assert_eq!(off.images == 0, off.bytes == 0, "{:?}", off);
    assert_eq!(cgc::module_record(false).unwrap(), off, "off while off changes nothing");
}

/// 1.6: without libcupti (CGC_CUPTI_LIBRARY naming a file that is not there, the only candidate
/// then) and without the driver, the record is refused with NOT_SUPPORTED naming the call, the
/// path tried and CGC_CUPTI_LIBRARY, each time it is asked, with both counts set to 0; turning it
/// off succeeds: the record never calls the driver.
#[test]
fn module_record_without_cupti_in_child() {
    if child_role().as_deref() == Some("no_cupti") {
        let api = cgc::api().unwrap();
        for _ in 0..2 {
            let e = cgc::module_record(true).expect_err("no libcupti");
            assert_eq!(e.status(), Some(Status::NotSupported), "{}", e);
            for word in ["cgc_module_record", "/nonexistent/libcupti.so", "CGC_CUPTI_LIBRARY"] {
                assert!(e.message().contains(word), "{:?} missing: {}", word, e);
            }
            let (mut images, mut bytes) = (12345usize, 12345usize);
            // SAFETY: valid out pointers; the call takes no handle.
            let st = unsafe { (api.cgc_module_record)(1, &mut images, &mut bytes) };
            assert_named_refusal(api, st, Status::NotSupported, "cgc_module_record");
            assert_eq!((images, bytes), (0, 0), "the counts are set on failure too");
        }
        assert_eq!(cgc::module_record(false).unwrap(), cgc::RecordedImages { images: 0, bytes: 0 });
        assert_eq!(cgc::RecordedImages::default(), cgc::RecordedImages { images: 0, bytes: 0 });
        // The driver was never needed: it is not there.
        assert_eq!(cgc::device_count().expect_err("no driver").status(), Some(Status::NoDriver));
        child_passed("module_record_without_cupti_in_child");
        return;
    }
    run_child(
        "module_record_without_cupti_in_child",
        "no_cupti",
        &[("CGC_CUPTI_LIBRARY", "/nonexistent/libcupti.so"), ("CGC_CUDA_DRIVER", "/nonexistent/libcuda.so.1")],
    );
}

#[test]
fn function_table_matches_the_library() {
    use std::mem::size_of;
    // (Struct layouts and parameter types are checked against the header below.)
    let api = cgc::api().unwrap();
    // A 1.5 library's table is exactly ours (the loader refuses a shorter one).
    assert_eq!(api.struct_size, size_of::<sys::cgc_api_t>());
    assert_eq!(
        sys::FUNCTION_NAMES.len(),
        (size_of::<sys::cgc_api_t>() - size_of::<usize>()) / size_of::<usize>()
    );
    // Every field holds the function of its name: the table's order matches the header's.
    let lib = common::dlopen_path(&common::library_path());
    assert!(!lib.is_null());
    for (name, addr) in api.entries() {
        let sym = common::dlsym_name(lib, name) as usize;
        assert_ne!(sym, 0, "libcgc exports no {}", name);
        assert_eq!(sym, addr, "table field {} holds another function", name);
    }
}

// ---- the binding against the header ------------------------------------------------------------
//
// tools/abi_describe.c, compiled against capi/cgc.h, writes every function's parameter classes,
// every struct's field offsets and every status code (`bazel build //tools:abi_description`;
// tools/test_all.sh exports its path as CGC_ABI_DESCRIPTION). A field, parameter or status that
// changes in the header and not here fails these tests.

/// The lines of the description, or None (with the reason printed) when it was not given.
fn abi_description() -> Option<Vec<Vec<String>>> {
    let path = match std::env::var("CGC_ABI_DESCRIPTION") {
        Ok(p) => p,
        Err(_) => {
            println!("skipping: CGC_ABI_DESCRIPTION is not set (tools/test_all.sh sets it)");
            return None;
        }
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("CGC_ABI_DESCRIPTION={}: {}", path, e));
    Some(
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect(),
    )
}

/// The description's class of a Rust type as `stringify!` wrote it in sys.rs.
fn class_of_rust_type(ty: &str) -> String {
    let ty: String = ty.split_whitespace().collect::<Vec<_>>().join(" ");
    let ty = ty.replace("* mut ", "*mut ").replace("* const ", "*const ");
    if let Some(inner) = ty.strip_prefix("*mut ").or_else(|| ty.strip_prefix("*const ")) {
        return format!("ptr({})", class_of_rust_type(inner));
    }
    match ty.as_str() {
        "" | "c_void" => "void".into(),
        "c_char" => "i8".into(),
        "c_int" | "cgc_status_t" | "cgc_capture_mode_t" | "cgc_capture_status_t"
        | "cgc_dtype_t" | "cgc_reduce_op_t" | "cgc_access_property_t" | "cgc_mem_op_kind_t"
        | "cgc_function_attribute_t" | "cgc_graph_update_t" | "cgc_conditional_kind_t"
        | "cgc_nccl_memory_t" | "cgc_block_state_t" => "i32".into(),
        "c_uint" => "u32".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "isize" | "f32" => ty.clone(),
        "cgc_context_t" | "cgc_stream_t" | "cgc_event_t" | "cgc_graph_t" | "cgc_pool_t"
        | "cgc_comm_t" | "cgc_rng_t" | "cgc_module_t" | "cgc_function_t" => {
            format!("handle:{}", ty)
        }
        "cgc_capture_fn" | "cgc_host_fn" => format!("fnptr:{}", ty),
        "cgc_capture_options_t" | "cgc_graph_info_t" | "cgc_memory_stats_t" | "cgc_comm_id_t"
        | "cgc_access_policy_t" | "cgc_mem_op_t" | "cgc_segment_info_t" | "cgc_block_info_t"
        | "cgc_save_options_t" | "cgc_saved_info_t" | "cgc_restore_options_t" => {
            format!("struct:{}", ty)
        }
        other => panic!("sys.rs uses a type this test cannot classify: {}", other),
    }
}

/// The description's class of a type as `std::any::type_name` writes it (struct fields and the
/// callback's parameters).
fn class_of_type_name(name: &str) -> String {
    let name = name.trim();
    if let Some(inner) = name.strip_prefix("*mut ").or_else(|| name.strip_prefix("*const ")) {
        // A pointer to a handle's opaque struct is the handle; a pointer to a pointer (1.6's
        // `const cgc_pool_t* pools`) is a pointer to what the inner pointer is.
        let last = inner.rsplit("::").next().unwrap();
        if !inner.starts_with('*') && last.starts_with("cgc_") && last.ends_with("_s") {
            return format!("handle:{}_t", &last[..last.len() - 2]);
        }
        return format!("ptr({})", class_of_type_name(inner));
    }
    if let Some(array) = name.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
        let (element, n) = array.split_once("; ").unwrap();
        return format!("array({},{})", n, class_of_type_name(element));
    }
    match name.rsplit("::").next().unwrap() {
        "c_void" | "()" => "void".into(),
        // The description writes C's char as i8 whatever its sign; Rust's c_char is u8 where
        // char is unsigned (aarch64), and type_name cannot tell it from a uint8_t. No struct
        // field or callback parameter of the header is a uint8_t (only memset_d8's value, a
        // function parameter, which class_of_rust_type reads by its written name).
        "u8" if C_CHAR_IS_UNSIGNED => "i8".into(),
        other => other.into(),
    }
}

/// Whether `c_char` is `u8` on this target (see class_of_type_name).
const C_CHAR_IS_UNSIGNED: bool = std::os::raw::c_char::MIN == 0;

/// The (name, class) parameters of a description line, from word `first` on.
fn described_params(line: &[String], first: usize) -> Vec<(String, String)> {
    line[first..]
        .iter()
        .map(|p| {
            let (name, class) = p.split_once(':').unwrap();
            (name.to_string(), class.to_string())
        })
        .collect()
}

#[test]
fn function_signatures_match_the_header() {
    let lines = match abi_description() {
        Some(l) => l,
        None => return,
    };
    let header: Vec<&Vec<String>> = lines.iter().filter(|l| l[0] == "function").collect();
    assert_eq!(header.len(), sys::SIGNATURES.len(), "number of functions");
    for (index, (line, (name, ret, params))) in header.iter().zip(sys::SIGNATURES).enumerate() {
        assert_eq!(line[1], index.to_string());
        assert_eq!(line[2], *name, "function {} (order of cgc_api_t)", index);
        assert_eq!(line[3], class_of_rust_type(ret), "{}: return type {:?}", name, ret);
        // Names too: two parameters of one type swapped in one place only would pass the types.
        // A parameter named like a Rust keyword is written raw (`r#fn`).
        let rust_params: Vec<(String, String)> = params
            .iter()
            .map(|(n, t)| (n.trim_start_matches("r#").to_string(), class_of_rust_type(t)))
            .collect();
        assert_eq!(described_params(line, 4), rust_params, "{}: parameters {:?}", name, params);
    }
}

/// The (parameter classes, return class) of a callback type of sys.rs, from its type name, e.g.
/// "core::option::Option<unsafe extern \"C\" fn(*mut cgc::sys::cgc_stream_s, *mut
/// core::ffi::c_void) -> i32>"; a function returning nothing has no " -> ".
fn callback_classes(name: &str) -> (Vec<String>, String) {
    let inside = name[name.find("fn(").expect(name) + 3..].trim_end_matches('>');
    let (params, ret) = match inside.split_once(") -> ") {
        Some((params, ret)) => (params, ret),
        None => (inside.strip_suffix(')').expect(name), "()"),
    };
    let params = if params.is_empty() {
        Vec::new()
    } else {
        params.split(", ").map(class_of_type_name).collect()
    };
    (params, class_of_type_name(ret))
}

#[test]
fn the_callback_types_match_the_header() {
    let lines = match abi_description() {
        Some(l) => l,
        None => return,
    };
    let rust = [
        ("cgc_capture_fn", std::any::type_name::<sys::cgc_capture_fn>()),
        ("cgc_host_fn", std::any::type_name::<sys::cgc_host_fn>()),
    ];
    let described: Vec<&Vec<String>> = lines.iter().filter(|l| l[0] == "callback").collect();
    assert_eq!(described.len(), rust.len(), "number of callback types");
    for (callback, name) in rust {
        let line = described
            .iter()
            .find(|l| l[1] == callback)
            .unwrap_or_else(|| panic!("the header does not describe {}", callback));
        // By position: type_name has no parameter names.
        let (params, ret) = callback_classes(name);
        let c: Vec<String> = described_params(line, 3).into_iter().map(|(_, class)| class).collect();
        assert_eq!(c, params, "{} parameters ({})", callback, name);
        assert_eq!(line[2], ret, "{} return type ({})", callback, name);
    }
}

fn type_name_of<T>(_: *const T) -> &'static str {
    std::any::type_name::<T>()
}

fn size_of_pointee<T>(_: *const T) -> usize {
    std::mem::size_of::<T>()
}

/// (size, [(field, offset, size, class)]) of a `#[repr(C)]` struct of sys.rs.
macro_rules! layout {
    ($s:ident { $($field:ident),* }) => {{
        let value = std::mem::MaybeUninit::<sys::$s>::uninit();
        let base = value.as_ptr();
        // SAFETY: addr_of! takes field addresses without reading the uninitialised value.
        let fields: Vec<(String, usize, usize, String)> = vec![$(unsafe {
            let field = ptr::addr_of!((*base).$field);
            (
                stringify!($field).to_string(),
                field as usize - base as usize,
                size_of_pointee(field),
                class_of_type_name(type_name_of(field)),
            )
        }),*];
        (stringify!($s), std::mem::size_of::<sys::$s>(), fields)
    }};
}

#[test]
fn struct_layouts_match_the_header() {
    let lines = match abi_description() {
        Some(l) => l,
        None => return,
    };
    let rust = vec![
        layout!(cgc_capture_options_t { struct_size, mode, pool, flags, update }),
        layout!(cgc_graph_info_t { struct_size, node_count, replay_count, uploaded,
                                   pool_bytes_reserved, kernel_nodes, memcpy_nodes,
                                   memset_nodes, host_nodes, child_graph_nodes, empty_nodes,
                                   event_wait_nodes, event_record_nodes, mem_alloc_nodes,
                                   mem_free_nodes, mem_op_nodes, conditional_nodes,
                                   other_nodes, update_count, last_update,
                                   last_update_result, family_size, family_result }),
        layout!(cgc_memory_stats_t { struct_size, bytes_reserved, bytes_allocated,
                                     peak_bytes_allocated, peak_bytes_reserved,
                                     num_driver_allocs, num_driver_frees }),
        layout!(cgc_comm_id_t { internal }),
        layout!(cgc_access_policy_t { struct_size, base, bytes, hit_ratio, hit_property,
                                      miss_property }),
        layout!(cgc_mem_op_t { kind, flags, address, value }),
        layout!(cgc_segment_info_t { address, size, allocated_bytes, pool, stream_id, small,
                                     first_block, n_blocks }),
        layout!(cgc_block_info_t { address, size, requested, state }),
        layout!(cgc_save_options_t { struct_size, pools, n_pools, flags }),
        layout!(cgc_saved_info_t { struct_size, format_version, compute_major, compute_minor,
                                   driver_version, n_graphs, n_pools, n_modules, n_nodes,
                                   pool_bytes, image_bytes, restore_bytes,
                                   family_restore_bytes, n_generators }),
        layout!(cgc_restore_options_t { struct_size, flags, threads, generators, n_generators }),
    ];
    let c_structs: Vec<&Vec<String>> = lines.iter().filter(|l| l[0] == "struct").collect();
    assert_eq!(c_structs.len(), rust.len(), "number of structs");
    for (name, size, fields) in &rust {
        let c = c_structs
            .iter()
            .find(|l| l[1] == *name)
            .unwrap_or_else(|| panic!("{} is not in the header", name));
        assert_eq!(c[2], size.to_string(), "sizeof({})", name);
        let c_fields: Vec<(String, usize, usize, String)> = lines
            .iter()
            .filter(|l| l[0] == "field" && l[1] == *name)
            .map(|l| (l[3].clone(), l[5].parse().unwrap(), l[6].parse().unwrap(), l[4].clone()))
            .collect();
        assert_eq!(&c_fields, fields, "fields of {} (name, offset, size, class)", name);
    }
}

#[test]
fn status_codes_match_the_header() {
    let lines = match abi_description() {
        Some(l) => l,
        None => return,
    };
    let c: Vec<(String, i32)> = lines
        .iter()
        .filter(|l| l[0] == "status")
        .map(|l| (l[1].clone(), l[2].parse().unwrap()))
        .collect();
    let rust: Vec<(String, i32)> = Status::ALL
        .iter()
        .map(|s| (s.c_name().to_string(), s.to_raw()))
        .collect();
    assert_eq!(c, rust, "status codes (name, value)");
}
