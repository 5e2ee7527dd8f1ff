//! The safe layer of 1.1 to 1.6 without a GPU: what the binding checks itself (sizes, names, overflow),
//! and what the library refuses on a NULL handle, through the same methods a program calls.
//!
//! These live in the crate, not in tests/, because they need objects holding a NULL handle
//! (a stream, a context, a module, a function), which no public constructor makes: without a
//! GPU there is no live handle, and the library checks a NULL one before it needs the driver.
//! Every NULL-handle call below is one the library documents as refused (INVALID_ARGUMENT).
//! They need libcgc (CGC_LIBRARY), as tests/ci.rs does.

use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::conditional::run_bodies;
use crate::{
    api, sys, AccessPolicy, AccessProperty, BarrierScope, BlockState, CaptureMode,
    CaptureOptions, Comm, ConditionalBodies, ConditionalKind, Context, DeviceBuffer, Error, Function, FunctionAttribute, Graph, GraphInfo,
    GraphUpdate, HostBuffer, HostRegistration, KernelArg, LaunchConfig, MemOp, Module, NcclMemory, Pool, PoolId,
    RestoreOptions, Result, SaveOptions, Status, Stream, WaitCondition, WAIT_FLUSH,
};

fn loaded_api() -> &'static sys::cgc_api_t {
    api().unwrap_or_else(|e| panic!("libcgc did not load: {}", e))
}

fn null_stream() -> Stream {
    // Dropping it calls cgc_stream_destroy(NULL), which is refused and ignored.
    Stream {
        raw: ptr::null_mut(),
        api: loaded_api(),
        borrowed: true,
    }
}

fn null_context() -> Context {
    Context {
        raw: ptr::null_mut(),
        api: loaded_api(),
        device: 0,
    }
}

/// A "device buffer" at a bogus address, for checks made before any call: never dereferenced.
fn bogus_buffer(len: usize) -> DeviceBuffer {
    // SAFETY: only sizes are read from it, and it is given up (into_raw) rather than freed.
    unsafe { DeviceBuffer::from_raw(0x10000 as *mut c_void, len) }.unwrap()
}

/// Asserts `outcome` is the error `status` and its message names `function`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(outcome: Result<T>, status: Status, function: &str) {
    let e: Error = outcome.expect_err(function);
    assert_eq!(e.status(), Some(status), "{}: {}", function, e);
    assert!(
        e.message().contains(function),
        "the message does not name {}: {}",
        function,
        e.message()
    );
}

#[test]
fn the_binding_checks_sizes_before_calling() {
    let stream = null_stream();
    let small = bogus_buffer(4);
    let eight_floats = [0f32; 8];
    assert_refused(
        stream.copy_to_device(&small, &eight_floats),
        Status::InvalidArgument,
        "cgc_memcpy_htod_async (dst)",
    );
    let mut host = [0u64; 1];
    // SAFETY: refused before any copy is enqueued.
    assert_refused(
        unsafe { stream.copy_to_host(&mut host, &small) },
        Status::InvalidArgument,
        "cgc_memcpy_dtoh_async (src)",
    );
    let large = bogus_buffer(64);
    assert_refused(
        stream.copy_device_to_device(&small, &large, 64),
        Status::InvalidArgument,
        "cgc_memcpy_dtod_async (dst)",
    );
    assert_refused(
        stream.copy_device_to_device(&large, &small, 64),
        Status::InvalidArgument,
        "cgc_memcpy_dtod_async (src)",
    );
    assert_refused(
        stream.memset_d8(&small, 1, 5),
        Status::InvalidArgument,
        "cgc_memset_d8_async",
    );
    assert_refused(
        stream.memset_d16(&small, 1, 3),
        Status::InvalidArgument,
        "cgc_memset_d16_async",
    );
    assert_refused(
        stream.memset_d32(&small, 1, 2),
        Status::InvalidArgument,
        "cgc_memset_d32_async",
    );
    assert_refused(
        stream.memset_d32(&small, 1, usize::MAX),
        Status::InvalidArgument,
        "cgc_memset_d32_async",
    );
    let two = bogus_buffer(2);
    assert_refused(
        stream.write_value32(&two, 1, 0),
        Status::InvalidArgument,
        "cgc_stream_write_value32",
    );
    assert_refused(
        stream.write_value64(&small, 1, 0),
        Status::InvalidArgument,
        "cgc_stream_write_value64",
    );
    assert_refused(
        stream.wait_value32(&two, 1, WaitCondition::Eq, 0),
        Status::InvalidArgument,
        "cgc_stream_wait_value32",
    );
    assert_refused(
        stream.wait_value64(&small, 1, WaitCondition::Geq, 0),
        Status::InvalidArgument,
        "cgc_stream_wait_value64",
    );
    let ops = [
        MemOp::WriteValue32 {
            address: &small,
            value: 1,
            flags: 0,
        },
        MemOp::WaitValue64 {
            address: &small,
            value: 1,
            condition: WaitCondition::Eq,
            flags: 0,
        },
    ];
    assert_refused(
        stream.batch_mem_op(&ops),
        Status::InvalidArgument,
        "cgc_stream_batch_mem_op (ops[1])",
    );
    for buffer in [small, large, two] {
        buffer.into_raw();
    }
}

