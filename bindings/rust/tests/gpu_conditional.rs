//! GPU tests of conditional nodes: IF and WHILE (1.2); IF/ELSE, SWITCH, loops whose kernels set
//! the condition, allocations and generator draws inside bodies (1.3). Each prints "skipping:
//! <reason>" and returns where cgc finds no GPU, or the driver is too old for what it tests
//! (CUDA 12.4 for conditional nodes, 12.8 for IF/ELSE and SWITCH). Find libcgc through
//! CGC_LIBRARY. They run one at a time (common::serial), as those of gpu.rs.

mod common;

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cgc::{
    CaptureOptions, ConditionalKind, Context, DeviceBuffer, Error, Function, HostBuffer, LaunchConfig, Module, Pool,
    Rng, Status, Stream, CONDITIONAL_BODY_SETS_CONDITION, LOOP_EAGER_ITERATIONS,
};
use common::{assert_error, gpu, read_back, serial};

/// The bindings' shared test kernels (tests/kernels/binding_tests.ptx, which the Go and Python
/// tests load too; the file says what each does): the conditional tests use cond_init, cond_step
/// and cond_count over a counter, a bound and a condition, and cond_append. Built into the test
/// binary, which the GPU bundle carries without the file.
const BINDING_TESTS_PTX: &str = include_str!("../../../tests/kernels/binding_tests.ptx");

/// One `u32` of device memory, set to `value`.
fn word(ctx: &Context, stream: &Stream, value: u32) -> DeviceBuffer {
    let w = DeviceBuffer::alloc(ctx, 4, stream).unwrap();
    stream.memset_d32(&w, value, 1).unwrap();
    w
}

/// Whether the driver has conditional nodes (CUDA 12.4): begin outside a capture says
/// NotSupported on an older driver (checked before whether the stream captures), else
/// InvalidState. Prints why the test is skipped otherwise.
fn conditionals_supported(test: &str, stream: &Stream, condition: &DeviceBuffer) -> bool {
    let e = stream
        .conditional(ConditionalKind::If, condition, |_| -> cgc::Result<()> {
            panic!("a body began outside a capture")
        })
        .expect_err("not capturing");
    if e.status() == Some(Status::NotSupported) {
        println!("skipping: {}: conditional nodes need a driver for CUDA 12.4: {}", test, e);
        return false;
    }
    assert_error(&e, Status::InvalidState, "cgc_capture_conditional_begin");
    true
}

fn launch1(f: &Function<'_>, args: &[&dyn cgc::KernelArg], stream: &Stream) -> cgc::Result<()> {
    // SAFETY: the callers pass the kernel's parameters (unsigned* each) as buffers of one u32
    // that outlive the graphs.
    unsafe { f.launch(&LaunchConfig::linear(1, 1), args, stream) }
}

