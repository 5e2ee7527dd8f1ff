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
fn function_table_matches_the_library() {
    use std::mem::size_of;
    // (Struct layouts and parameter types are checked against the header below.)
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
        | "cgc_dtype_t" | "cgc_reduce_op_t" => "i32".into(),
        "c_uint" => "u32".into(),
        "u32" | "u64" | "usize" | "isize" | "f32" => ty.clone(),
        "cgc_context_t" | "cgc_stream_t" | "cgc_event_t" | "cgc_graph_t" | "cgc_pool_t"
        | "cgc_comm_t" | "cgc_rng_t" => format!("handle:{}", ty),
        "cgc_capture_fn" => "fnptr:cgc_capture_fn".into(),
        "cgc_capture_options_t" | "cgc_graph_info_t" | "cgc_memory_stats_t" | "cgc_comm_id_t" => {
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
        let last = inner.rsplit("::").next().unwrap();
        if last.starts_with("cgc_") && last.ends_with("_s") {
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
        "u8" => "i8".into(), // c_char is u8 where char is unsigned (aarch64); the ABI has no uint8
        other => other.into(),
    }
}

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
        let rust_params: Vec<(String, String)> = params
            .iter()
            .map(|(n, t)| (n.to_string(), class_of_rust_type(t)))
            .collect();
        assert_eq!(described_params(line, 4), rust_params, "{}: parameters {:?}", name, params);
    }
}

#[test]
fn the_callback_type_matches_the_header() {
    let lines = match abi_description() {
        Some(l) => l,
        None => return,
    };
    let line = lines
        .iter()
        .find(|l| l[0] == "callback" && l[1] == "cgc_capture_fn")
        .expect("the header describes cgc_capture_fn");
    // "core::option::Option<unsafe extern \"C\" fn(*mut cgc::sys::cgc_stream_s, *mut
    // core::ffi::c_void) -> i32>": the parameter and return types, by position.
    let name = std::any::type_name::<sys::cgc_capture_fn>();
    let inside = &name[name.find("fn(").expect(name) + 3..];
    let (params, ret) = inside.split_once(") -> ").expect(name);
    let ret = ret.trim_end_matches('>');
    let rust: Vec<String> = params.split(", ").map(class_of_type_name).collect();
    let c: Vec<String> = described_params(line, 3).into_iter().map(|(_, class)| class).collect();
    assert_eq!(c, rust, "cgc_capture_fn parameters ({})", name);
    assert_eq!(line[2], class_of_type_name(ret), "cgc_capture_fn return type ({})", name);
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
        layout!(cgc_capture_options_t { struct_size, mode, pool, flags }),
        layout!(cgc_graph_info_t { struct_size, node_count, replay_count, uploaded,
                                   pool_bytes_reserved }),
        layout!(cgc_memory_stats_t { struct_size, bytes_reserved, bytes_allocated,
                                     peak_bytes_allocated, peak_bytes_reserved,
                                     num_driver_allocs, num_driver_frees }),
        layout!(cgc_comm_id_t { internal }),
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