#[test]
fn the_library_refuses_a_null_stream_by_name() {
    let stream = null_stream();
    let buffer = bogus_buffer(64);
    let floats = [1f32; 4];
    assert_refused(
        stream.copy_to_device(&buffer, &floats),
        Status::InvalidArgument,
        "cgc_memcpy_htod_async",
    );
    let mut back = [0f32; 4];
    // SAFETY: refused (NULL stream): nothing is enqueued.
    assert_refused(
        unsafe { stream.copy_to_host(&mut back, &buffer) },
        Status::InvalidArgument,
        "cgc_memcpy_dtoh_async",
    );
    assert_refused(
        stream.copy_device_to_device(&buffer, &buffer, 16),
        Status::InvalidArgument,
        "cgc_memcpy_dtod_async",
    );
    assert_refused(
        stream.memset_d8(&buffer, 0, 4),
        Status::InvalidArgument,
        "cgc_memset_d8_async",
    );
    assert_refused(
        stream.memset_d16(&buffer, 0, 4),
        Status::InvalidArgument,
        "cgc_memset_d16_async",
    );
    assert_refused(
        stream.memset_d32(&buffer, 0, 4),
        Status::InvalidArgument,
        "cgc_memset_d32_async",
    );
    assert_refused(
        stream.write_value32(&buffer, 1, 0),
        Status::InvalidArgument,
        "cgc_stream_write_value32",
    );
    assert_refused(
        stream.write_value64(&buffer, 1, 0),
        Status::InvalidArgument,
        "cgc_stream_write_value64",
    );
    assert_refused(
        stream.wait_value32(&buffer, 1, WaitCondition::Eq, 0),
        Status::InvalidArgument,
        "cgc_stream_wait_value32",
    );
    assert_refused(
        stream.wait_value64(&buffer, 1, WaitCondition::And, 0),
        Status::InvalidArgument,
        "cgc_stream_wait_value64",
    );
    assert_refused(
        stream.batch_mem_op(&[MemOp::FlushRemoteWrites]),
        Status::InvalidArgument,
        "cgc_stream_batch_mem_op",
    );
    assert_refused(
        stream.priority(),
        Status::InvalidArgument,
        "cgc_stream_priority",
    );
    assert_refused(stream.id(), Status::InvalidArgument, "cgc_stream_id");
    assert_refused(
        stream.device(),
        Status::InvalidArgument,
        "cgc_stream_device",
    );
    assert_refused(
        stream.native_context(),
        Status::InvalidArgument,
        "cgc_stream_device",
    );
    assert_refused(
        stream.copy_attributes_from(&null_stream()),
        Status::InvalidArgument,
        "cgc_stream_copy_attributes",
    );
    assert_refused(
        stream.set_access_policy(&AccessPolicy::persisting(&buffer, 0.5)),
        Status::InvalidArgument,
        "cgc_stream_set_access_policy",
    );
    assert_refused(
        stream.access_policy(),
        Status::InvalidArgument,
        "cgc_stream_get_access_policy",
    );
    buffer.into_raw();
}

#[test]
fn a_refused_host_function_is_dropped_once_and_never_runs() {
    /// Counts its drops: the closure owns one, so its drop is the closure's.
    struct CountDrops(Arc<AtomicUsize>);
    impl Drop for CountDrops {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (drops, runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let guard = CountDrops(Arc::clone(&drops));
    let ran = Arc::clone(&runs);
    let outcome = null_stream().launch_host_func(move || {
        let _owned = &guard;
        ran.fetch_add(1, Ordering::SeqCst);
    });
    assert_refused(outcome, Status::InvalidArgument, "cgc_launch_host_func");
    // The library called the release at once: the closure, and what it owned, are gone.
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        Arc::strong_count(&runs),
        1,
        "the closure's clone of `runs` was not dropped"
    );
}

#[test]
fn a_panic_in_dropping_a_host_function_is_caught() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("dropping a host function's state panics on purpose");
        }
    }
    let before = crate::host_function_panics();
    let state = PanicsOnDrop;
    // The release runs inside the failing call; the panic must stay in the binding.
    let outcome = null_stream().launch_host_func(move || {
        let _owned = &state;
    });
    assert_refused(outcome, Status::InvalidArgument, "cgc_launch_host_func");
    assert!(crate::host_function_panics() > before);
}

#[test]
fn host_memory_checks() {
    let ctx = null_context();
    // Too many elements to count in bytes: refused by the binding.
    assert_refused(
        HostBuffer::new(&ctx, usize::MAX, 0u64),
        Status::InvalidArgument,
        "cgc_host_alloc",
    );
    assert_refused(
        HostBuffer::new(&ctx, 16, 0u32),
        Status::InvalidArgument,
        "cgc_host_alloc",
    );
    assert_refused(
        HostBuffer::from_slice(&ctx, &[1u8, 2, 3]),
        Status::InvalidArgument,
        "cgc_host_alloc",
    );
    // No bytes: nothing to allocate, an empty slice, and nothing to free.
    let empty = HostBuffer::new(&ctx, 0, 7u32).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.bytes(), 0);
    empty.free().unwrap();
    let units = HostBuffer::new(&ctx, 5, ()).unwrap();
    assert_eq!(units.len(), 5);
    drop(units);

    let mut data = vec![0u32; 16];
    assert_refused(
        HostRegistration::new(&ctx, &mut data),
        Status::InvalidArgument,
        "cgc_host_register",
    );
    assert_refused(
        ctx.stream_priority_range(),
        Status::InvalidArgument,
        "cgc_stream_priority_range",
    );
}