#[test]
fn a_while_loop_counts_on_the_device_to_a_bound_given_per_replay() {
    const TEST: &str = "a_while_loop_counts_on_the_device_to_a_bound_given_per_replay";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (counter, n, more) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &more) {
        return;
    }
    let ptx = CString::new(BINDING_TESTS_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let (init, step) = (module.function("cond_init").unwrap(), module.function("cond_step").unwrap());
    // Page-locked: the bound, copied in by the graph at every replay.
    let mut bound = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let mut lent = None;
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&n, &bound)?;
            launch1(&init, &[&counter, &n, &more], s)?;
            let got = s.conditional(ConditionalKind::While, &more, |body| {
                lent = Some(body.as_raw());
                assert_ne!(body.as_raw(), s.as_raw(), "the body is a stream of its own");
                launch1(&step, &[&counter, &n, &more], body)?;
                Ok(42)
            })?;
            assert_eq!(got, 42, "the body's value");
            Ok(())
        })
        .expect("capture of the loop");
    assert!(lent.is_some());
    assert_eq!(graph.info().unwrap().nodes.conditional, 1);
    for b in [3u32, 17, 0, 1, 1000] {
        bound[0] = b;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(read_back::<u32>(&stream, &counter, 1), [b], "the loop ran to this replay's bound");
    }
    graph.destroy().unwrap();
    module.unload().unwrap();
    bound.free().unwrap();
    for buffer in [counter, n, more] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn an_if_skips_its_body_when_the_condition_is_zero() {
    const TEST: &str = "an_if_skips_its_body_when_the_condition_is_zero";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, hits, after) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &condition) {
        return;
    }
    let ptx = CString::new(BINDING_TESTS_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let count = module.function("cond_count").unwrap();
    let mut run = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&condition, &run)?; // the condition itself, per replay
            s.conditional(ConditionalKind::If, &condition, |body| launch1(&count, &[&hits], body))?;
            launch1(&count, &[&after], s) // after the node: runs at every replay
        })
        .expect("capture of the IF");
    let mut want = 0;
    for (replay, r) in [1u32, 0, 0, 1, 1].into_iter().enumerate() {
        run[0] = r;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        want += r;
        assert_eq!(read_back::<u32>(&stream, &hits, 1), [want], "replay {}", replay);
        assert_eq!(read_back::<u32>(&stream, &after, 1), [replay as u32 + 1], "replay {}", replay);
    }
    graph.destroy().unwrap();
    module.unload().unwrap();
    run.free().unwrap();
    for buffer in [condition, hits, after] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn a_body_refuses_a_host_function_and_is_ended_when_its_closure_fails() {
    const TEST: &str = "a_body_refuses_a_host_function_and_is_ended_when_its_closure_fails";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, never, hits) = (word(&ctx, &stream, 1), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &condition) {
        return;
    }
    let ptx = CString::new(BINDING_TESTS_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let count = module.function("cond_count").unwrap();
    stream.synchronize().unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.conditional(ConditionalKind::If, &condition, |body| {
                let e = body.launch_host_func(|| {}).expect_err("a host function in a body");
                assert_error(&e, Status::CaptureUnsupported, "cgc_launch_host_func");
                // What a body may hold still works: a set and a kernel.
                body.memset_d32(&hits, 7, 1)?;
                launch1(&count, &[&hits], body)
            })?;
            // A closure that fails: its error comes back and the body is ended (else the
            // capture could not end below). Its condition stays 0: it never runs.
            let e = s
                .conditional(ConditionalKind::While, &never, |_| -> cgc::Result<()> {
                    Err(Error::new(Status::Internal, "the body's own failure"))
                })
                .expect_err("the body's error");
            assert_eq!(e.message(), "the body's own failure");
            // A closure that panics: the body is ended while unwinding.
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                s.conditional(ConditionalKind::If, &never, |_| -> cgc::Result<()> { panic!("in the body") })
            }));
            assert!(panicked.is_err());
            Ok(())
        })
        .expect("the capture ends: no body is left open");
    assert_eq!(graph.info().unwrap().nodes.conditional, 3);
    graph.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read_back::<u32>(&stream, &hits, 1), [8], "the body's set (7) and kernel (+1) ran");
    // SWITCH has several bodies: the one-body form refuses it, pointing at the other.
    let e = stream
        .conditional(ConditionalKind::Switch, &condition, |_| -> cgc::Result<()> {
            panic!("a SWITCH began with one body")
        })
        .expect_err("SWITCH with one body");
    assert_error(&e, Status::InvalidArgument, "cgc_capture_conditional_begin_bodies");
    // A kind the library does not know, with a live stream (the raw table: the enum has none).
    let api = cgc::api().unwrap();
    let mut body = std::ptr::null_mut();
    // SAFETY: live stream and buffer, valid out pointer; refused before anything is captured.
    let st = unsafe {
        (api.cgc_capture_conditional_begin)(stream.as_raw(), 7, condition.as_ptr() as *const u32, &mut body)
    };
    assert_eq!(Status::from_raw(st), Status::InvalidArgument);
    assert!(body.is_null());
    graph.destroy().unwrap();
    module.unload().unwrap();
    for buffer in [condition, never, hits] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.3: nodes with all their bodies ------------------------------------------------------------

/// The shared loop kernel of the examples, `loop_continue(u64 handle, unsigned* counter, const
/// unsigned* n)`: counts one iteration and sets the WHILE node's condition to `counter < *n`
/// through its handle (examples/kernels/loop_continue.cu). Built into the test binary.
const LOOP_CONTINUE_PTX: &str = include_str!("../../../examples/kernels/loop_continue.ptx");

