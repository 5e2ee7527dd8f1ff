//! Tests that need no GPU (they also pass on a GPU machine). Find libcgc through CGC_LIBRARY.
//!
//! Loading libcgc and the CUDA driver happen once per process, so the tests that need another
//! environment (no driver, no library) re-run this binary as a child process with it.

mod common;

use std::os::raw::c_void;
use std::ptr;

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
    assert_eq!(Status::ALL.len(), 16);
    for code in 0..16 {
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

#[test]
fn layouts_match_the_header() {
    use std::mem::size_of;
    // Sizes on LP64 Linux, as the C compiler lays the structs out.
    assert_eq!(size_of::<sys::cgc_capture_options_t>(), 32);
    assert_eq!(size_of::<sys::cgc_graph_info_t>(), 40);
    assert_eq!(size_of::<sys::cgc_memory_stats_t>(), 56);
    assert_eq!(size_of::<sys::cgc_comm_id_t>(), 128);
    let api = cgc::api().unwrap();
    // A 1.0 library's table is exactly ours.
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