#[test]
fn modules_and_kernels_checks() {
    let ctx = null_context();
    let ptx = std::ffi::CString::new(".version 7.0").unwrap();
    assert_refused(
        Module::from_ptx(&ctx, &ptx),
        Status::InvalidArgument,
        "cgc_module_load",
    );
    let module = Module::with_raw(ptr::null_mut(), loaded_api());
    assert_refused(
        module.function("scale_add"),
        Status::InvalidArgument,
        "cgc_module_get_function",
    );
    // A NUL inside the name: the binding refuses it, naming the call.
    assert_refused(
        module.function("scale\0add"),
        Status::InvalidArgument,
        "cgc_module_get_function",
    );
    let function = Function::with_raw(ptr::null_mut(), loaded_api());
    assert_refused(
        function.attribute(FunctionAttribute::NumRegs),
        Status::InvalidArgument,
        "cgc_function_get_attribute",
    );
    assert_refused(
        function.set_attribute(FunctionAttribute::MaxDynamicSharedSizeBytes, 0),
        Status::InvalidArgument,
        "cgc_function_set_attribute",
    );
    let n = 4u32;
    // SAFETY: refused (NULL function) before anything reads the arguments' values.
    assert_refused(
        unsafe { function.launch(&LaunchConfig::linear(4, 4), &[&n], &null_stream()) },
        Status::InvalidArgument,
        "cgc_launch_kernel",
    );
    // More arguments than fit on the stack take the heap path; still refused by name.
    let many: Vec<u32> = (0..40).collect();
    let args: Vec<&dyn KernelArg> = many.iter().map(|x| x as &dyn KernelArg).collect();
    // SAFETY: as above.
    assert_refused(
        unsafe { function.launch(&LaunchConfig::linear(4, 4), &args, &null_stream()) },
        Status::InvalidArgument,
        "cgc_launch_kernel",
    );
    assert_eq!(
        FunctionAttribute::MaxThreadsPerBlock.to_raw(),
        sys::CGC_FUNC_MAX_THREADS_PER_BLOCK
    );
    assert_eq!(
        FunctionAttribute::PreferredSharedMemoryCarveout.to_raw(),
        sys::CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT
    );
    drop(module);
}

#[test]
fn kernel_arguments_point_at_their_values() {
    let n = 4096u32;
    let x = -2.5f64;
    let buffer = bogus_buffer(16);
    let device_address = buffer.as_ptr();
    // SAFETY: each pointer is to a live value of the type read.
    unsafe {
        assert_eq!(*(n.kernel_param_ptr() as *const u32), 4096);
        assert_eq!(*(x.kernel_param_ptr() as *const f64), -2.5);
        assert_eq!(
            *(buffer.kernel_param_ptr() as *const *mut c_void),
            device_address
        );
        assert_eq!(
            *(device_address.kernel_param_ptr() as *const *mut c_void),
            device_address
        );
    }
    buffer.into_raw();
}

#[test]
fn launch_configs() {
    assert_eq!(LaunchConfig::linear(4096, 256).grid, [16, 1, 1]);
    assert_eq!(LaunchConfig::linear(4097, 256).grid, [17, 1, 1]);
    assert_eq!(LaunchConfig::linear(1, 256).block, [256, 1, 1]);
    // Rounding up does not overflow.
    assert_eq!(LaunchConfig::linear(u32::MAX, 1024).grid, [4_194_304, 1, 1]);
    assert_eq!(LaunchConfig::linear(u32::MAX, 1).grid, [u32::MAX, 1, 1]);
    // A zero block gives a zero grid, which the library refuses by name.
    assert_eq!(LaunchConfig::linear(10, 0).grid, [0, 1, 1]);
    assert_eq!(
        LaunchConfig::linear(10, 2)
            .with_shared_bytes(128)
            .shared_bytes,
        128
    );
}

#[test]
fn access_policies_and_memory_operations_in_c_form() {
    let buffer = bogus_buffer(1 << 20);
    let policy = AccessPolicy::persisting(&buffer, 0.6);
    let raw = policy.to_raw();
    assert_eq!(
        raw.struct_size,
        std::mem::size_of::<sys::cgc_access_policy_t>()
    );
    assert_eq!(
        (raw.base, raw.bytes, raw.hit_ratio),
        (buffer.as_ptr(), 1 << 20, 0.6)
    );
    assert_eq!(
        (raw.hit_property, raw.miss_property),
        (sys::CGC_ACCESS_PERSISTING, sys::CGC_ACCESS_STREAMING)
    );
    assert_eq!(AccessPolicy::from_raw(&raw).unwrap(), policy);
    assert_eq!(AccessPolicy::default().to_raw().bytes, 0);
    let unknown = sys::cgc_access_policy_t {
        miss_property: 7,
        ..raw
    };
    assert_refused(
        AccessPolicy::from_raw(&unknown),
        Status::Internal,
        "miss_property",
    );
    assert_eq!(
        AccessProperty::from_raw(sys::CGC_ACCESS_NORMAL),
        Some(AccessProperty::Normal)
    );

    let wait = MemOp::WaitValue32 {
        address: &buffer,
        value: 9,
        condition: WaitCondition::Eq,
        flags: WAIT_FLUSH,
    }
    .to_raw();
    assert_eq!(wait.kind, sys::CGC_MEM_OP_WAIT_VALUE_32);
    assert_eq!(wait.flags, sys::CGC_WAIT_EQ | sys::CGC_WAIT_FLUSH);
    assert_eq!((wait.address, wait.value), (buffer.as_ptr(), 9));
    let write = MemOp::WriteValue64 {
        address: &buffer,
        value: u64::MAX,
        flags: 0,
    }
    .to_raw();
    assert_eq!(
        (write.kind, write.flags, write.value),
        (sys::CGC_MEM_OP_WRITE_VALUE_64, 0, u64::MAX)
    );
    for (scope, flags) in [(BarrierScope::System, 0), (BarrierScope::Gpu, 1)] {
        let barrier = MemOp::Barrier { scope }.to_raw();
        assert_eq!(
            (barrier.kind, barrier.flags, barrier.address, barrier.value),
            (sys::CGC_MEM_OP_BARRIER, flags, ptr::null_mut(), 0)
        );
    }
    assert_eq!(
        (
            sys::CGC_BARRIER_SYSTEM,
            sys::CGC_BARRIER_GPU,
            sys::CGC_MEM_OP_BARRIER
        ),
        (0, 1, 6)
    );
    let flush = MemOp::FlushRemoteWrites.to_raw();
    assert_eq!(
        (flush.kind, flush.flags, flush.address),
        (sys::CGC_MEM_OP_FLUSH_REMOTE_WRITES, 0, ptr::null_mut())
    );
    assert_eq!(WaitCondition::Nor.to_raw(), sys::CGC_WAIT_NOR);
    buffer.into_raw();
}