/// Whether the driver has IF/ELSE and SWITCH (CUDA 12.8): a two-body IF begun outside a capture
/// says NotSupported on an older driver (the library checks the driver before whether the
/// stream captures), else InvalidState. Prints why the test is skipped otherwise.
fn else_and_switch_supported(test: &str, stream: &Stream, condition: &DeviceBuffer) -> bool {
    let e = stream
        .conditional_bodies(ConditionalKind::If, condition, 2, 0, |_| -> cgc::Result<()> {
            panic!("bodies began outside a capture")
        })
        .expect_err("not capturing");
    if e.status() == Some(Status::NotSupported) {
        println!("skipping: {}: IF/ELSE and SWITCH need a driver for CUDA 12.8: {}", test, e);
        return false;
    }
    assert_error(&e, Status::InvalidState, "cgc_capture_conditional_begin_bodies");
    true
}

#[test]
fn begin_bodies_checks_kind_count_and_flags_on_a_live_stream() {
    const TEST: &str = "begin_bodies_checks_kind_count_and_flags_on_a_live_stream";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, hits) = (word(&ctx, &stream, 1), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &condition) {
        return;
    }
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            use ConditionalKind::{If, Switch, While};
            for (kind, n_bodies, flags, says) in [
                (If, 3, 0, "n_bodies is 3"),
                (While, 2, 0, "n_bodies is 2"),
                (Switch, 0, 0, "n_bodies is 0"),
                (Switch, 257, 0, "n_bodies is 257"),
                (If, 1, CONDITIONAL_BODY_SETS_CONDITION, "WHILE"),
                (While, 1, 0x80, "flags 0x80"),
            ] {
                let e = s
                    .conditional_bodies(kind, &condition, n_bodies, flags, |_| -> cgc::Result<()> {
                        panic!("a refused node's bodies ran")
                    })
                    .expect_err(says);
                assert_error(&e, Status::InvalidArgument, "cgc_capture_conditional_begin_bodies");
                assert!(e.message().contains(says), "{}", e);
            }
            // Nothing was added: the capture is intact and goes on.
            s.memset_d32(&hits, 3, 1)
        })
        .expect("the capture ends");
    assert_eq!(graph.info().unwrap().nodes.conditional, 0);
    graph.launch(&stream).unwrap();
    assert_eq!(read_back::<u32>(&stream, &hits, 1), [3]);
    graph.destroy().unwrap();
    for buffer in [condition, hits] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn an_if_else_runs_one_of_its_two_bodies_per_replay() {
    const TEST: &str = "an_if_else_runs_one_of_its_two_bodies_per_replay";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, never, which) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !else_and_switch_supported(TEST, &stream, &condition) {
        return;
    }
    let mut run = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&condition, &run)?; // the condition itself, per replay
            let got = s.conditional_bodies(ConditionalKind::If, &condition, 2, 0, |bodies| {
                assert_eq!(bodies.len(), 2);
                assert_ne!(bodies.handle(), 0, "the node's handle");
                assert_ne!(bodies[0].as_raw(), bodies[1].as_raw(), "a stream per body");
                assert!(bodies.iter().all(|b| b.as_raw() != s.as_raw() && b.is_borrowed()));
                bodies[0].memset_d32(&which, 1, 1)?; // then
                bodies[1].memset_d32(&which, 2, 1)?; // else
                Ok("value")
            })?;
            assert_eq!(got, "value", "the closure's value");
            // A closure that fails, and one that panics: both bodies are ended each time (else
            // the capture could not end below). They enqueue nothing, so their nodes do nothing.
            let e = s
                .conditional_bodies(ConditionalKind::If, &never, 2, 0, |_| -> cgc::Result<()> {
                    Err(Error::new(Status::Internal, "the bodies' own failure"))
                })
                .expect_err("the closure's error");
            assert_eq!(e.message(), "the bodies' own failure");
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                s.conditional_bodies(ConditionalKind::If, &never, 2, 0, |_| -> cgc::Result<()> {
                    panic!("in the bodies")
                })
            }));
            assert!(panicked.is_err());
            Ok(())
        })
        .expect("the capture ends: no body is left open");
    assert_eq!(graph.info().unwrap().nodes.conditional, 3);
    for c in [1u32, 0, 5, 0] {
        run[0] = c;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        let want = if c != 0 { 1 } else { 2 };
        assert_eq!(read_back::<u32>(&stream, &which, 1), [want], "condition {}", c);
    }
    graph.destroy().unwrap();
    run.free().unwrap();
    for buffer in [condition, never, which] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn a_switch_runs_the_body_its_condition_names() {
    const TEST: &str = "a_switch_runs_the_body_its_condition_names";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, hits) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !else_and_switch_supported(TEST, &stream, &condition) {
        return;
    }
    let mut which = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&condition, &which)?;
            s.memset_d32(&hits, 99, 1)?; // what stays when no body runs
            s.conditional_bodies(ConditionalKind::Switch, &condition, 3, 0, |bodies| {
                assert_eq!(bodies.len(), 3);
                for (i, body) in bodies.iter().enumerate() {
                    body.memset_d32(&hits, 10 + i as u32, 1)?;
                }
                Ok(())
            })
        })
        .expect("capture of the SWITCH");
    assert_eq!(graph.info().unwrap().nodes.conditional, 1);
    for c in [0u32, 1, 2, 7, 1] {
        which[0] = c;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        let want = if c < 3 { 10 + c } else { 99 };
        assert_eq!(read_back::<u32>(&stream, &hits, 1), [want], "condition {}", c);
    }
    graph.destroy().unwrap();
    which.free().unwrap();
    for buffer in [condition, hits] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn a_loop_whose_kernel_sets_the_condition_runs_to_its_bound() {
    const TEST: &str = "a_loop_whose_kernel_sets_the_condition_runs_to_its_bound";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (counter, n, more) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &more) {
        return;
    }
    let ptx = CString::new(BINDING_TESTS_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let init = module.function("cond_init").unwrap();
    // NUL-terminated by CString, as cgc_module_load reads PTX text.
    let loop_ptx = CString::new(LOOP_CONTINUE_PTX).unwrap();
    let loop_module = Module::from_ptx(&ctx, &loop_ptx).expect("cgc_module_load of loop_continue.ptx");
    let loop_continue = loop_module.function("loop_continue").unwrap();
    let mut bound = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&n, &bound)?;
            // cgc reads *more once, before the node: whether the first iteration runs.
            launch1(&init, &[&counter, &n, &more], s)?;
            s.conditional_bodies(ConditionalKind::While, &more, 1, CONDITIONAL_BODY_SETS_CONDITION, |bodies| {
                let handle = bodies.handle();
                assert_ne!(handle, 0, "the node's handle");
                // SAFETY: loop_continue(u64 handle, unsigned* counter, const unsigned* n); the
                // buffers outlive the graph.
                unsafe { loop_continue.launch(&LaunchConfig::linear(1, 1), &[&handle, &counter, &n], &bodies[0]) }
            })
        })
        .expect("capture of the loop");
    for b in [4u32, 1, 0, 9] {
        bound[0] = b;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(read_back::<u32>(&stream, &counter, 1), [b], "the body's kernel ended the loop at the bound");
    }
    graph.destroy().unwrap();
    loop_module.unload().unwrap();
    module.unload().unwrap();
    bound.free().unwrap();
    for buffer in [counter, n, more] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn memory_allocated_in_a_body_comes_from_the_graphs_pool_and_is_reused_after_it() {
    const TEST: &str = "memory_allocated_in_a_body_comes_from_the_graphs_pool_and_is_reused_after_it";
    const BYTES: usize = 1024;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (condition, first, second) = (word(&ctx, &stream, 1), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &condition) {
        return;
    }
    // A pool of the graph's own: nothing but this capture's blocks in it.
    let pool = Pool::new(&ctx).unwrap();
    let graph = stream
        .capture(&CaptureOptions::new().with_pool(&pool), |s| {
            let in_body = s.conditional_bodies(ConditionalKind::If, &condition, 1, 0, |bodies| {
                let body = &bodies[0];
                let a = DeviceBuffer::alloc(&ctx, BYTES, body)?;
                body.memset_d32(&a, 5, BYTES / 4)?;
                body.copy_device_to_device(&first, &a, 4)?;
                let a_address = a.device_ptr();
                a.free()?;
                let b = DeviceBuffer::alloc(&ctx, BYTES, body)?;
                assert_eq!(b.device_ptr(), a_address, "freed in the body, reused by the body");
                body.memset_d32(&b, 6, BYTES / 4)?;
                body.copy_device_to_device(&second, &b, 4)?;
                let b_address = b.device_ptr();
                b.free()?;
                Ok(b_address)
            })?;
            // The node runs before what follows it: its freed memory is the capturing stream's.
            let after = DeviceBuffer::alloc(&ctx, BYTES, s)?;
            assert_eq!(after.device_ptr(), in_body, "the body's memory, reused after the body");
            after.free()
        })
        .expect("capture with allocations in a body");
    assert!(ctx.memory_stats(Some(&pool)).unwrap().bytes_reserved > 0, "the body's memory is the pool's");
    graph.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read_back::<u32>(&stream, &first, 1), [5]);
    assert_eq!(read_back::<u32>(&stream, &second, 1), [6]);
    graph.destroy().unwrap();
    pool.release().unwrap();
    for buffer in [condition, first, second] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// Numbers a loop iteration draws in the test below (a multiple of 4: each draw is rounded up to