fn null_graph() -> Graph {
    // Dropping it calls cgc_graph_destroy(NULL), which is refused and ignored.
    Graph {
        raw: ptr::null_mut(),
        api: loaded_api(),
    }
}

#[test]
fn per_node_updates_refuse_a_null_graph_by_name() {
    let mut graph = null_graph();
    assert_refused(
        graph.set_kernel_enabled(0, false),
        Status::InvalidArgument,
        "cgc_graph_kernel_node_set_enabled",
    );
    let (buffer, n) = (bogus_buffer(16), 4u32);
    // SAFETY: refused (NULL graph) before anything reads the arguments' values.
    assert_refused(
        unsafe { graph.set_kernel_args(1, &[&buffer, &n]) },
        Status::InvalidArgument,
        "cgc_graph_kernel_node_set_args",
    );
    // No arguments still pass an array (the library refuses a NULL one): the refusal is the
    // graph's, not "args is NULL".
    // SAFETY: as above.
    let e = unsafe { graph.set_kernel_args(0, &[]) }.expect_err("NULL graph");
    assert!(e.message().contains("graph"), "{}", e);
    assert!(!e.message().contains("args is NULL"), "{}", e);
    // More arguments than fit on the stack take the heap path; still refused by name.
    let many: Vec<u32> = (0..40).collect();
    let args: Vec<&dyn KernelArg> = many.iter().map(|x| x as &dyn KernelArg).collect();
    // SAFETY: as above.
    assert_refused(
        unsafe { graph.set_kernel_args(0, &args) },
        Status::InvalidArgument,
        "cgc_graph_kernel_node_set_args",
    );
    buffer.into_raw();
}

#[test]
fn a_refused_update_capture_runs_no_body() {
    let stream = null_stream();
    let mut graph = null_graph();
    let mut ran = false;
    let outcome = stream.capture_update(
        &mut graph,
        &CaptureOptions::new().with_mode(CaptureMode::ThreadLocal),
        |_| {
            ran = true;
            Ok(())
        },
    );
    assert_refused(outcome, Status::InvalidArgument, "cgc_capture_begin");
    assert!(!ran, "the body ran although the capture did not begin");
}

#[test]
fn a_graph_handle_has_one_owner() {
    // Memory that is no cgc object: the library refuses it as a graph after reading its first
    // word, so dropping the Graphs below destroys nothing.
    let not_a_graph: &'static mut [u64; 8] = Box::leak(Box::new([0x5a5a_5a5a_5a5a_5a5a; 8]));
    let raw = not_a_graph.as_mut_ptr() as sys::cgc_graph_t;
    let owner = Graph::adopt(raw, loaded_api()).expect("a handle no Graph owns");
    // What an update capture's end hands back from a call other than capture_update.
    assert!(Graph::adopt(raw, loaded_api()).is_none(), "a second owner of one handle");
    assert!(Graph::adopt(ptr::null_mut(), loaded_api()).is_none());
    drop(owner);
    let next = Graph::adopt(raw, loaded_api()).expect("the handle once its owner went");
    assert_refused(next.destroy(), Status::InvalidHandle, "cgc_graph_destroy");
    drop(Graph::adopt(raw, loaded_api()).expect("destroy gave the handle up"));
}

#[test]
fn update_fields_in_c_form() {
    // Plain options never update: the graph an update hands back is one a Graph owns already.
    assert!(CaptureOptions::default().to_raw().update.is_null());
    for (kind, raw) in [
        (GraphUpdate::None, sys::CGC_GRAPH_UPDATE_NONE),
        (GraphUpdate::InPlace, sys::CGC_GRAPH_UPDATE_IN_PLACE),
        (GraphUpdate::Reinstantiated, sys::CGC_GRAPH_UPDATE_REINSTANTIATED),
        (GraphUpdate::Unknown(7), 7),
    ] {
        assert_eq!(kind.to_raw(), raw);
        assert_eq!(GraphUpdate::from_raw(raw), kind);
    }
    assert_eq!((sys::CGC_GRAPH_UPDATE_IN_PLACE, sys::CGC_GRAPH_UPDATE_REINSTANTIATED), (1, 2));
    let info = GraphInfo::default();
    assert_eq!((info.update_count, info.last_update, info.last_update_result), (0, GraphUpdate::None, 0));
}

#[test]
fn a_refused_conditional_runs_no_body() {
    let stream = null_stream();
    let condition = bogus_buffer(4);
    let mut ran = false;
    let outcome: Result<u32> = stream.conditional(ConditionalKind::While, &condition, |_| {
        ran = true;
        Ok(1)
    });
    assert_refused(outcome, Status::InvalidArgument, "cgc_capture_conditional_begin");
    assert!(!ran, "the body ran although the node was not added");
    // A condition buffer smaller than a u32 is the binding's refusal, before the library.
    let small = bogus_buffer(2);
    assert_refused(
        stream.conditional(ConditionalKind::If, &small, |_| Ok(())),
        Status::InvalidArgument,
        "cgc_capture_conditional_begin (condition)",
    );
    // SAFETY: refused (NULL stream) before anything reads the address.
    let outcome = unsafe {
        stream.conditional_raw(ConditionalKind::If, 0x10000 as *const u32, |_| -> Result<()> {
            panic!("the body ran although the node was not added")
        })
    };
    assert_refused(outcome, Status::InvalidArgument, "cgc_capture_conditional_begin");
    condition.into_raw();
    small.into_raw();
}

#[test]
fn conditional_kinds_in_c_form() {
    for (kind, raw) in [
        (ConditionalKind::If, sys::CGC_CONDITIONAL_IF),
        (ConditionalKind::While, sys::CGC_CONDITIONAL_WHILE),
        (ConditionalKind::Switch, sys::CGC_CONDITIONAL_SWITCH),
    ] {
        assert_eq!(kind.to_raw(), raw);
        assert_eq!(ConditionalKind::from_raw(raw), Some(kind));
    }
    assert_eq!(ConditionalKind::from_raw(3), None);
    assert_eq!((sys::CGC_CONDITIONAL_IF, sys::CGC_CONDITIONAL_WHILE), (0, 1));
}

#[test]
fn the_1_3_constants_are_the_headers() {
    assert_eq!(sys::CGC_CONDITIONAL_SWITCH, 2);
    assert_eq!(crate::CONDITIONAL_BODY_SETS_CONDITION, 1);
    assert_eq!(crate::LOOP_EAGER_ITERATIONS, 65536);
}

#[test]
fn the_crate_is_written_against_1_6() {
    assert_eq!((sys::CGC_VERSION_MINOR, sys::CGC_VERSION), (6, 0x1_06_00));
    assert_eq!(env!("CARGO_PKG_VERSION"), "1.6.0", "the crate's version is the ABI version it wraps");
}

fn null_pool() -> Pool {
    // Dropping it calls cgc_pool_release(NULL), which is refused and ignored.
    Pool {
        raw: ptr::null_mut(),
        api: loaded_api(),
    }
}

/// 1.4's adoption of a capture cgc did not begin, through the methods a program calls: a NULL
/// pool is refused by name before the driver is needed (so also here, without one), whatever
/// the stream; so is a block cgc did not hand out for record_stream_native.
#[test]
fn adopted_captures_refuse_a_null_pool_and_a_foreign_block_by_name() {
    let pool = null_pool();
    for native in [ptr::null_mut(), 0x2 as *mut c_void] {
        // SAFETY: null and cudaStreamPerThread (0x2) are documented streams; the NULL pool is
        // refused before the stream is looked at.
        assert_refused(unsafe { pool.adopt_capture(native) }, Status::InvalidArgument, "cgc_pool_adopt_capture");
    }
    assert_refused(pool.adopt_stream_capture(&null_stream()), Status::InvalidArgument, "cgc_pool_adopt_capture");
    assert_refused(pool.end_adopted_capture(), Status::InvalidArgument, "cgc_pool_end_adopted_capture");
    let block = bogus_buffer(16);
    // SAFETY: as above; the block is refused (not a live cgc_malloc block) before the stream.
    let e = unsafe { block.record_stream_native(ptr::null_mut()) }.expect_err("a block cgc did not hand out");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_record_stream_native"), "{}", e);
    assert!(e.message().contains("not a live allocation"), "{}", e);
    block.into_raw();
    // A NULL block (what DeviceBuffer::alloc gives for 0 bytes) too.
    // SAFETY: a NULL block is never freed (cgc_free(NULL) is a no-op).
    let zero = unsafe { DeviceBuffer::from_raw(ptr::null_mut(), 0) }.unwrap();
    // SAFETY: refused on the NULL pointer before the stream is looked at.
    assert_refused(unsafe { zero.record_stream_native(ptr::null_mut()) }, Status::InvalidArgument,
                   "cgc_record_stream_native");
}

/// 1.6: the memory snapshot of a NULL context is refused by the library, naming the call; the
/// block states are the header's, and an unknown one is kept.
#[test]
fn memory_snapshot_of_a_null_context_is_refused_by_name() {
    assert_refused(null_context().memory_snapshot(), Status::InvalidArgument, "cgc_memory_snapshot");
    for (state, raw) in [
        (BlockState::Free, sys::CGC_BLOCK_STATE_FREE),
        (BlockState::Allocated, sys::CGC_BLOCK_STATE_ALLOCATED),
        (BlockState::Waiting, sys::CGC_BLOCK_STATE_WAITING),
        (BlockState::Unknown(9), 9),
    ] {
        assert_eq!(BlockState::from_raw(raw), state);
        assert_eq!(state.to_raw(), raw);
    }
    assert_eq!((sys::CGC_BLOCK_STATE_FREE, sys::CGC_BLOCK_STATE_ALLOCATED, sys::CGC_BLOCK_STATE_WAITING), (0, 1, 2));
    assert_eq!(PoolId::from_raw(ptr::null_mut()), None);
    let pool = null_pool();
    let fake = 0x40 as sys::cgc_pool_t;
    assert_eq!(PoolId::from_raw(fake).map(PoolId::as_raw), Some(fake));
    assert_ne!(PoolId::from_raw(fake), Some(PoolId::of(&pool)));
}

/// 1.6: a claim from a NULL pool is refused by the library, naming the call and the pool, before
/// it looks at the range (so whatever the address and size), and hands out no block; one from a
/// pointer that is no cgc pool is refused as an invalid handle.
#[test]
fn pool_claim_refuses_a_null_and_a_foreign_pool_by_name() {
    let pool = null_pool();
    for (ptr, bytes) in [(0x10000usize, 512usize), (0x10000, 0), (0x10001, 512), (0, 512), (0x10000, usize::MAX)] {
        let e = pool.claim(ptr as *mut c_void, bytes).expect_err("a NULL pool");
        assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
        assert!(e.message().contains("cgc_pool_claim"), "{}", e);
        assert!(e.message().contains("pool is NULL"), "{}", e);
    }
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = Pool {
        raw: not_an_object.as_mut_ptr() as sys::cgc_pool_t,
        api: loaded_api(),
    };
    assert_refused(foreign.claim(0x10000 as *mut c_void, 512), Status::InvalidHandle, "cgc_pool_claim");
    // Not released: the library would only refuse it (it holds no reference of ours).
    std::mem::forget(foreign);
}