/// 4 numbers of the generator's offset).
const PER_ITERATION: usize = 8;

/// `rows` eager draws of PER_ITERATION normals from (seed, offset), one after the other.
fn eager_rows(ctx: &Context, stream: &Stream, seed: u64, offset: u64, rows: usize, scratch: &DeviceBuffer) -> Vec<f32> {
    let eager = Rng::new(ctx, seed).unwrap();
    eager.set_state(seed, offset).unwrap();
    let mut all = Vec::new();
    for _ in 0..rows {
        eager.normal(scratch, PER_ITERATION, 0.0, 1.0, stream).unwrap();
        all.extend(read_back::<f32>(stream, scratch, PER_ITERATION));
    }
    eager.destroy().unwrap();
    all
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn draws_in_a_while_body_are_the_eager_draws_of_each_iteration() {
    const TEST: &str = "draws_in_a_while_body_are_the_eager_draws_of_each_iteration";
    const MOST_ROWS: usize = 16;
    const SEED: u64 = 42;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let (counter, n, more) = (word(&ctx, &stream, 0), word(&ctx, &stream, 0), word(&ctx, &stream, 0));
    if !conditionals_supported(TEST, &stream, &more) {
        return;
    }
    let ptx = CString::new(BINDING_TESTS_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let (init, step, append) = (
        module.function("cond_init").unwrap(),
        module.function("cond_step").unwrap(),
        module.function("cond_append").unwrap(),
    );
    let rng = Rng::new(&ctx, SEED).unwrap();
    let row = DeviceBuffer::alloc(&ctx, PER_ITERATION * 4, &stream).unwrap();
    let rows = DeviceBuffer::alloc(&ctx, MOST_ROWS * PER_ITERATION * 4, &stream).unwrap();
    let mut bound = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let per = PER_ITERATION as u32;
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&n, &bound)?;
            launch1(&init, &[&counter, &n, &more], s)?;
            s.conditional_bodies(ConditionalKind::While, &more, 1, 0, |bodies| {
                let body = &bodies[0];
                rng.normal(&row, PER_ITERATION, 0.0, 1.0, body)?;
                // SAFETY: cond_append(float* out, const float* row, const unsigned* counter,
                // unsigned per) with `per` threads; `rows` holds MOST_ROWS rows, more than any
                // bound below.
                unsafe { append.launch(&LaunchConfig::linear(per, per), &[&rows, &row, &counter, &per], body)? };
                launch1(&step, &[&counter, &n, &more], body)
            })
        })
        .expect("capture of a loop that draws");
    let window = PER_ITERATION as u64 * LOOP_EAGER_ITERATIONS;
    let mut offset = 0;
    for b in [5usize, 3, 0, 7] {
        let (_, before) = rng.state().unwrap();
        assert_eq!(before, offset, "where replay with {} iterations starts", b);
        bound[0] = b as u32;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        let got = read_back::<f32>(&stream, &rows, b * PER_ITERATION);
        let want = eager_rows(&ctx, &stream, SEED, before, b, &row);
        assert_eq!(bits(&got), bits(&want), "iteration i drew eager draw i, replay with {} iterations", b);
        if b > 1 {
            assert_ne!(got[..PER_ITERATION], got[PER_ITERATION..2 * PER_ITERATION], "iterations draw fresh numbers");
        }
        offset += window;
        assert_eq!(rng.state().unwrap().1, offset, "a replay moves the generator on by the loop's window");
    }
    graph.destroy().unwrap();
    module.unload().unwrap();
    rng.destroy().unwrap();
    bound.free().unwrap();
    for buffer in [counter, n, more, row, rows] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}