/// 1.6: a pool at fixed addresses on a NULL context is refused by the library, naming the call
/// and the context, before it looks at the range (so whatever the base and capacity: null,
/// unaligned, 0) or needs the driver; a context pointer that is no cgc context is refused as an
/// invalid handle.
#[test]
fn pool_create_at_refuses_a_null_and_a_foreign_context_by_name() {
    const BASE: usize = 0x6400_0000_0000;
    let ctx = null_context();
    for (base, capacity) in [(BASE, 64usize << 20), (BASE + 4096, 64 << 20), (0, 64 << 20), (BASE, 0),
                             (BASE, usize::MAX)] {
        let e = Pool::create_at(&ctx, base as *mut c_void, capacity).expect_err("a NULL context");
        assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
        assert!(e.message().contains("cgc_pool_create_at"), "{}", e);
        assert!(e.message().contains("ctx is NULL"), "{}", e);
    }
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = Context {
        raw: not_an_object.as_mut_ptr() as sys::cgc_context_t,
        api: loaded_api(),
        device: 0,
    };
    assert_refused(Pool::create_at(&foreign, BASE as *mut c_void, 64 << 20), Status::InvalidHandle,
                   "cgc_pool_create_at");
    // Not destroyed: the library would only refuse it (it is no context of its).
    std::mem::forget(foreign);
}

/// 1.6: saving refuses no graphs and a NULL graph (INVALID_ARGUMENT) and a pointer that is no
/// cgc graph (INVALID_HANDLE) by name, before it needs the driver; bytes that are no saved buffer
/// are CGC_ERROR_SAVED_MISMATCH, also for a restore, which reads them first; adding a module image
/// on a NULL context is refused by the library, a key with a NUL byte by the binding.
#[test]
fn saved_graphs_refuse_bad_arguments_by_name() {
    let graph = null_graph();
    assert_refused(crate::save_graphs(&[], &[]), Status::InvalidArgument, "cgc_graphs_save");
    let e = crate::save_graphs(&[&graph], &[]).expect_err("a NULL graph");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_graphs_save") && e.message().contains("graphs[0]"), "{}", e);
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign_graph = Graph {
        raw: not_an_object.as_mut_ptr() as sys::cgc_graph_t,
        api: loaded_api(),
    };
    let pool = null_pool();
    assert_refused(crate::save_graphs(&[&foreign_graph], &[]), Status::InvalidHandle, "cgc_graphs_save");
    // The graphs are checked before the pools.
    assert_refused(crate::save_graphs(&[&foreign_graph], &[&pool]), Status::InvalidHandle, "cgc_graphs_save");
    // Not destroyed: the library would only refuse it (it is no graph of its).
    std::mem::forget(foreign_graph);

    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 73 + 5) as u8).collect();
    for data in [&garbage[..], &garbage[..3], &[][..], &[0u8; 64][..]] {
        assert_refused(crate::SavedInfo::read(data), Status::SavedMismatch, "cgc_saved_info");
    }
    let ctx = null_context();
    assert_refused(ctx.restore_graphs(&garbage), Status::SavedMismatch, "cgc_saved_info");
    assert_refused(ctx.add_module_image("cgc-rust-test", &garbage), Status::InvalidArgument, "cgc_module_add_image");
    let e = ctx.add_module_image("a\0b", &garbage).expect_err("a key with a NUL byte");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_module_add_image") && e.message().contains("NUL"), "{}", e);
}

/// 1.6: a verifying save: SaveOptions::with_verify sets the header's CGC_SAVE_VERIFY and nothing
/// else (the pools are save_graphs_with's parameter), and a save with it refuses no graphs, a NULL
/// graph and a pointer that is no cgc graph by name as one without does: the library takes the
/// flag and checks the graphs next, before it needs the driver.
#[test]
fn a_verifying_save_passes_the_headers_flag_and_refuses_as_a_save_does() {
    assert_eq!(sys::CGC_SAVE_VERIFY, 1);
    assert!(!SaveOptions::new().verify);
    let raw = SaveOptions::new().to_raw();
    assert_eq!((raw.struct_size, raw.n_pools, raw.flags), (std::mem::size_of::<sys::cgc_save_options_t>(), 0, 0));
    assert!(raw.pools.is_null());
    let raw = SaveOptions::new().with_verify(true).to_raw();
    assert_eq!((raw.struct_size, raw.n_pools, raw.flags), (std::mem::size_of::<sys::cgc_save_options_t>(), 0, 1));
    assert!(raw.pools.is_null());
    assert_eq!(SaveOptions::new().with_verify(true).with_verify(false), SaveOptions::default());

    let verify = SaveOptions::new().with_verify(true);
    assert_refused(crate::save_graphs_with(&[], &[], &verify), Status::InvalidArgument, "cgc_graphs_save");
    let graph = null_graph();
    let e = crate::save_graphs_with(&[&graph], &[], &verify).expect_err("a NULL graph");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_graphs_save") && e.message().contains("graphs[0]"), "{}", e);
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign_graph = Graph {
        raw: not_an_object.as_mut_ptr() as sys::cgc_graph_t,
        api: loaded_api(),
    };
    let pool = null_pool();
    for pools in [&[][..], &[&pool][..]] {
        for options in [SaveOptions::new(), verify] {
            let e = crate::save_graphs_with(&[&foreign_graph], pools, &options).expect_err("a foreign graph");
            assert_eq!(e.status(), Some(Status::InvalidHandle), "{:?}: {}", options, e);
            assert!(e.message().contains("cgc_graphs_save") && e.message().contains("graphs[0]"), "{}", e);
        }
    }
    // Not destroyed: the library would only refuse it (it is no graph of its).
    std::mem::forget(foreign_graph);
}

/// 1.6: families: share_executable refuses a NULL graph or leader (INVALID_ARGUMENT) and a
/// pointer that is no cgc graph (INVALID_HANDLE) by name, the graph checked before the leader,
/// before it needs the driver; the families flag of a restore is the header's, the threads
/// option goes to the struct as given, and a restore with them reads the bytes first as one
/// without does.
#[test]
fn share_executable_refuses_null_and_foreign_graphs_by_name() {
    let null = null_graph();
    let mut not_an_object = [0x5a5a_5a5a_5a5a_5a5a_u64; 32];
    let foreign = Graph {
        raw: not_an_object.as_mut_ptr() as sys::cgc_graph_t,
        api: loaded_api(),
    };
    let function = "cgc_graph_share_executable";
    assert_refused(null.share_executable(&null), Status::InvalidArgument, function);
    assert_refused(null.share_executable(&foreign), Status::InvalidArgument, function);
    assert_refused(foreign.share_executable(&null), Status::InvalidHandle, function);
    assert_refused(foreign.share_executable(&foreign), Status::InvalidHandle, function);
    // The refused handle is named (the graph: it is checked first).
    let e = null.share_executable(&foreign).expect_err("a NULL graph");
    assert!(e.message().contains("graph is NULL"), "{}", e);
    let e = foreign.share_executable(&null).expect_err("a foreign graph");
    assert!(e.message().contains("graph (0x"), "{}", e);
    // Not destroyed: the library would only refuse it (it is no graph of its).
    std::mem::forget(foreign);

    let info = GraphInfo::default();
    assert_eq!((info.family_size, info.family_result), (0, 0));
    assert_eq!(sys::CGC_RESTORE_FAMILIES, 1);
    assert_eq!(RestoreOptions::new().to_raw().flags, 0);
    let raw = RestoreOptions::new().with_families(true).to_raw();
    assert_eq!((raw.struct_size, raw.flags), (std::mem::size_of::<sys::cgc_restore_options_t>(), 1));
    assert_eq!(RestoreOptions::new().with_families(true).with_families(false), RestoreOptions::default());
    // threads: 0 (cgc chooses) by default, passed as given (the library refuses more than 64).
    assert_eq!((RestoreOptions::new().threads, RestoreOptions::new().to_raw().threads), (0, 0));
    let raw = RestoreOptions::new().with_families(true).with_threads(3).to_raw();
    assert_eq!((raw.flags, raw.threads), (1, 3));
    assert_eq!(RestoreOptions::new().with_threads(65).to_raw().threads, 65);
    assert_eq!(RestoreOptions::new().with_threads(2).with_threads(0), RestoreOptions::default());
    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 73 + 5) as u8).collect();
    let ctx = null_context();
    assert_refused(ctx.restore_graphs_with(&garbage, &RestoreOptions::new().with_families(true)),
                   Status::SavedMismatch, "cgc_saved_info");
    assert_refused(ctx.restore_graphs_with(&garbage, &RestoreOptions::new().with_threads(1)),
                   Status::SavedMismatch, "cgc_saved_info");
    // Without room for the generators, whatever the options (the graphs alone hold them);
    // restore_graphs_with_generators reads the count first, as the plain restore does.
    let raw = RestoreOptions::new().with_families(true).with_threads(2).to_raw();
    assert!(raw.generators.is_null() && raw.n_generators == 0);
    let zeroed = sys::cgc_restore_options_t::default();
    assert!(zeroed.generators.is_null() && (zeroed.struct_size, zeroed.n_generators) == (0, 0));
    assert_refused(ctx.restore_graphs_with_generators(&garbage, &RestoreOptions::new()),
                   Status::SavedMismatch, "cgc_saved_info");
}

/// 1.6's statuses of saved graphs are the header's, in code order after INTERNAL.
#[test]
fn the_saved_graph_statuses_are_the_headers() {
    assert_eq!(Status::ALL.len(), 18);
    assert_eq!(&Status::ALL[15..], &[Status::Internal, Status::NotSavable, Status::SavedMismatch]);
    for (status, raw, name) in [
        (Status::NotSavable, sys::CGC_ERROR_NOT_SAVABLE, "CGC_ERROR_NOT_SAVABLE"),
        (Status::SavedMismatch, sys::CGC_ERROR_SAVED_MISMATCH, "CGC_ERROR_SAVED_MISMATCH"),
    ] {
        assert_eq!((status.to_raw(), Status::from_raw(raw), status.c_name()), (raw, status, name));
        assert!(status.description().unwrap().starts_with(name));
    }
    assert_eq!(Status::from_raw(18), Status::Unknown(18));
}

#[test]
fn the_1_5_memory_kinds_are_the_headers() {
    let kinds = [NcclMemory::Plain, NcclMemory::Registered, NcclMemory::Symmetric];
    let raw: Vec<i32> = kinds.iter().map(|k| k.to_raw()).collect();
    assert_eq!(raw, [0, 1, 2]);
    assert_eq!(
        (sys::CGC_NCCL_MEMORY_PLAIN, sys::CGC_NCCL_MEMORY_REGISTERED, sys::CGC_NCCL_MEMORY_SYMMETRIC),
        (0, 1, 2)
    );
    for kind in kinds {
        assert_eq!(NcclMemory::from_raw(kind.to_raw()), Some(kind));
    }
    assert_eq!(NcclMemory::from_raw(3), None);
    assert_eq!(NcclMemory::from_raw(-1), None);
    // Ordered worst first, as the library falls back: got <= wanted.
    assert!(NcclMemory::Plain < NcclMemory::Registered && NcclMemory::Registered < NcclMemory::Symmetric);
}

/// 1.5's NCCL pools and eager allocation from a pool, through the methods a program calls: a
/// NULL pool or communicator is refused by name before the driver is needed (the communicator
/// by NCCL's absence where there is no NCCL); a refused release of a NULL pool hands nothing back.
#[test]
fn nccl_pools_and_pool_alloc_refuse_null_handles_by_name() {
    let pool = null_pool();
    for bytes in [0, 512, usize::MAX] {
        assert_refused(pool.alloc(bytes, &null_stream()), Status::InvalidArgument, "cgc_pool_malloc");
    }
    let e = pool.alloc(512, &null_stream()).expect_err("a NULL pool");
    assert!(e.message().contains("pool is NULL"), "{}", e);

    let comm = Comm::null_for_tests(loaded_api());
    for wanted in [NcclMemory::Plain, NcclMemory::Registered, NcclMemory::Symmetric] {
        let e = Pool::nccl(&comm, 1 << 20, wanted).expect_err("a NULL communicator");
        assert!(
            matches!(e.status(), Some(Status::InvalidArgument) | Some(Status::NcclUnavailable)),
            "{}",
            e
        );
        assert!(e.message().contains("cgc_nccl_pool_create"), "{}", e);
    }

    match null_pool().try_release() {
        Err((e, None)) => {
            assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
            assert!(e.message().contains("cgc_pool_release"), "{}", e);
        }
        other => panic!("try_release of a NULL pool: {:?}", other),
    }
}

#[test]
fn a_refused_node_with_bodies_runs_no_closure() {
    let stream = null_stream();
    let condition = bogus_buffer(4);
    let mut ran = false;
    let outcome: Result<u32> = stream.conditional_bodies(ConditionalKind::Switch, &condition, 3, 0, |_| {
        ran = true;
        Ok(1)
    });
    assert_refused(outcome, Status::InvalidArgument, "cgc_capture_conditional_begin_bodies");
    assert!(!ran, "the closure ran although the node was not added");
    // The binding's own refusals, before the library: a condition smaller than a u32, and more
    // bodies than a node can have (no vector of that many handles is made).
    let small = bogus_buffer(2);
    assert_refused(
        stream.conditional_bodies(ConditionalKind::If, &small, 2, 0, |_| Ok(())),
        Status::InvalidArgument,
        "cgc_capture_conditional_begin_bodies (condition)",
    );
    let e = stream
        .conditional_bodies(ConditionalKind::Switch, &condition, usize::MAX, 0, |_| Ok(()))
        .expect_err("usize::MAX bodies");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("cgc_capture_conditional_begin_bodies: n_bodies is"), "{}", e);
    // SAFETY: refused (NULL stream) before anything reads the address.
    let outcome = unsafe {
        stream.conditional_bodies_raw(
            ConditionalKind::While,
            0x10000 as *const u32,
            1,
            crate::CONDITIONAL_BODY_SETS_CONDITION,
            |_| -> Result<()> { panic!("the closure ran although the node was not added") },
        )
    };
    assert_refused(outcome, Status::InvalidArgument, "cgc_capture_conditional_begin_bodies");
    condition.into_raw();
    small.into_raw();
}

// ---- the ending of a node's bodies, with fake bodies ---------------------------------------------
//
// Bodies over fake handles (0x1000, 0x2000, 0x3000), whose ends a function standing in for
// cgc_capture_conditional_end records; the one of 0x2000 fails, as an end the library refuses.

// The handles the stand-in was given, in order. One test at a time uses it (FAKE_BODIES_LOCK).
static ENDED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static FAKE_BODIES_LOCK: Mutex<()> = Mutex::new(());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    // A failed test poisons the lock; the next one must still run.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

unsafe extern "C" fn record_end(body: sys::cgc_stream_t) -> sys::cgc_status_t {
    lock(&ENDED).push(body as usize);
    if body as usize == 0x2000 {
        sys::CGC_ERROR_INVALID_STATE
    } else {
        sys::CGC_SUCCESS
    }
}

fn fake_bodies() -> ConditionalBodies {
    lock(&ENDED).clear();
    let raw = vec![0x1000 as sys::cgc_stream_t, 0x2000 as _, 0x3000 as _];
    ConditionalBodies::with_end(loaded_api(), raw, 77, record_end)
}

fn ended() -> Vec<usize> {
    lock(&ENDED).clone()
}

const EACH_ONCE_THE_LAST_FIRST: [usize; 3] = [0x3000, 0x2000, 0x1000];

#[test]
fn every_body_is_ended_once_the_last_first() {
    let _serial = lock(&FAKE_BODIES_LOCK);
    let outcome = run_bodies(fake_bodies(), |bodies| {
        assert_eq!((bodies.len(), bodies.handle()), (3, 77));
        assert_eq!(bodies[1].as_raw() as usize, 0x2000, "bodies[i] is body i");
        assert!(bodies.iter().all(Stream::is_borrowed));
        assert!(ended().is_empty(), "no body ends while the closure runs");
        Ok(5)
    });
    assert_eq!(ended(), EACH_ONCE_THE_LAST_FIRST, "ends go on past a failing one");
    let e = outcome.expect_err("the failed end is reported");
    assert_eq!(e.status(), Some(Status::InvalidState), "{}", e);
}

#[test]
fn the_closures_error_wins_and_every_body_is_still_ended() {
    let _serial = lock(&FAKE_BODIES_LOCK);
    let outcome: Result<()> = run_bodies(fake_bodies(), |_| Err(Error::new(Status::Internal, "the closure's own failure")));
    assert_eq!(outcome.unwrap_err().message(), "the closure's own failure");
    assert_eq!(ended(), EACH_ONCE_THE_LAST_FIRST);
}

#[test]
fn a_panicking_closure_ends_every_body_while_unwinding() {
    let _serial = lock(&FAKE_BODIES_LOCK);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        run_bodies(fake_bodies(), |_| -> Result<()> { panic!("in the bodies") })
    }));
    assert!(panicked.is_err());
    assert_eq!(ended(), EACH_ONCE_THE_LAST_FIRST);
}

#[test]
fn ended_bodies_are_not_ended_again_when_dropped() {
    let _serial = lock(&FAKE_BODIES_LOCK);
    let mut bodies = fake_bodies();
    let _ = bodies.end_all();
    drop(bodies);
    assert_eq!(ended(), EACH_ONCE_THE_LAST_FIRST);
}
