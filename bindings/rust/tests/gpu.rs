//! GPU tests. Each prints "skipping: <reason>" and returns when cgc finds no GPU (Rust tests
//! cannot mark themselves skipped at run time). Find libcgc through CGC_LIBRARY.
//!
//! They run one at a time (common::serial): a Global-mode capture is broken by an unsafe call
//! from any thread, so one test's synchronisation must not overlap another test's capture.
//! Conditional nodes have a file of their own, gpu_conditional.rs.

mod common;

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cgc::{
    AccessPolicy, AccessProperty, BarrierScope, BlockState, CaptureMode, CaptureOptions, CaptureStatus, Comm, CommId,
    Context, DType, DeviceBuffer, Error, Event, Function, FunctionAttribute, GraphUpdate, HostBuffer,
    HostRegistration, LaunchConfig, MemOp, Module, NcclMemory, Pool, PoolId, ReduceOp, Rng, Status, Stream, WaitCondition,
    HOST_WRITE_COMBINED, STREAM_NON_BLOCKING,
};
use common::{assert_error, gpu, read_back, serial, Cuda};

const N: usize = 1 << 16;
const BYTES: usize = N * 4;

/// The buffer's floats, copied to the host.
fn host(cuda: &Cuda, buf: &DeviceBuffer) -> Vec<f32> {
    let mut v = vec![0f32; buf.len() / 4];
    cuda.to_host(buf.device_ptr(), &mut v);
    v
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fork_join_shared_pool() {
    let _serial = serial();
    let ctx = match gpu("fork_join_shared_pool") {
        Some(c) => c,
        None => return,
    };
    let cuda = Cuda::load_and_make_current(0);

    // 1. streams, events, generator.
    let origin = Stream::new(&ctx).unwrap();
    let side1 = Stream::new(&ctx).unwrap();
    let side2 = Stream::new(&ctx).unwrap();
    let fork = Event::new(&ctx).unwrap();
    let join1 = Event::new(&ctx).unwrap();
    let join2 = Event::new(&ctx).unwrap();
    let gen = Rng::new(&ctx, 1234).unwrap();

    // 2. g1: origin draws a and forks; side1 copies a -> b; side2 draws c; both join back.
    let (mut a, mut b, mut c) = (None, None, None);
    let g1 = origin
        .capture(&CaptureOptions::default(), |s| {
            let a_ = DeviceBuffer::alloc(&ctx, BYTES, s)?;
            gen.uniform(&a_, N, s)?;
            fork.record(s)?;
            side1.wait_event(&fork)?;
            side2.wait_event(&fork)?;
            let b_ = DeviceBuffer::alloc(&ctx, BYTES, &side1)?;
            cuda.copy_async(b_.device_ptr(), a_.device_ptr(), BYTES, side1.native());
            let c_ = DeviceBuffer::alloc(&ctx, BYTES, &side2)?;
            gen.normal(&c_, N, 0.0, 1.0, &side2)?;
            join1.record(&side1)?;
            join2.record(&side2)?;
            s.wait_event(&join1)?;
            s.wait_event(&join2)?;
            a = Some(a_);
            b = Some(b_);
            c = Some(c_);
            Ok(())
        })
        .expect("capture of g1");
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());

    // 3. g2 shares g1's pool: d = copy of b.
    let pool = g1.pool().expect("graph_pool(g1)");
    let mut d = None;
    let g2 = origin
        .capture(&CaptureOptions::new().with_pool(&pool), |s| {
            let d_ = DeviceBuffer::alloc(&ctx, BYTES, s)?;
            cuda.copy_async(d_.device_ptr(), b.device_ptr(), BYTES, s.native());
            d = Some(d_);
            Ok(())
        })
        .expect("capture of g2");
    let d = d.unwrap();

    // 4. replays.
    let mut previous_a: Option<Vec<u32>> = None;
    for replay in 1..=3 {
        g1.launch(&origin).unwrap();
        g2.launch(&origin).unwrap();
        origin.synchronize().unwrap();
        let (ha, hb, hc, hd) = (
            host(&cuda, &a),
            host(&cuda, &b),
            host(&cuda, &c),
            host(&cuda, &d),
        );
        let a_bits = bits(&ha);
        assert!(bits(&hb) == a_bits, "replay {}: b != a", replay);
        assert!(bits(&hd) == a_bits, "replay {}: d != a", replay);
        assert!(
            ha.iter().all(|&x| (0.0..1.0).contains(&x)),
            "replay {}: a outside [0, 1)",
            replay
        );
        if let Some(prev) = &previous_a {
            assert!(
                *prev != a_bits,
                "replay {}: a repeats the previous replay's numbers",
                replay
            );
        }
        previous_a = Some(a_bits);
        let mean = hc.iter().map(|&x| x as f64).sum::<f64>() / N as f64;
        let var = hc.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / N as f64;
        assert!(mean.abs() < 0.05, "replay {}: mean(c) = {}", replay, mean);
        assert!(
            (var.sqrt() - 1.0).abs() < 0.05,
            "replay {}: std(c) = {}",
            replay,
            var.sqrt()
        );
    }
    let info1 = g1.info().unwrap();
    // Nodes: the uniform draw, the copy and the normal draw. Allocations come from cgc's
    // caching allocator and events only add edges, so neither makes a node.
    assert!(info1.node_count >= 3, "g1 has {} nodes", info1.node_count);
    assert_eq!(info1.replay_count, 3);
    assert_eq!(g2.info().unwrap().replay_count, 3);
    let pool2 = g2.pool().expect("graph_pool(g2)");
    assert_eq!(pool2, pool, "g2 does not share g1's pool");
    let stats = ctx.memory_stats(Some(&pool)).unwrap();
    assert!(stats.bytes_reserved > 0, "{:?}", stats);

    // 6. clean up, checking every call: the buffers are the graphs' outputs.
    for buf in [a, b, c, d] {
        buf.free().unwrap();
    }
    g1.destroy().unwrap();
    g2.destroy().unwrap();
    pool.release().unwrap();
    pool2.release().unwrap();
    for e in [fork, join1, join2] {
        e.destroy().unwrap();
    }
    for s in [origin, side1, side2] {
        s.destroy().unwrap();
    }
    gen.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn unjoined_fork_fails_and_stream_recovers() {
    let _serial = serial();
    let ctx = match gpu("unjoined_fork_fails_and_stream_recovers") {
        Some(c) => c,
        None => return,
    };
    let origin = Stream::new(&ctx).unwrap();
    let side1 = Stream::new(&ctx).unwrap();
    let fork = Event::new(&ctx).unwrap();
    let gen = Rng::new(&ctx, 7).unwrap();
    // Allocated before the capture, so the failed capture owns no memory.
    let x = DeviceBuffer::alloc(&ctx, BYTES, &origin).unwrap();
    let y = DeviceBuffer::alloc(&ctx, BYTES, &side1).unwrap();
    origin.synchronize().unwrap();
    side1.synchronize().unwrap();

    origin.begin_capture(&CaptureOptions::default()).unwrap();
    gen.uniform(&x, N, &origin).unwrap();
    fork.record(&origin).unwrap();
    side1.wait_event(&fork).unwrap();
    gen.uniform(&y, N, &side1).unwrap();
    // side1 is never joined back.
    let e = origin
        .end_capture()
        .expect_err("capture end with an unjoined fork");
    assert_eq!(e.status(), Some(Status::CaptureUnjoined), "{}", e);
    let side_name = format!("{:p}", side1.native());
    assert!(
        e.message().contains(&side_name),
        "message does not name {}: {}",
        side_name,
        e.message()
    );

    assert_eq!(origin.capture_status().unwrap().0, CaptureStatus::None);
    assert_eq!(side1.capture_status().unwrap().0, CaptureStatus::None);
    let g = origin
        .capture(&CaptureOptions::default(), |s| gen.uniform(&x, N, s))
        .expect("origin captures again");
    g.launch(&origin).unwrap();
    origin.synchronize().unwrap();
    assert_eq!(g.info().unwrap().replay_count, 1);

    g.destroy().unwrap();
    x.free().unwrap();
    y.free().unwrap();
    fork.destroy().unwrap();
    origin.destroy().unwrap();
    side1.destroy().unwrap();
    gen.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// After a failed or panicking body the stream is not capturing and can capture again.
fn assert_recovered(ctx: &Context, stream: &Stream, gen: &Rng, x: &DeviceBuffer) {
    assert_eq!(stream.capture_status().unwrap().0, CaptureStatus::None);
    let g = stream
        .capture(&CaptureOptions::default(), |s| gen.uniform(x, N, s))
        .expect("capture again");
    g.launch(stream).unwrap();
    stream.synchronize().unwrap();
    g.destroy().unwrap();
    ctx.synchronize().unwrap();
}

#[test]
fn capture_closure_error_ends_capture() {
    let _serial = serial();
    let ctx = match gpu("capture_closure_error_ends_capture") {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let gen = Rng::new(&ctx, 99).unwrap();
    let x = DeviceBuffer::alloc(&ctx, BYTES, &stream).unwrap();
    stream.synchronize().unwrap();

    let e = stream
        .capture(&CaptureOptions::default(), |s| {
            gen.uniform(&x, N, s)?;
            assert_eq!(s.capture_status()?.0, CaptureStatus::Active);
            Err(Error::new(
                Status::InvalidArgument,
                "body failed on purpose",
            ))
        })
        .expect_err("a failing body fails the capture");
    assert_eq!(e.status(), Some(Status::InvalidArgument));
    assert_eq!(e.message(), "body failed on purpose");
    assert_recovered(&ctx, &stream, &gen, &x);

    // A library error inside the body is returned as is: beginning a capture on a stream that
    // is already capturing is INVALID_STATE.
    let e = stream
        .capture(&CaptureOptions::default(), |s| {
            s.begin_capture(&CaptureOptions::default())
        })
        .expect_err("nested begin on a capturing stream");
    assert_eq!(e.status(), Some(Status::InvalidState), "{}", e);
    assert_recovered(&ctx, &stream, &gen, &x);

    x.free().unwrap();
    stream.destroy().unwrap();
    gen.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn capture_closure_panic_ends_capture() {
    let _serial = serial();
    let ctx = match gpu("capture_closure_panic_ends_capture") {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let gen = Rng::new(&ctx, 5).unwrap();
    let x = DeviceBuffer::alloc(&ctx, BYTES, &stream).unwrap();
    stream.synchronize().unwrap();

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        stream.capture(&CaptureOptions::default(), |s| {
            gen.uniform(&x, N, s)?;
            panic!("body panics on purpose");
        })
    }));
    let payload = outcome.expect_err("the panic goes through capture");
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert_eq!(text, "body panics on purpose");
    assert_recovered(&ctx, &stream, &gen, &x);

    x.free().unwrap();
    stream.destroy().unwrap();
    gen.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// NCCL's version code, or None after printing why the test is skipped (NCCL unavailable).
fn nccl(test: &str) -> Option<i32> {
    match cgc::nccl_version() {
        Ok(v) => Some(v),
        Err(e) if e.status() == Some(Status::NcclUnavailable) => {
            println!("skipping: {}: {}", test, e.message());
            None
        }
        Err(e) => panic!("cgc_nccl_version: {}", e),
    }
}

/// Floats per buffer of the NCCL test.
const NCCL_N: usize = 4096;

#[test]
fn nccl_one_rank_eager_and_captured() {
    const TEST: &str = "nccl_one_rank_eager_and_captured";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let version = match nccl(TEST) {
        Some(v) => v,
        None => return,
    };
    // cgc counts NCCL older than 2.9.6 (code 20906, the 2.9+ format major*10000 + minor*100 +
    // patch) as missing.
    assert!(version >= 20906, "NCCL version code {}", version);
    println!(
        "NCCL {}.{}.{}",
        version / 10000,
        version % 10000 / 100,
        version % 100
    );
    let cuda = Cuda::load_and_make_current(0);

    let stream = Stream::new(&ctx).unwrap();
    let gen = Rng::new(&ctx, 2718).unwrap();
    let id = CommId::new().expect("cgc_comm_unique_id");
    let comm = Comm::new(&ctx, 1, &id, 0).expect("cgc_comm_create of a 1-rank communicator");
    assert_eq!((comm.nranks(), comm.rank()), (1, 0));
    let send = DeviceBuffer::alloc(&ctx, NCCL_N * 4, &stream).unwrap();
    let recv = DeviceBuffer::alloc(&ctx, NCCL_N * 4, &stream).unwrap();
    // Other numbers in recv first, so that a collective that did nothing would be seen.
    gen.uniform(&recv, NCCL_N, &stream).unwrap();

    // With one rank every collective here copies send into recv. `fresh` draws new numbers into
    // send (eagerly) and checks that recv does not hold them yet; `copied` checks it does.
    let fresh = |what: &str| {
        gen.uniform(&send, NCCL_N, &stream).unwrap();
        stream.synchronize().unwrap();
        let s = host(&cuda, &send);
        assert!(
            s.iter().all(|&x| (0.0..1.0).contains(&x)),
            "{}: send outside [0, 1)",
            what
        );
        assert!(
            bits(&host(&cuda, &recv)) != bits(&s),
            "{}: recv already equals the new send",
            what
        );
    };
    let copied = |what: &str| {
        stream.synchronize().unwrap();
        assert!(
            bits(&host(&cuda, &recv)) == bits(&host(&cuda, &send)),
            "{}: recv != send",
            what
        );
    };

    // 1. eager all-reduce (sum over one rank).
    fresh("eager all_reduce");
    comm.all_reduce(&send, &recv, NCCL_N, DType::Float32, ReduceOp::Sum, &stream)
        .unwrap();
    copied("eager all_reduce");

    // 2. captured all-reduce, replayed with new inputs drawn eagerly before each replay.
    let graph = stream
        .capture(&CaptureOptions::new().with_mode(CaptureMode::Global), |s| {
            comm.all_reduce(&send, &recv, NCCL_N, DType::Float32, ReduceOp::Sum, s)
        })
        .expect("capture of an all_reduce");
    for replay in 1..=3 {
        let what = format!("replay {}", replay);
        fresh(&what);
        graph.launch(&stream).unwrap();
        copied(&what);
    }
    let info = graph.info().unwrap();
    assert!(info.node_count >= 1, "{:?}", info);
    assert_eq!(info.replay_count, 3);

    // 3. eager all-gather (one rank: recv = send) and broadcast from root 0.
    fresh("all_gather");
    comm.all_gather(&send, &recv, NCCL_N, DType::Float32, &stream)
        .unwrap();
    copied("all_gather");
    fresh("broadcast");
    comm.broadcast(&send, &recv, NCCL_N, DType::Float32, 0, &stream)
        .unwrap();
    copied("broadcast");

    // 4. the graph holds the communicator: destroying the communicator first is refused and
    // leaves it intact; after the graph it succeeds.
    let (e, comm) = match comm.try_destroy() {
        Err((e, Some(comm))) => (e, comm),
        Err((e, None)) => panic!("destroy with a live graph freed the communicator: {}", e),
        Ok(()) => panic!("destroy with a live graph holding the communicator succeeded"),
    };
    assert_eq!(e.status(), Some(Status::InvalidState), "{}", e);
    assert!(
        e.message().contains("cgc_comm_destroy"),
        "message does not name cgc_comm_destroy: {}",
        e.message()
    );
    graph.destroy().unwrap();
    comm.try_destroy()
        .map_err(|(e, _)| e)
        .expect("cgc_comm_destroy after the graph");

    send.free().unwrap();
    recv.free().unwrap();
    stream.destroy().unwrap();
    gen.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.1: the work a graph is made of -----------------------------------------------------------

/// The examples' own kernel: scale_add(float* out, const float* in, const float* params,
/// unsigned n) computes out[i] = in[i] * params[0] + params[1]. Built into the test binary.
const SCALE_ADD_PTX: &str = include_str!("../../../examples/kernels/scale_add.ptx");

#[test]
fn eager_copies_and_sets_round_trip() {
    const TEST: &str = "eager_copies_and_sets_round_trip";
    const LEN: usize = 1000;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let values: Vec<u32> = (0..LEN as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let reversed: Vec<u32> = values.iter().rev().copied().collect();
    let a = DeviceBuffer::alloc(&ctx, LEN * 4, &stream).unwrap();
    let b = DeviceBuffer::alloc(&ctx, LEN * 4, &stream).unwrap();

    // Pageable memory in, device to device, pageable memory out.
    stream.copy_to_device(&a, &values).unwrap();
    stream.copy_device_to_device(&b, &a, LEN * 4).unwrap();
    assert!(read_back::<u32>(&stream, &b, LEN) == values, "pageable -> a -> b -> pageable");

    // Page-locked memory in and out.
    let pinned_in = HostBuffer::from_slice(&ctx, &reversed).unwrap();
    let mut pinned_out = HostBuffer::new(&ctx, LEN, 0u32).unwrap();
    assert_eq!(pinned_in.len(), LEN);
    stream.copy_to_device(&a, &pinned_in).unwrap();
    // SAFETY: pinned_out is read only after the stream is synchronised.
    unsafe { stream.copy_to_host(&mut pinned_out, &a) }.unwrap();
    stream.synchronize().unwrap();
    assert!(pinned_out[..] == reversed[..], "page-locked -> a -> page-locked");

    // The caller's own memory, page-locked for a while.
    let mut registered = vec![0u32; LEN];
    {
        let mut registration = HostRegistration::new(&ctx, &mut registered).unwrap();
        // SAFETY: read only after the stream is synchronised, before the registration ends.
        unsafe { stream.copy_to_host(&mut registration, &b) }.unwrap();
        stream.synchronize().unwrap();
        registration.unregister().unwrap();
    }
    assert!(registered == values, "b -> registered Vec");

    // Write-combined memory: the device reads it as any other.
    let combined = HostBuffer::with_flags(&ctx, LEN, 9u32, HOST_WRITE_COMBINED).unwrap();
    stream.copy_to_device(&a, &combined).unwrap();
    assert!(read_back::<u32>(&stream, &a, LEN).iter().all(|&x| x == 9), "write-combined -> a");

    // Sets of each width, and a set of fewer elements than the buffer holds.
    stream.memset_d8(&a, 0xab, LEN * 4).unwrap();
    assert!(read_back::<u8>(&stream, &a, LEN * 4).iter().all(|&x| x == 0xab), "memset_d8");
    stream.memset_d16(&a, 0x1234, LEN * 2).unwrap();
    assert!(read_back::<u16>(&stream, &a, LEN * 2).iter().all(|&x| x == 0x1234), "memset_d16");
    stream.memset_d32(&a, 1.5f32.to_bits(), LEN).unwrap();
    assert!(read_back::<f32>(&stream, &a, LEN).iter().all(|&x| x == 1.5), "memset_d32");
    stream.memset_d32(&a, 7, 10).unwrap();
    let partly = read_back::<u32>(&stream, &a, LEN);
    assert!(partly[..10].iter().all(|&x| x == 7), "memset_d32 of 10 elements");
    assert!(partly[10..].iter().all(|&x| x == 1.5f32.to_bits()), "memset_d32 past its 10 elements");

    // Stream memory operations, eagerly: single and batched (a write, a barrier, a wait).
    stream.write_value32(&a, 77, 0).unwrap();
    let refused = stream.write_value32(&a, 78, 1).unwrap_err();
    assert_eq!(refused.status(), Some(Status::InvalidArgument), "{}", refused);
    assert!(refused.message().contains("writes take 0"), "{}", refused);
    stream.wait_value32(&a, 77, WaitCondition::Eq, 0).unwrap();
    assert_eq!(read_back::<u32>(&stream, &a, 1), [77]);
    stream
        .batch_mem_op(&[
            MemOp::WriteValue32 {
                address: &b,
                value: 5,
                flags: 0,
            },
            MemOp::Barrier {
                scope: BarrierScope::System,
            },
            MemOp::WaitValue32 {
                address: &b,
                value: 5,
                condition: WaitCondition::Geq,
                flags: 0,
            },
        ])
        .unwrap();
    assert_eq!(read_back::<u32>(&stream, &b, 1), [5]);
    match stream.write_value64(&a, 0x1122_3344_5566_7788, 0) {
        Ok(()) => {
            stream
                .wait_value64(&a, 0x1122_3344_5566_7788, WaitCondition::Eq, 0)
                .unwrap();
            assert_eq!(read_back::<u64>(&stream, &a, 1), [0x1122_3344_5566_7788]);
        }
        Err(e) if e.status() == Some(Status::NotSupported) => {
            println!("note: {}: no 64-bit stream memory operations here: {}", TEST, e)
        }
        Err(e) => panic!("cgc_stream_write_value64: {}", e),
    }

    pinned_in.free().unwrap();
    pinned_out.free().unwrap();
    combined.free().unwrap();
    a.free().unwrap();
    b.free().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn stream_priorities_ids_devices_and_access_policy() {
    const TEST: &str = "stream_priorities_ids_devices_and_access_policy";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let range = ctx.stream_priority_range().unwrap();
    assert!(range.greatest <= range.least, "{:?}", range);
    assert!(range.contains(0), "{:?}", range);
    let high = Stream::with_flags(&ctx, STREAM_NON_BLOCKING, range.greatest).unwrap();
    let low = Stream::new(&ctx).unwrap();
    assert_eq!(high.priority().unwrap(), range.greatest);
    assert_eq!(low.priority().unwrap(), 0);
    // Out of range is clamped.
    let clamped = Stream::with_flags(&ctx, STREAM_NON_BLOCKING, range.greatest - 100).unwrap();
    assert_eq!(clamped.priority().unwrap(), range.greatest);

    let (high_id, low_id) = (high.id().unwrap(), low.id().unwrap());
    assert_ne!(high_id, low_id);
    assert_eq!(high.id().unwrap(), high_id, "a stream's id is stable");
    assert_eq!(high.device().unwrap(), 0);
    assert!(!high.native_context().unwrap().is_null());
    assert_eq!(high.native_context().unwrap(), low.native_context().unwrap());

    let window = DeviceBuffer::alloc(&ctx, 1 << 20, &low).unwrap();
    match low.set_access_policy(&AccessPolicy::persisting(&window, 0.5)) {
        Ok(()) => {
            let got = low.access_policy().unwrap();
            assert_eq!((got.base, got.bytes), (window.as_ptr(), 1 << 20), "{:?}", got);
            assert!((got.hit_ratio - 0.5).abs() < 1e-6, "{:?}", got);
            assert_eq!(got.hit_property, AccessProperty::Persisting);
            assert_eq!(got.miss_property, AccessProperty::Streaming);
            high.copy_attributes_from(&low).unwrap();
            assert_eq!(high.access_policy().unwrap().bytes, 1 << 20, "copied window");
            low.set_access_policy(&AccessPolicy::off()).unwrap();
            assert_eq!(low.access_policy().unwrap().bytes, 0, "window off");
        }
        Err(e) if e.status() == Some(Status::NotSupported) => {
            println!("note: {}: no access-policy windows here: {}", TEST, e)
        }
        Err(e) => panic!("cgc_stream_set_access_policy: {}", e),
    }
    let e = low
        .set_access_policy(&AccessPolicy::persisting(&window, 1.5))
        .expect_err("hit_ratio 1.5");
    assert_error(&e, Status::InvalidArgument, "cgc_stream_set_access_policy");

    window.free().unwrap();
    for s in [high, low, clamped] {
        s.destroy().unwrap();
    }
    ctx.destroy().unwrap();
}

#[test]
fn captured_kernel_copies_host_function_and_memory_operations() {
    const TEST: &str = "captured_kernel_copies_host_function_and_memory_operations";
    const COUNT: usize = 4096;
    const REPLAYS: usize = 3;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let (origin, side) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    let (fork, join) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());

    // The module, its kernel and its attributes.
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).expect("cgc_module_load of scale_add.ptx");
    let scale_add = module.function("scale_add").unwrap();
    assert_eq!(module.function("scale_add").unwrap().as_raw(), scale_add.as_raw());
    assert!(scale_add.attribute(FunctionAttribute::MaxThreadsPerBlock).unwrap() >= 256);
    assert!(scale_add.attribute(FunctionAttribute::NumRegs).unwrap() > 0);
    scale_add
        .set_attribute(FunctionAttribute::MaxDynamicSharedSizeBytes, 1024)
        .unwrap();
    let e = scale_add
        .set_attribute(FunctionAttribute::NumRegs, 8)
        .expect_err("NumRegs is read only");
    assert_error(&e, Status::InvalidArgument, "cgc_function_set_attribute");
    let e = module.function("no_such_kernel").expect_err("a kernel the module lacks");
    assert_error(&e, Status::InvalidArgument, "no_such_kernel");
    let broken = CString::new(".version 7.0\n.target sm_75\n.address_size 64\nnot ptx at all").unwrap();
    let e = Module::from_ptx(&ctx, &broken).expect_err("broken PTX");
    assert!(e.message().contains("cgc_module_load"), "{}", e);

    // Page-locked host memory and device memory, the input copied in eagerly.
    let inputs: Vec<f32> = (0..COUNT).map(|i| (i % 97) as f32 * 0.25).collect();
    let host_in = HostBuffer::from_slice(&ctx, &inputs).unwrap();
    let mut host_out = HostBuffer::new(&ctx, COUNT, 0f32).unwrap();
    let mut host_params = HostBuffer::new(&ctx, 2, 0f32).unwrap();
    let input = DeviceBuffer::alloc(&ctx, COUNT * 4, &origin).unwrap();
    let out = DeviceBuffer::alloc(&ctx, COUNT * 4, &origin).unwrap();
    let params = DeviceBuffer::alloc(&ctx, 8, &origin).unwrap();
    let flag = DeviceBuffer::alloc(&ctx, 4, &origin).unwrap();
    origin.copy_to_device(&input, &host_in).unwrap();
    origin.synchronize().unwrap();
    for buffer in [&input, &out, &params, &flag] {
        buffer.record_stream(&side).unwrap();
    }

    // The host function counts replays; the guard it owns says when the closure is dropped.
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(AtomicBool::new(false));
    let (counter, guard) = (Arc::clone(&calls), SetOnDrop(Arc::clone(&released)));
    let n = COUNT as u32;
    let graph = origin
        .capture(&CaptureOptions::default(), |s| {
            s.memset_d32(&flag, 0, 1)?;
            s.copy_to_device(&params, &host_params)?;
            fork.record(s)?;
            side.wait_event(&fork)?;
            // SAFETY: the kernel's four parameters, in order; out and input hold COUNT floats,
            // params 2; all outlive the graph.
            unsafe {
                scale_add.launch(
                    &LaunchConfig::linear(n, 256),
                    &[&out, &input, &params, &n],
                    &side,
                )?
            };
            side.write_value32(&flag, 1, 0)?;
            join.record(&side)?;
            s.wait_event(&join)?;
            s.wait_value32(&flag, 1, WaitCondition::Eq, 0)?;
            // SAFETY: host_out outlives the graph and is read only after synchronising.
            unsafe { s.copy_to_host(&mut host_out, &out)? };
            s.launch_host_func(move || {
                let _owned = &guard;
                counter.fetch_add(1, Ordering::SeqCst);
            })
        })
        .expect("capture of the mixed graph");
    // The graph keeps the module's code loaded: the module itself may go now.
    module.unload().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a host node ran during the capture");

    for replay in 1..=REPLAYS {
        let (scale, shift) = (replay as f32, 10.0 * replay as f32);
        host_params.copy_from_slice(&[scale, shift]);
        graph.launch(&origin).unwrap();
        origin.synchronize().unwrap();
        for (i, (&x, &got)) in host_in.iter().zip(host_out.iter()).enumerate() {
            let want = x * scale + shift;
            assert!(
                (got - want).abs() <= 1e-4 * want.abs() + 1e-6,
                "replay {}: out[{}] = {}, want {}",
                replay,
                i,
                got,
                want
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), replay, "host function calls after replay {}", replay);
    }

    // What the capture made: fork and join are edges, not nodes.
    let info = graph.info().unwrap();
    let nodes = info.nodes;
    assert_eq!(info.replay_count, REPLAYS as u64);
    assert_eq!(nodes.kernel, 1, "{:?}", info);
    assert_eq!(nodes.memcpy, 2, "{:?}", info);
    assert_eq!(nodes.memset, 1, "{:?}", info);
    assert_eq!(nodes.host, 1, "{:?}", info);
    assert_eq!(nodes.mem_op, 2, "{:?}", info);
    assert_eq!(nodes.event_record + nodes.event_wait, 0, "{:?}", info);
    assert_eq!(info.node_count, nodes.total(), "{:?}", info);
    assert_eq!(info.node_count, 7, "{:?}", info);

    // The graph holds the closure until it goes, then drops it (after its last replay).
    assert!(!released.load(Ordering::SeqCst), "released while the graph lives");
    graph.destroy().unwrap();
    assert!(released.load(Ordering::SeqCst), "not released when the graph was destroyed");
    assert_eq!(Arc::strong_count(&calls), 1, "the closure's clone of `calls` is still alive");
    assert_eq!(calls.load(Ordering::SeqCst), REPLAYS);

    for buffer in [input, out, params, flag] {
        buffer.free().unwrap();
    }
    host_in.free().unwrap();
    host_out.free().unwrap();
    host_params.free().unwrap();
    fork.destroy().unwrap();
    join.destroy().unwrap();
    side.destroy().unwrap();
    origin.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn pageable_host_memory_in_a_capture_is_refused() {
    const LEN: usize = 64;
    let _serial = serial();
    let ctx = match gpu("pageable_host_memory_in_a_capture_is_refused") {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let buffer = DeviceBuffer::alloc(&ctx, LEN * 4, &stream).unwrap();
    let pageable = vec![1f32; LEN];
    stream.synchronize().unwrap();

    stream.begin_capture(&CaptureOptions::default()).unwrap();
    let e = stream
        .copy_to_device(&buffer, &pageable)
        .expect_err("a copy from a Vec inside a capture");
    assert_error(&e, Status::CaptureUnsupported, "cgc_memcpy_htod_async");
    assert!(e.message().contains("cgc_host_alloc"), "no way out named: {}", e.message());
    let mut back = vec![0f32; LEN];
    // SAFETY: refused before anything is captured (checked right here); if it were captured,
    // `back` outlives the graph below.
    let e = unsafe { stream.copy_to_host(&mut back, &buffer) }
        .expect_err("a copy into a Vec inside a capture");
    assert_error(&e, Status::CaptureUnsupported, "cgc_memcpy_dtoh_async");
    // The refusals came before the driver: the capture goes on.
    assert_eq!(stream.capture_status().unwrap().0, CaptureStatus::Active);
    stream.memset_d32(&buffer, 2f32.to_bits(), LEN).unwrap();
    let graph = stream
        .end_capture()
        .expect("the refused copies did not break the capture");
    let info = graph.info().unwrap();
    assert_eq!((info.node_count, info.nodes.memset), (1, 1), "{:?}", info);
    graph.launch(&stream).unwrap();
    assert!(read_back::<f32>(&stream, &buffer, LEN).iter().all(|&x| x == 2.0));
    graph.destroy().unwrap();

    // Through Stream::capture the refusal is the body's error: the capture ends, the stream is
    // free again.
    let e = stream
        .capture(&CaptureOptions::default(), |s| s.copy_to_device(&buffer, &pageable))
        .expect_err("capture of a pageable copy");
    assert_error(&e, Status::CaptureUnsupported, "cgc_memcpy_htod_async");
    assert_eq!(stream.capture_status().unwrap().0, CaptureStatus::None);
    // Eagerly the same copy is fine.
    stream.copy_to_device(&buffer, &pageable).unwrap();
    assert!(read_back::<f32>(&stream, &buffer, LEN).iter().all(|&x| x == 1.0));

    buffer.free().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn eager_host_functions_run_once_are_released_and_may_not_call_cgc() {
    let _serial = serial();
    let ctx = match gpu("eager_host_functions_run_once_are_released_and_may_not_call_cgc") {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();

    // Once, then released right after (on the driver's thread, before later work).
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    stream
        .launch_host_func(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(Arc::strong_count(&runs), 1, "the closure was not dropped after its one call");

    // A cgc call inside a host function is refused (INVALID_STATE), not passed to the driver.
    // The test keeps its own references, so the closure's drop destroys nothing there.
    let other = Arc::new(Stream::new(&ctx).unwrap());
    let buffer = Arc::new(DeviceBuffer::alloc(&ctx, 4, &other).unwrap());
    other.synchronize().unwrap();
    let outcome: Arc<Mutex<Option<Result<(), Error>>>> = Arc::new(Mutex::new(None));
    let (inner_stream, inner_buffer, slot) =
        (Arc::clone(&other), Arc::clone(&buffer), Arc::clone(&outcome));
    stream
        .launch_host_func(move || {
            let result = inner_stream.memset_d32(&inner_buffer, 1, 1);
            *slot.lock().unwrap() = Some(result);
        })
        .unwrap();
    stream.synchronize().unwrap();
    let result = outcome.lock().unwrap().take().expect("the host function ran");
    let e = result.expect_err("a cgc call inside a host function");
    assert_error(&e, Status::InvalidState, "cgc_memset_d32_async");

    // A panic stays in the binding: counted, and the stream goes on.
    let panics_before = cgc::host_function_panics();
    let after = Arc::new(AtomicUsize::new(0));
    let after_counter = Arc::clone(&after);
    stream
        .launch_host_func(|| {
            panic!("a host function panics on purpose");
        })
        .unwrap();
    stream
        .launch_host_func(move || {
            after_counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    stream.synchronize().unwrap();
    assert!(cgc::host_function_panics() > panics_before);
    assert_eq!(after.load(Ordering::SeqCst), 1, "the host function after the panic");

    drop(outcome);
    match Arc::try_unwrap(buffer) {
        Ok(b) => b.free().unwrap(),
        Err(_) => panic!("the host function still holds the buffer"),
    }
    match Arc::try_unwrap(other) {
        Ok(s) => s.destroy().unwrap(),
        Err(_) => panic!("the host function still holds the stream"),
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn batched_memory_operations_in_a_graph() {
    let _serial = serial();
    let ctx = match gpu("batched_memory_operations_in_a_graph") {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let flag = DeviceBuffer::alloc(&ctx, 4, &stream).unwrap();
    let out = DeviceBuffer::alloc(&ctx, 4, &stream).unwrap();
    stream.memset_d32(&flag, 0, 1).unwrap();
    stream.memset_d32(&out, 0, 1).unwrap();
    stream.synchronize().unwrap();

    // A batch of a write and a wait between two copies: each replay brings the host's value
    // in, sets the flag, waits for it, and passes the value on.
    let mut host_target = HostBuffer::new(&ctx, 1, 0u32).unwrap();
    let target = DeviceBuffer::alloc(&ctx, 4, &stream).unwrap();
    let graph = stream
        .capture(&CaptureOptions::default(), |s| {
            s.copy_to_device(&target, &host_target)?;
            s.batch_mem_op(&[
                MemOp::WriteValue32 {
                    address: &flag,
                    value: 1,
                    flags: 0,
                },
                MemOp::WaitValue32 {
                    address: &flag,
                    value: 1,
                    condition: WaitCondition::Geq,
                    flags: 0,
                },
            ])?;
            s.copy_device_to_device(&out, &target, 4)
        })
        .expect("capture of a batch");
    let info = graph.info().unwrap();
    assert!(info.nodes.mem_op >= 1, "{:?}", info);
    assert_eq!(info.nodes.memcpy, 2, "{:?}", info);
    for replay in 1..=3u32 {
        host_target[0] = 100 + replay;
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(read_back::<u32>(&stream, &out, 1), [100 + replay]);
        assert_eq!(read_back::<u32>(&stream, &flag, 1), [1]);
    }
    graph.destroy().unwrap();
    host_target.free().unwrap();
    for b in [flag, out, target] {
        b.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.2: graphs that change without a new Graph -------------------------------------------------

/// Floats per buffer of the update tests.
const UPDATE_COUNT: usize = 4096;

/// Inputs of scale_add whose results are exact in f32 (quarters below 25, scales and shifts of
/// small integers), so that replays are compared with `==`.
fn update_inputs() -> Vec<f32> {
    (0..UPDATE_COUNT).map(|i| (i % 97) as f32 * 0.25).collect()
}

/// A zeroed buffer of UPDATE_COUNT floats (ordered on `stream`).
fn zeroed(ctx: &Context, stream: &Stream) -> DeviceBuffer {
    let buffer = DeviceBuffer::alloc(ctx, UPDATE_COUNT * 4, stream).unwrap();
    stream.memset_d32(&buffer, 0, UPDATE_COUNT).unwrap();
    buffer
}

/// scale_add's parameters (scale, shift) in device memory, copied in eagerly: a copy from a
/// Vec would be refused inside a capture.
fn scale_add_params(ctx: &Context, stream: &Stream, scale: f32, shift: f32) -> DeviceBuffer {
    let params = DeviceBuffer::alloc(ctx, 8, stream).unwrap();
    stream.copy_to_device(&params, &[scale, shift]).unwrap();
    params
}

/// Launches scale_add: out = input * params[0] + params[1].
fn scale_add_into(
    scale_add: &Function<'_>,
    out: &DeviceBuffer,
    input: &DeviceBuffer,
    params: &DeviceBuffer,
    stream: &Stream,
) -> Result<(), Error> {
    let n = UPDATE_COUNT as u32;
    // SAFETY: the kernel's four parameters in order; out and input hold n floats, params 2; all
    // outlive the graphs that replay the launch.
    unsafe { scale_add.launch(&LaunchConfig::linear(n, 256), &[out, input, params, &n], stream) }
}

/// Asserts `out` holds inputs * scale + shift.
#[track_caller]
fn assert_scale_add(stream: &Stream, out: &DeviceBuffer, inputs: &[f32], scale: f32, shift: f32, what: &str) {
    let got = read_back::<f32>(stream, out, UPDATE_COUNT);
    let wrong: Vec<(usize, f32, f32)> = inputs
        .iter()
        .zip(&got)
        .enumerate()
        .map(|(i, (&x, &y))| (i, y, x * scale + shift))
        .filter(|&(_, y, want)| y != want)
        .take(3)
        .collect();
    assert!(wrong.is_empty(), "{}: (index, got, want) {:?}", what, wrong);
}

#[test]
fn capture_update_of_the_same_topology_is_in_place() {
    const TEST: &str = "capture_update_of_the_same_topology_is_in_place";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let inputs = update_inputs();
    let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, &stream).unwrap();
    stream.copy_to_device(&input, &inputs).unwrap();
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let (a, b) = (zeroed(&ctx, &stream), zeroed(&ctx, &stream));

    let mut graph = stream
        .capture(&CaptureOptions::default(), |s| scale_add_into(&scale_add, &a, &input, &params, s))
        .expect("capture writing a");
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &a, &inputs, 2.0, 1.0, "a, first capture");
    assert_eq!(graph.info().unwrap().last_update, GraphUpdate::None);
    let (handle, executable) = (graph.as_raw(), graph.native_exec());
    stream.memset_d32(&a, 0, UPDATE_COUNT).unwrap();

    // A new pointer, the same topology.
    let how = stream
        .capture_update(&mut graph, &CaptureOptions::default(), |s| {
            scale_add_into(&scale_add, &b, &input, &params, s)
        })
        .expect("update writing b");
    assert_eq!(how, GraphUpdate::InPlace);
    let info = graph.info().unwrap();
    assert_eq!(
        (info.update_count, info.last_update, info.last_update_result),
        (1, GraphUpdate::InPlace, 0),
        "{:?}",
        info
    );
    assert_eq!(info.nodes.kernel, 1, "{:?}", info);
    assert_eq!(graph.as_raw(), handle, "the update keeps the graph's handle");
    assert_eq!(graph.native_exec(), executable, "in place: the same executable");
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &b, &inputs, 2.0, 1.0, "b, written by the updated graph");
    assert_scale_add(&stream, &a, &inputs, 0.0, 0.0, "a, no longer written");

    // A body that ends the update itself gets no second owner of the graph: the capture ends
    // (and updates the graph), the end is refused, and the graph is dropped once below.
    let e = stream
        .capture_update(&mut graph, &CaptureOptions::default(), |s| {
            scale_add_into(&scale_add, &a, &input, &params, s)?;
            let refused = s.end_capture().expect_err("end_capture of an update capture");
            assert_error(&refused, Status::InvalidState, "Stream::capture_update");
            Err(refused)
        })
        .expect_err("the body's error");
    assert_error(&e, Status::InvalidState, "cgc_capture_end");
    assert_eq!(stream.capture_status().unwrap().0, CaptureStatus::None);
    assert_eq!(graph.info().unwrap().update_count, 2);

    graph.destroy().unwrap();
    module.unload().unwrap();
    for buffer in [input, params, a, b] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn capture_update_of_a_changed_topology_is_instantiated_anew() {
    const TEST: &str = "capture_update_of_a_changed_topology_is_instantiated_anew";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let inputs = update_inputs();
    let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, &stream).unwrap();
    stream.copy_to_device(&input, &inputs).unwrap();
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let other_params = scale_add_params(&ctx, &stream, 3.0, -1.0);
    let (a, b) = (zeroed(&ctx, &stream), zeroed(&ctx, &stream));

    let mut graph = stream
        .capture(&CaptureOptions::default(), |s| scale_add_into(&scale_add, &a, &input, &params, s))
        .expect("capture of one kernel");
    let how = stream
        .capture_update(&mut graph, &CaptureOptions::default(), |s| {
            scale_add_into(&scale_add, &a, &input, &other_params, s)?;
            scale_add_into(&scale_add, &b, &input, &params, s) // one kernel more
        })
        .expect("update to two kernels");
    assert_eq!(how, GraphUpdate::Reinstantiated);
    let info = graph.info().unwrap();
    assert_eq!(
        (info.update_count, info.last_update, info.last_update_result),
        (1, GraphUpdate::Reinstantiated, 2), // 2: CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
        "{:?}",
        info
    );
    assert_eq!(info.nodes.kernel, 2, "{:?}", info);
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &a, &inputs, 3.0, -1.0, "a");
    assert_scale_add(&stream, &b, &inputs, 2.0, 1.0, "b");

    // A body that fails, or panics: the capture ends, its recapture is discarded, and the graph
    // keeps what it had (both kernels, a written with the other parameters).
    let e = stream
        .capture_update(&mut graph, &CaptureOptions::default(), |s| {
            scale_add_into(&scale_add, &a, &input, &params, s)?;
            Err(Error::new(Status::InvalidArgument, "the body gives up"))
        })
        .expect_err("the body's error");
    assert_eq!(e.message(), "the body gives up");
    assert_eq!(e.status(), Some(Status::InvalidArgument));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        let _ = stream.capture_update(&mut graph, &CaptureOptions::default(), |s| -> Result<(), Error> {
            scale_add_into(&scale_add, &a, &input, &params, s)?;
            panic!("the body panics on purpose")
        });
    }));
    assert!(panicked.is_err(), "the body's panic did not go on");
    assert_eq!(stream.capture_status().unwrap().0, CaptureStatus::None);
    assert_eq!(graph.info().unwrap().update_count, 1, "a discarded update counted");
    stream.memset_d32(&a, 0, UPDATE_COUNT).unwrap();
    stream.memset_d32(&b, 0, UPDATE_COUNT).unwrap();
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &a, &inputs, 3.0, -1.0, "a, after the discarded updates");
    assert_scale_add(&stream, &b, &inputs, 2.0, 1.0, "b, after the discarded updates");
    // A reset graph has nothing to update.
    graph.reset().unwrap();
    let e = stream
        .capture_update(&mut graph, &CaptureOptions::default(), |_| Ok(()))
        .expect_err("update of a reset graph");
    assert_error(&e, Status::InvalidState, "cgc_capture_begin");

    graph.destroy().unwrap();
    module.unload().unwrap();
    for buffer in [input, params, other_params, a, b] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn kernels_of_a_graph_can_be_disabled_and_given_new_arguments() {
    const TEST: &str = "kernels_of_a_graph_can_be_disabled_and_given_new_arguments";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let inputs = update_inputs();
    let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, &stream).unwrap();
    stream.copy_to_device(&input, &inputs).unwrap();
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let other_params = scale_add_params(&ctx, &stream, 3.0, -1.0);
    let (a, b, c, d) = (zeroed(&ctx, &stream), zeroed(&ctx, &stream), zeroed(&ctx, &stream), zeroed(&ctx, &stream));

    let mut graph = stream
        .capture(&CaptureOptions::default(), |s| {
            for out in [&a, &b, &c] {
                scale_add_into(&scale_add, out, &input, &params, s)?;
            }
            Ok(())
        })
        .expect("capture of three kernels");
    assert_eq!(graph.info().unwrap().nodes.kernel, 3);
    graph.set_kernel_enabled(1, false).unwrap(); // b's kernel
    let n = UPDATE_COUNT as u32;
    // SAFETY: scale_add's four parameters in order; d and input hold n floats, other_params 2;
    // all outlive the graph.
    unsafe { graph.set_kernel_args(2, &[&d, &input, &other_params, &n]) }.unwrap(); // c's kernel writes d
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &a, &inputs, 2.0, 1.0, "a");
    assert_scale_add(&stream, &b, &inputs, 0.0, 0.0, "b (disabled)");
    assert_scale_add(&stream, &c, &inputs, 0.0, 0.0, "c (its kernel writes d now)");
    assert_scale_add(&stream, &d, &inputs, 3.0, -1.0, "d (new arguments)");
    graph.set_kernel_enabled(1, true).unwrap();
    graph.launch(&stream).unwrap();
    assert_scale_add(&stream, &b, &inputs, 2.0, 1.0, "b (enabled again)");

    let e = graph.set_kernel_enabled(3, false).expect_err("kernel 3 of 3");
    assert_error(&e, Status::InvalidArgument, "3 kernel nodes");
    assert!(e.message().contains("cgc_graph_kernel_node_set_enabled"), "{}", e);
    // SAFETY: refused (no kernel 3) before the arguments are used.
    let e = unsafe { graph.set_kernel_args(3, &[&d, &input, &params, &n]) }.expect_err("kernel 3 of 3");
    assert_error(&e, Status::InvalidArgument, "cgc_graph_kernel_node_set_args");
    graph.reset().unwrap();
    let e = graph.set_kernel_enabled(0, false).expect_err("after reset");
    assert_error(&e, Status::InvalidState, "cgc_graph_kernel_node_set_enabled");

    graph.destroy().unwrap();
    module.unload().unwrap();
    for buffer in [input, params, other_params, a, b, c, d] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.4: a capture cgc did not begin allocates from a pool ------------------------------------

#[test]
fn a_pool_adopts_a_capture_begun_with_the_driver() {
    const TEST: &str = "a_pool_adopts_a_capture_begun_with_the_driver";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let cuda = Cuda::load_and_make_current(0);
    let stream = Stream::new(&ctx).unwrap();
    let side = Stream::new(&ctx).unwrap();
    let pool = Pool::new(&ctx).unwrap();
    let before = ctx.memory_stats(Some(&pool)).unwrap();

    // Nothing captures yet: nothing to adopt, nothing to end.
    let e = pool.adopt_stream_capture(&stream).expect_err("adopting a stream that does not capture");
    assert_error(&e, Status::InvalidState, "cgc_pool_adopt_capture");
    let e = pool.end_adopted_capture().expect_err("ending an adoption that was not begun");
    assert_error(&e, Status::InvalidState, "cgc_pool_end_adopted_capture");

    // A capture begun with the driver, as torch.cuda.graph begins one; the pool adopts it, and
    // cgc's allocation on the stream comes from the pool. The driver's own set writes the block.
    cuda.begin_capture(stream.native());
    // SAFETY: the stream's native CUstream is alive (the Stream owns it).
    unsafe { pool.adopt_capture(stream.native()) }.expect("cgc_pool_adopt_capture");
    let e = pool.adopt_stream_capture(&stream).expect_err("a pool records one capture at a time");
    assert_error(&e, Status::InvalidState, "cgc_pool_adopt_capture");
    let out = DeviceBuffer::alloc(&ctx, BYTES, &stream).expect("cgc_malloc in the adopted capture");
    cuda.memset_d32_async(out.device_ptr(), 2.5f32.to_bits(), N, stream.native());
    let during = ctx.memory_stats(Some(&pool)).unwrap();
    let graph = cuda.end_capture(stream.native());
    pool.end_adopted_capture().expect("cgc_pool_end_adopted_capture");
    let e = pool.end_adopted_capture().expect_err("ending the adoption twice");
    assert_error(&e, Status::InvalidState, "cgc_pool_end_adopted_capture");

    // The pool's memory grew by the block: reserved from the driver, handed out, still live.
    let after = ctx.memory_stats(Some(&pool)).unwrap();
    assert_eq!((before.bytes_reserved, before.bytes_allocated), (0, 0), "a new pool holds nothing: {:?}", before);
    assert!(after.bytes_reserved >= BYTES, "{:?}", after);
    assert!(after.bytes_allocated >= BYTES, "{:?}", after);
    assert_eq!(after.bytes_allocated, during.bytes_allocated, "ending the capture and the adoption frees nothing");
    assert!(after.num_driver_allocs > before.num_driver_allocs, "{:?}", after);

    // The driver's graph, launched with the driver, writes the block cgc gave it.
    cuda.launch_once_and_destroy(graph, stream.native());
    stream.synchronize().unwrap();
    assert!(host(&cuda, &out).iter().all(|&x| x == 2.5), "the replay did not write the adopted block");

    // record_stream_native: a use by another native stream, then the free (not reused before
    // that stream's work is done).
    // SAFETY: the side stream's native CUstream is alive (the Stream owns it).
    unsafe { out.record_stream_native(side.native()) }.expect("cgc_record_stream_native");
    let (address, len) = (out.as_ptr(), out.len());
    out.free().unwrap();
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 0);
    side.synchronize().unwrap();
    // A freed block is no longer one cgc handed out (nothing was allocated since).
    // SAFETY: the stale address is only looked up in cgc's tables (and given up, not freed);
    // the side stream is alive.
    let stale = unsafe { DeviceBuffer::from_raw(address, len) }.unwrap();
    let e = unsafe { stale.record_stream_native(side.native()) }.expect_err("a freed block");
    assert_error(&e, Status::InvalidArgument, "cgc_record_stream_native");
    stale.into_raw();
}

// ---- 1.5: pools of memory registered with a communicator, eager allocation from a pool --------

#[test]
fn a_registered_nccl_pool_serves_eager_and_captured_all_reduces() {
    const TEST: &str = "a_registered_nccl_pool_serves_eager_and_captured_all_reduces";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    if nccl(TEST).is_none() {
        return;
    }
    let cuda = Cuda::load_and_make_current(0);
    let stream = Stream::new(&ctx).unwrap();
    let id = CommId::new().expect("cgc_comm_unique_id");
    let comm = Comm::new(&ctx, 1, &id, 0).expect("cgc_comm_create of a 1-rank communicator");
    const CAPACITY: usize = 8 << 20;
    let (pool, got) =
        Pool::nccl(&comm, CAPACITY - 12345, NcclMemory::Registered).expect("cgc_nccl_pool_create");
    assert!(got <= NcclMemory::Registered, "got {:?}, more than asked", got);
    println!("{}: the pool's memory is {:?}", TEST, got);
    let stats = ctx.memory_stats(Some(&pool)).unwrap();
    assert_eq!(stats.bytes_reserved, CAPACITY, "the capacity rounded up to 2 MiB, at once: {:?}", stats);
    assert_eq!(stats.num_driver_allocs, 1, "{:?}", stats);

    // Eager blocks of the pool; beyond the capacity the pool does not grow.
    let send = pool.alloc(NCCL_N * 4, &stream).expect("cgc_pool_malloc");
    let recv = pool.alloc(NCCL_N * 4, &stream).expect("cgc_pool_malloc");
    assert!(!send.as_ptr().is_null() && send.len() == NCCL_N * 4);
    assert!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated >= 2 * NCCL_N * 4);
    assert!(pool.alloc(0, &stream).unwrap().as_ptr().is_null(), "0 bytes give a null block");
    let e = pool.alloc(CAPACITY, &stream).expect_err("more than the pool holds");
    assert_error(&e, Status::OutOfMemory, "cgc_pool_malloc");
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_reserved, CAPACITY, "the pool never grows");

    // An eager all-reduce over one rank copies send into recv.
    stream.memset_d32(&send, 1.5f32.to_bits(), NCCL_N).unwrap();
    stream.memset_d32(&recv, 0, NCCL_N).unwrap();
    comm.all_reduce(&send, &recv, NCCL_N, DType::Float32, ReduceOp::Sum, &stream).unwrap();
    stream.synchronize().unwrap();
    assert!(host(&cuda, &recv).iter().all(|&x| x == 1.5), "eager all_reduce on the pool's blocks");

    // Captured into the pool, with a temporary of the pool between input and result; Pool::alloc
    // is eager only (the capture's pool decides inside).
    let options = CaptureOptions::new().with_pool(&pool);
    let graph = stream
        .capture(&options, |s| {
            let e = pool.alloc(512, s).expect_err("Pool::alloc inside a capture");
            assert_error(&e, Status::CaptureUnsupported, "cgc_pool_malloc");
            let tmp = DeviceBuffer::alloc(&ctx, NCCL_N * 4, s)?;
            s.copy_device_to_device(&tmp, &send, NCCL_N * 4)?;
            comm.all_reduce(&tmp, &recv, NCCL_N, DType::Float32, ReduceOp::Sum, s)?;
            tmp.free()
        })
        .expect("capture into the NCCL pool");
    assert_eq!(graph.pool().unwrap(), pool);
    for value in [2.0f32, -3.5, 7.25] {
        stream.memset_d32(&send, value.to_bits(), NCCL_N).unwrap();
        stream.memset_d32(&recv, 0, NCCL_N).unwrap();
        graph.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert!(host(&cuda, &recv).iter().all(|&x| x == value), "replay with {}", value);
    }

    // The release is refused while the graph and the blocks hold the pool, and hands it back; the
    // pool holds the communicator.
    let (e, comm) = match comm.try_destroy() {
        Err((e, Some(comm))) => (e, comm),
        other => panic!("destroying the communicator of a live pool: {:?}", other.map_err(|(e, _)| e)),
    };
    assert_error(&e, Status::InvalidState, "cgc_comm_destroy");
    let (e, pool) = match pool.try_release() {
        Err((e, Some(pool))) => (e, pool),
        other => panic!("releasing a pool in use: {:?}", other.map_err(|(e, _)| e)),
    };
    assert_error(&e, Status::InvalidState, "cgc_pool_release");
    graph.launch(&stream).unwrap(); // a refused release changed nothing
    stream.synchronize().unwrap();
    graph.destroy().unwrap();
    let (e, pool) = match pool.try_release() {
        Err((e, Some(pool))) => (e, pool),
        other => panic!("releasing a pool with blocks: {:?}", other.map_err(|(e, _)| e)),
    };
    assert_error(&e, Status::InvalidState, "cgc_pool_release");
    send.free().unwrap();
    recv.free().unwrap();
    let reserved = ctx.memory_stats(None).unwrap().bytes_reserved;
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of an unused NCCL pool");
    assert_eq!(ctx.memory_stats(None).unwrap().bytes_reserved, reserved - CAPACITY, "the arena went back");
    comm.try_destroy().map_err(|(e, _)| e).expect("cgc_comm_destroy after the pool");
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

#[test]
fn eager_blocks_of_an_ordinary_pool() {
    const TEST: &str = "eager_blocks_of_an_ordinary_pool";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let pool = Pool::new(&ctx).unwrap();
    let block = pool.alloc(3 << 20, &stream).expect("cgc_pool_malloc");
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 3 << 20);
    let address = block.as_ptr();
    block.free().unwrap();
    let again = pool.alloc(3 << 20, &stream).unwrap();
    assert_eq!(again.as_ptr(), address, "the freed eager block serves the same stream again");
    again.free().unwrap();
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 0);
    // Refused inside a capture, which allocates from its own pool.
    let graph = stream
        .capture(&CaptureOptions::new(), |s| {
            let e = pool.alloc(512, s).expect_err("Pool::alloc inside a capture");
            assert_error(&e, Status::CaptureUnsupported, "cgc_pool_malloc");
            Ok(())
        })
        .unwrap();
    graph.destroy().unwrap();
    pool.release().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: Pool::claim gives a freed block of a pool back at its address; the same range again is
/// refused (INVALID_STATE: the pool's block holds it), as are a null or unaligned address, 0
/// bytes and memory of the device cache; a 512-byte aligned range inside a freed block is cut
/// out of it at its address; claimed blocks are freed like Pool::alloc's.
#[test]
fn pool_claim_gives_free_memory_back_at_its_address() {
    const TEST: &str = "pool_claim_gives_free_memory_back_at_its_address";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let pool = Pool::new(&ctx).unwrap();
    let first = pool.alloc(4096, &stream).expect("cgc_pool_malloc");
    let second = pool.alloc(8192, &stream).expect("cgc_pool_malloc");
    let (first_at, second_at) = (first.as_ptr(), second.as_ptr());
    first.free().unwrap();
    let claimed = pool.claim(first_at, 4096).expect("cgc_pool_claim of the freed block");
    assert_eq!(claimed.as_ptr(), first_at, "claimed at its address");
    assert_eq!(claimed.len(), 4096);
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 4096 + 8192);
    let e = pool.claim(first_at, 4096).expect_err("the same range again");
    assert_error(&e, Status::InvalidState, "cgc_pool_claim");
    let e = pool.claim(first_at, 512).expect_err("a range inside the claimed block");
    assert_error(&e, Status::InvalidState, "cgc_pool_claim");
    // Arguments, refused whatever the pool holds.
    assert_error(&pool.claim(first_at, 0).expect_err("0 bytes"), Status::InvalidArgument, "cgc_pool_claim");
    let unaligned = (first_at as usize + 256) as *mut std::ffi::c_void;
    assert_error(&pool.claim(unaligned, 512).expect_err("an unaligned address"), Status::InvalidArgument,
                 "cgc_pool_claim");
    assert_error(&pool.claim(std::ptr::null_mut(), 512).expect_err("NULL"), Status::InvalidArgument,
                 "cgc_pool_claim");
    // The device cache's memory is no pool's.
    let cached = DeviceBuffer::alloc(&ctx, 4096, &stream).unwrap();
    let cached_at = cached.as_ptr();
    cached.free().unwrap();
    assert_error(&pool.claim(cached_at, 512).expect_err("memory of the device cache"), Status::InvalidState,
                 "cgc_pool_claim");
    // A sub-range of a freed block, at its address.
    second.free().unwrap();
    let inside = (second_at as usize + 1024) as *mut std::ffi::c_void;
    let sub = pool.claim(inside, 1000).expect("cgc_pool_claim of a range inside a freed block");
    assert_eq!(sub.as_ptr(), inside);
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 4096 + 1024, "rounded up to 512");
    let e = pool.claim(second_at, 2048).expect_err("a range overlapping the claimed sub-range");
    assert_error(&e, Status::InvalidState, "cgc_pool_claim");
    let before = pool.claim(second_at, 1024).expect("the free memory before the sub-range");
    assert_eq!(before.as_ptr(), second_at);

    before.free().unwrap();
    sub.free().unwrap();
    claimed.free().unwrap();
    assert_eq!(ctx.memory_stats(Some(&pool)).unwrap().bytes_allocated, 0);
    pool.release().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: Pool::create_at reserves its range at exactly the base: the first block of a fresh pool
/// is at the base and every block lies inside the range; allocations beyond the capacity are
/// OUT_OF_MEMORY; the release is refused (and hands the pool back) while a block is allocated;
/// once released, a pool made again at the same base gives the same requests the same addresses.
/// An unaligned base or capacity is refused (INVALID_ARGUMENT, "multiples of"), and so is a pool
/// overlapping a live one (INVALID_STATE, "cannot reserve"). The base is the Rust binding's own
/// (Go's and Python's tests use others), in case bindings' tests ever share a process.
#[test]
fn pool_create_at_gives_the_same_addresses_at_the_same_base() {
    const TEST: &str = "pool_create_at_gives_the_same_addresses_at_the_same_base";
    const BASE: usize = 0x6400_0000_0000;
    const CAPACITY: usize = 64 << 20;
    const MIB: usize = 1 << 20;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let base = BASE as *mut std::ffi::c_void;
    let inside = |b: &DeviceBuffer, what: &str| {
        let at = b.as_ptr() as usize;
        assert!(at >= BASE && at + b.len() <= BASE + CAPACITY,
                "{} at {:#x} (+{}) is outside [{:#x}, {:#x})", what, at, b.len(), BASE, BASE + CAPACITY);
        at
    };
    let mut rounds = Vec::new();
    for round in 0..2 {
        let pool = Pool::create_at(&ctx, base, CAPACITY)
            .unwrap_or_else(|e| panic!("round {}: cgc_pool_create_at({:#x}, {}): {}", round, BASE, CAPACITY, e));
        let first = pool.alloc(MIB, &stream).expect("cgc_pool_malloc of 1 MiB");
        let second = pool.alloc(3 * MIB, &stream).expect("cgc_pool_malloc of 3 MiB");
        assert_eq!(first.as_ptr() as usize, BASE, "round {}: a fresh pool's first block is at its base", round);
        let addresses = (inside(&first, "the 1 MiB block"), inside(&second, "the 3 MiB block"));
        assert_ne!(addresses.0, addresses.1);
        if round == 0 {
            // Beyond the capacity: the range never grows past it.
            let e = pool.alloc(CAPACITY, &stream).expect_err("more than the capacity left");
            assert_error(&e, Status::OutOfMemory, "cgc_pool_malloc");
            // The range is taken while the pool lives: another pool cannot reserve part of it.
            let overlap = (BASE + 2 * MIB) as *mut std::ffi::c_void;
            let e = Pool::create_at(&ctx, overlap, 2 * MIB).expect_err("a pool overlapping a live one");
            assert_error(&e, Status::InvalidState, "cgc_pool_create_at");
            assert!(e.message().contains("cannot reserve"), "{}", e);
            // The release is refused while a block is allocated, and hands the pool back.
            let (e, kept) = match pool.try_release() {
                Err((e, Some(kept))) => (e, kept),
                other => panic!("releasing a pool at fixed addresses with blocks: {:?}", other.map_err(|(e, _)| e)),
            };
            assert_error(&e, Status::InvalidState, "cgc_pool_release");
            first.free().unwrap();
            second.free().unwrap();
            stream.synchronize().unwrap();
            kept.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of an unused pool at fixed addresses");
        } else {
            first.free().unwrap();
            second.free().unwrap();
            stream.synchronize().unwrap();
            pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of an unused pool at fixed addresses");
        }
        rounds.push(addresses);
    }
    assert_eq!(rounds[0], rounds[1], "the same requests at the same base get the same addresses");

    // Bases and capacities that are not multiples of 2 MiB.
    let unaligned = (BASE + 4096) as *mut std::ffi::c_void;
    let e = Pool::create_at(&ctx, unaligned, CAPACITY).expect_err("an unaligned base");
    assert_error(&e, Status::InvalidArgument, "cgc_pool_create_at");
    assert!(e.message().contains("multiples of"), "{}", e);
    let e = Pool::create_at(&ctx, base, CAPACITY + 4096).expect_err("an unaligned capacity");
    assert_error(&e, Status::InvalidArgument, "cgc_pool_create_at");
    assert!(e.message().contains("multiples of"), "{}", e);
    assert_error(&Pool::create_at(&ctx, base, 0).expect_err("0 bytes"), Status::InvalidArgument, "cgc_pool_create_at");
    assert_error(&Pool::create_at(&ctx, std::ptr::null_mut(), CAPACITY).expect_err("a null base"),
                 Status::InvalidArgument, "cgc_pool_create_at");

    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: two blocks allocated, one freed: the snapshot lists the first allocated with its
/// rounded size and the size asked, the second's memory free (merged with free neighbours,
/// perhaps), a pool's block in a segment of that pool, and the segments add up to the device's
/// reserved bytes.
#[test]
fn memory_snapshot_lists_allocated_and_freed_blocks() {
    const TEST: &str = "memory_snapshot_lists_allocated_and_freed_blocks";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let kept = DeviceBuffer::alloc(&ctx, 1000, &stream).unwrap();
    let freed = DeviceBuffer::alloc(&ctx, 4096, &stream).unwrap();
    let freed_at = freed.device_ptr();
    freed.free().unwrap();
    let pool = Pool::new(&ctx).unwrap();
    let pooled = pool.alloc(8192, &stream).expect("cgc_pool_malloc");
    stream.synchronize().unwrap();
    let snapshot = ctx.memory_snapshot().expect("cgc_memory_snapshot");
    let reserved = ctx.memory_stats(None).unwrap().bytes_reserved;

    assert_eq!(snapshot.iter().map(|s| s.size).sum::<usize>(), reserved, "every segment is listed");
    for pair in snapshot.windows(2) {
        assert!(pair[0].address < pair[1].address, "sorted by address");
    }
    for segment in &snapshot {
        assert_eq!(segment.blocks.iter().map(|b| b.size).sum::<usize>(), segment.size);
        let allocated: usize =
            segment.blocks.iter().filter(|b| b.state == BlockState::Allocated).map(|b| b.size).sum();
        assert_eq!(allocated, segment.allocated_bytes);
        assert_eq!(segment.blocks[0].address, segment.address, "a segment starts with its first block");
    }
    let find = |address: u64| {
        snapshot
            .iter()
            .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
            .find(|(_, b)| b.address <= address && address < b.address + b.size as u64)
            .unwrap_or_else(|| panic!("no block holds {:#x}", address))
    };
    let (segment, block) = find(kept.device_ptr());
    assert_eq!(block.address, kept.device_ptr());
    assert_eq!((block.size, block.requested, block.state), (1024, 1000, BlockState::Allocated));
    assert!(segment.small);
    assert_eq!(segment.pool, None, "the device cache's segment");
    let (_, block) = find(freed_at);
    assert_eq!((block.state, block.requested), (BlockState::Free, 0));
    let (segment, block) = find(pooled.device_ptr());
    assert_eq!((block.address, block.state), (pooled.device_ptr(), BlockState::Allocated));
    assert_eq!(segment.pool, Some(PoolId::of(&pool)));

    pooled.free().unwrap();
    kept.free().unwrap();
    pool.release().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.6: saved graphs ---------------------------------------------------------------------------

/// scale_add's work captured into `pool` with everything it reads and writes allocated in the
/// capture from that pool: its input (1.5 everywhere) and parameters (scale 2, shift 2) written
/// by sets in the graph itself and freed in the capture (kept for the graph), and its output,
/// which the graph gives back (5.0 everywhere). Nothing outside the pool is reached, so the graph
/// can be saved when the pool is at fixed addresses.
fn capture_scale_add_in_the_pool(
    ctx: &Context,
    stream: &Stream,
    scale_add: &Function<'_>,
    pool: &Pool,
) -> Result<(cgc::Graph, DeviceBuffer), Error> {
    let mut out = None;
    let graph = stream.capture(&CaptureOptions::new().with_pool(pool), |s| {
        let input = DeviceBuffer::alloc(ctx, UPDATE_COUNT * 4, s)?;
        let params = DeviceBuffer::alloc(ctx, 8, s)?;
        let o = DeviceBuffer::alloc(ctx, UPDATE_COUNT * 4, s)?;
        s.memset_d32(&input, 1.5f32.to_bits(), UPDATE_COUNT)?;
        s.memset_d32(&params, 2.0f32.to_bits(), 2)?;
        scale_add_into(scale_add, &o, &input, &params, s)?;
        input.free()?;
        params.free()?;
        out = Some(o);
        Ok(())
    })?;
    Ok((graph, out.expect("the capture's output")))
}

/// 1.6: a graph captured into a pool at fixed addresses is saved to bytes (with its kernel's
/// module and the pool's layout), described by SavedInfo::read, and, once the graph, its output
/// and its pool are all gone (the range given back), restored from the bytes: one new Graph and
/// one new Pool at the same base, the output allocated again at its address (the application's
/// to free), and the restored graph, launched, writes there what the first one wrote. The base
/// is the Rust binding's own (Go's and Python's tests use others).
#[test]
fn a_saved_graph_is_restored_at_the_same_addresses() {
    const TEST: &str = "a_saved_graph_is_restored_at_the_same_addresses";
    const BASE: usize = 0x6800_0000_0000;
    const CAPACITY: usize = 64 << 20;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).expect("cgc_module_load of scale_add.ptx");
    let scale_add = module.function("scale_add").unwrap();
    let pool = Pool::create_at(&ctx, BASE as *mut std::ffi::c_void, CAPACITY)
        .unwrap_or_else(|e| panic!("cgc_pool_create_at({:#x}, {}): {}", BASE, CAPACITY, e));
    let (graph, out) = capture_scale_add_in_the_pool(&ctx, &stream, &scale_add, &pool)
        .expect("capture into the pool at fixed addresses");
    let at = out.as_ptr();
    assert!(
        (BASE..BASE + CAPACITY).contains(&(at as usize)),
        "the output at {:p} is outside the pool's range",
        at
    );
    graph.launch(&stream).unwrap();
    let first = read_back::<f32>(&stream, &out, UPDATE_COUNT);
    assert!(first.iter().all(|&x| x == 5.0), "1.5 * 2 + 2: {:?}", &first[..4]);

    let data = cgc::save_graphs(&[&graph], &[]).expect("cgc_graphs_save");
    let info = cgc::SavedInfo::read(&data).expect("cgc_saved_info");
    assert_eq!((info.n_graphs, info.n_pools, info.n_modules), (1, 1, 1), "{:?}", info);
    assert!(info.pool_bytes >= 2 << 20, "the pool backs at least one 2 MiB granule: {:?}", info);
    assert!(info.n_nodes >= 3 && info.image_bytes > 0 && info.compute_major > 0, "{:?}", info);
    assert!(info.driver_version >= 12040, "saving needs CUDA 12.4: {:?}", info);
    // Only a verifying save measures the device memory a restore takes besides the pools.
    assert_eq!((info.restore_bytes, info.family_restore_bytes), (0, 0), "{:?}", info);
    // The pool may be named again among the extra pools: it is saved once.
    let again = cgc::save_graphs(&[&graph], &[&pool]).expect("cgc_graphs_save with the graph's pool again");
    assert_eq!(cgc::SavedInfo::read(&again).expect("cgc_saved_info").n_pools, 1);
    let e = cgc::SavedInfo::read(&data[..data.len() - 1]).expect_err("a truncated buffer");
    assert_error(&e, Status::SavedMismatch, "cgc_saved_info");

    // Everything goes: the graph, the output, the pool (its range given back), the module.
    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the saved pool");
    module.unload().unwrap();

    let (mut graphs, mut pools) = ctx.restore_graphs(&data).expect("cgc_graphs_restore");
    assert_eq!((graphs.len(), pools.len()), (1, 1));
    let (graph, pool) = (graphs.pop().unwrap(), pools.pop().unwrap());
    assert!(graph.pool().expect("the restored graph's pool") == pool, "the graph allocates from the restored pool");
    // The output is allocated again at its address, in the restored pool, the application's.
    let snapshot = ctx.memory_snapshot().expect("cgc_memory_snapshot");
    let (segment, block) = snapshot
        .iter()
        .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
        .find(|(_, b)| b.address == at as u64)
        .unwrap_or_else(|| panic!("no block at the saved output's address {:p}", at));
    assert_eq!((block.state, segment.pool), (BlockState::Allocated, Some(PoolId::of(&pool))));
    // A range held by the restore again: the restore itself cannot run twice.
    let e = ctx.restore_graphs(&data).expect_err("a second restore while the first one's pool holds the range");
    assert_eq!(e.status(), Some(Status::InvalidState), "{}", e);
    // SAFETY: the restore claimed the block at `at` for the application, and nothing else frees it.
    let out = unsafe { DeviceBuffer::from_raw(at, UPDATE_COUNT * 4) }.unwrap();
    stream.memset_d32(&out, 0, UPDATE_COUNT).unwrap();
    assert!(read_back::<f32>(&stream, &out, UPDATE_COUNT).iter().all(|&x| x == 0.0));
    graph.launch(&stream).expect("launch of the restored graph");
    stream.synchronize().unwrap();
    let restored = read_back::<f32>(&stream, &out, UPDATE_COUNT);
    assert!(bits(&restored) == bits(&first), "the restored graph wrote {:?}", &restored[..4]);

    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the restored pool");
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: a verifying save (save_graphs_with, SaveOptions::with_verify): the graph rebuilt from the
/// saved bytes and replayed beside the graph itself, from the same contents of its pool, writes
/// the same bytes (scale_add's graph is deterministic: its own sets write the input and
/// parameters its kernel reads, and nothing else runs on the pool meanwhile), so the save
/// succeeds with the bytes of a save without verifying but for the device memory it measured
/// on the rebuild (family_restore_bytes at most restore_bytes, which may be 0: a graph this
/// small fits in memory the driver holds already; both 0 in the plain save), and the pool ends
/// as the graph's own replay left it: the output, zeroed before the save, holds 5.0 again. The
/// base is the Rust binding's own.
#[test]
fn a_verifying_save_replays_a_deterministic_graph_beside_its_rebuild() {
    const TEST: &str = "a_verifying_save_replays_a_deterministic_graph_beside_its_rebuild";
    const BASE: usize = 0x68C0_0000_0000;
    const CAPACITY: usize = 64 << 20;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).expect("cgc_module_load of scale_add.ptx");
    let scale_add = module.function("scale_add").unwrap();
    let pool = Pool::create_at(&ctx, BASE as *mut std::ffi::c_void, CAPACITY)
        .unwrap_or_else(|e| panic!("cgc_pool_create_at({:#x}, {}): {}", BASE, CAPACITY, e));
    let (graph, out) = capture_scale_add_in_the_pool(&ctx, &stream, &scale_add, &pool)
        .expect("capture into the pool at fixed addresses");
    graph.launch(&stream).unwrap();
    let first = read_back::<f32>(&stream, &out, UPDATE_COUNT);
    assert!(first.iter().all(|&x| x == 5.0), "1.5 * 2 + 2: {:?}", &first[..4]);
    let plain = cgc::save_graphs(&[&graph], &[]).expect("cgc_graphs_save");

    // The output zeroed, the set finished before the save copies the pool.
    stream.memset_d32(&out, 0, UPDATE_COUNT).unwrap();
    stream.synchronize().unwrap();
    let verify = cgc::SaveOptions::new().with_verify(true);
    let data = cgc::save_graphs_with(&[&graph], &[], &verify).expect("cgc_graphs_save with CGC_SAVE_VERIFY");
    // Only a verifying save measures what a restore takes on the device besides the pools (its
    // modules and executables): each graph its own, or one executable for each structure.
    let measured = cgc::SavedInfo::read(&data).expect("cgc_saved_info of the verifying save");
    let unmeasured = cgc::SavedInfo::read(&plain).expect("cgc_saved_info of the plain save");
    assert!(measured.family_restore_bytes <= measured.restore_bytes, "{:?}", measured);
    assert_eq!((unmeasured.restore_bytes, unmeasured.family_restore_bytes), (0, 0), "{:?}", unmeasured);
    assert_eq!(
        cgc::SavedInfo { restore_bytes: 0, family_restore_bytes: 0, ..measured },
        unmeasured,
        "the rest of the header is a plain save's"
    );
    // The bytes are the plain save's but for those two 8-byte fields of the header.
    assert_eq!(data.len(), plain.len(), "a verifying save wrote another size");
    let differing: Vec<usize> = (0..data.len()).filter(|&k| data[k] != plain[k]).collect();
    if let (Some(&from), Some(&to)) = (differing.first(), differing.last()) {
        assert!(to - from < 16, "a verifying save wrote other bytes, from offset {} to {}", from, to);
    }
    // Whatever the save copied back to the pool has landed before the stream reads it.
    ctx.synchronize().unwrap();
    let after = read_back::<f32>(&stream, &out, UPDATE_COUNT);
    assert!(bits(&after) == bits(&first), "after the verifying save the output holds {:?}", &after[..4]);
    // The graph's pool named again among the extra pools: saved once, verified as before.
    let again = cgc::save_graphs_with(&[&graph], &[&pool], &verify)
        .expect("cgc_graphs_save with CGC_SAVE_VERIFY and the graph's pool again");
    let again_info = cgc::SavedInfo::read(&again).expect("cgc_saved_info");
    assert_eq!(again_info.n_pools, 1);
    assert!(again_info.family_restore_bytes <= again_info.restore_bytes, "{:?}", again_info);

    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the saved pool");
    module.unload().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: a graph captured into an ordinary pool (its memory not at fixed addresses) is refused by
/// the save with NOT_SAVABLE, naming the call, and so is one whose kernel reads memory outside
/// its pool at fixed addresses (the device cache's).
#[test]
fn a_graph_of_an_ordinary_pool_is_not_savable() {
    const TEST: &str = "a_graph_of_an_ordinary_pool_is_not_savable";
    const BASE: usize = 0x6840_0000_0000;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();

    let ordinary = Pool::new(&ctx).unwrap();
    let (graph, out) = capture_scale_add_in_the_pool(&ctx, &stream, &scale_add, &ordinary).expect("capture");
    graph.launch(&stream).unwrap();
    assert!(read_back::<f32>(&stream, &out, UPDATE_COUNT).iter().all(|&x| x == 5.0));
    let e = cgc::save_graphs(&[&graph], &[]).expect_err("a graph of an ordinary pool");
    assert_error(&e, Status::NotSavable, "cgc_graphs_save");
    graph.destroy().unwrap();
    out.free().unwrap();
    ordinary.release().unwrap();

    // At fixed addresses, but the kernel reads parameters of the device cache.
    let pool = Pool::create_at(&ctx, BASE as *mut std::ffi::c_void, 64 << 20).expect("cgc_pool_create_at");
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let mut out = None;
    let graph = stream
        .capture(&CaptureOptions::new().with_pool(&pool), |s| {
            let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, s)?;
            let o = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, s)?;
            s.memset_d32(&input, 1.5f32.to_bits(), UPDATE_COUNT)?;
            scale_add_into(&scale_add, &o, &input, &params, s)?;
            input.free()?;
            out = Some(o);
            Ok(())
        })
        .expect("capture reading the device cache");
    let e = cgc::save_graphs(&[&graph], &[]).expect_err("a kernel argument outside the pools");
    assert_error(&e, Status::NotSavable, "cgc_graphs_save");
    graph.destroy().unwrap();
    out.unwrap().free().unwrap();
    params.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release");
    module.unload().unwrap();
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

// ---- 1.6: families (graphs of one structure sharing one executable) -----------------------------

/// Launches scale_add over the first `n` floats: out = input * params[0] + params[1], a grid of
/// n / 256 blocks (rounded up).
fn scale_add_n(
    scale_add: &Function<'_>,
    out: &DeviceBuffer,
    input: &DeviceBuffer,
    params: &DeviceBuffer,
    n: u32,
    stream: &Stream,
) -> Result<(), Error> {
    // SAFETY: the kernel's four parameters in order; out and input hold at least n floats,
    // params 2; all outlive the graphs that replay the launch.
    unsafe { scale_add.launch(&LaunchConfig::linear(n, 256), &[out, input, params, &n], stream) }
}

/// Zeroes `out`, launches `graph` and checks `out`: its first `n` floats inputs * scale + shift,
/// the rest untouched (0).
#[track_caller]
#[allow(clippy::too_many_arguments)]
fn launch_and_check(
    graph: &cgc::Graph,
    stream: &Stream,
    out: &DeviceBuffer,
    inputs: &[f32],
    n: usize,
    scale: f32,
    shift: f32,
    what: &str,
) {
    stream.memset_d32(out, 0, UPDATE_COUNT).unwrap();
    graph.launch(stream).unwrap_or_else(|e| panic!("{}: launch: {}", what, e));
    let want: Vec<f32> = inputs
        .iter()
        .enumerate()
        .map(|(i, &x)| if i < n { x * scale + shift } else { 0.0 })
        .collect();
    let got = read_back::<f32>(stream, out, UPDATE_COUNT);
    let wrong: Vec<(usize, f32, f32)> = got
        .iter()
        .zip(&want)
        .enumerate()
        .filter(|&(_, (y, w))| y != w)
        .map(|(i, (&y, &w))| (i, y, w))
        .take(3)
        .collect();
    assert!(wrong.is_empty(), "{}: (index, got, want) {:?}", what, wrong);
}

/// 1.6: two graphs of one structure (scale_add, with other buffers, parameters and grid) share
/// one executable after share_executable: both count a family of 2, and each launch runs the
/// launched graph's own nodes, in any order. A member takes no per-node updates nor updates by
/// capture; joining again does nothing; the leader's reset leaves the executable to the member.
#[test]
fn graphs_of_one_structure_share_one_executable() {
    const TEST: &str = "graphs_of_one_structure_share_one_executable";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let inputs = update_inputs();
    let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, &stream).unwrap();
    stream.copy_to_device(&input, &inputs).unwrap();
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let other_params = scale_add_params(&ctx, &stream, 3.0, -1.0);
    let (a, b) = (zeroed(&ctx, &stream), zeroed(&ctx, &stream));
    let (n_a, n_b) = (UPDATE_COUNT, UPDATE_COUNT / 2);

    let mut leader = stream
        .capture(&CaptureOptions::default(), |s| scale_add_n(&scale_add, &a, &input, &params, n_a as u32, s))
        .expect("capture writing a");
    let mut member = stream
        .capture(&CaptureOptions::default(), |s| {
            scale_add_n(&scale_add, &b, &input, &other_params, n_b as u32, s)
        })
        .expect("capture writing half of b");
    assert_eq!(leader.info().unwrap().family_size, 1, "a graph with its own executable");
    assert_ne!(leader.native_exec(), member.native_exec());

    member.share_executable(&leader).expect("cgc_graph_share_executable");
    for (graph, what) in [(&leader, "leader"), (&member, "member")] {
        let info = graph.info().unwrap();
        assert_eq!((info.family_size, info.family_result), (2, 0), "{}: {:?}", what, info);
    }
    assert_eq!(leader.native_exec(), member.native_exec(), "one executable");
    for round in 0..3 {
        launch_and_check(&member, &stream, &b, &inputs, n_b, 3.0, -1.0, &format!("member, round {}", round));
        launch_and_check(&leader, &stream, &a, &inputs, n_a, 2.0, 1.0, &format!("leader, round {}", round));
    }
    launch_and_check(&leader, &stream, &a, &inputs, n_a, 2.0, 1.0, "leader again (no switch)");
    member.upload(&stream).expect("upload of a member");
    launch_and_check(&member, &stream, &b, &inputs, n_b, 3.0, -1.0, "member after its upload");
    assert_eq!((leader.info().unwrap().replay_count, member.info().unwrap().replay_count), (4, 4));
    // Joining a family it is in already: nothing changes.
    member.share_executable(&leader).expect("a member joins again");
    assert_eq!(member.info().unwrap().family_size, 2);

    // Refusals: itself as leader; per-node updates and updates by capture of a member.
    let e = leader.share_executable(&leader).expect_err("the graph itself as its leader");
    assert_error(&e, Status::InvalidArgument, "cgc_graph_share_executable");
    let e = member.set_kernel_enabled(0, false).expect_err("a per-node update of a member");
    assert_error(&e, Status::InvalidState, "family");
    let e = stream
        .capture_update(&mut member, &CaptureOptions::default(), |s| {
            scale_add_n(&scale_add, &b, &input, &params, n_b as u32, s)
        })
        .expect_err("an update by capture of a member");
    assert_error(&e, Status::InvalidState, "family");
    launch_and_check(&member, &stream, &b, &inputs, n_b, 3.0, -1.0, "member after the refusals");

    // The leader goes first: the member keeps the executable.
    leader.reset().unwrap();
    assert_eq!(leader.info().unwrap().family_size, 0);
    assert_eq!(member.info().unwrap().family_size, 1);
    launch_and_check(&member, &stream, &b, &inputs, n_b, 3.0, -1.0, "member after the leader's reset");
    let e = member.share_executable(&leader).expect_err("a reset leader");
    assert_error(&e, Status::InvalidState, "cgc_graph_share_executable");

    member.destroy().unwrap();
    leader.destroy().unwrap();
    stream.synchronize().unwrap();
    module.unload().unwrap();
    for buffer in [input, params, other_params, a, b] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: a graph of another structure (one kernel more) cannot join: NOT_SUPPORTED, naming the
/// call; it keeps its own executable, its family_result says why (not 0) and both graphs still
/// run their own nodes.
#[test]
fn a_graph_of_another_structure_cannot_share() {
    const TEST: &str = "a_graph_of_another_structure_cannot_share";
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let inputs = update_inputs();
    let input = DeviceBuffer::alloc(&ctx, UPDATE_COUNT * 4, &stream).unwrap();
    stream.copy_to_device(&input, &inputs).unwrap();
    let params = scale_add_params(&ctx, &stream, 2.0, 1.0);
    let other_params = scale_add_params(&ctx, &stream, 3.0, -1.0);
    let (a, b, c) = (zeroed(&ctx, &stream), zeroed(&ctx, &stream), zeroed(&ctx, &stream));
    let n = UPDATE_COUNT as u32;

    let leader = stream
        .capture(&CaptureOptions::default(), |s| scale_add_n(&scale_add, &a, &input, &params, n, s))
        .expect("capture of one kernel");
    let other = stream
        .capture(&CaptureOptions::default(), |s| {
            scale_add_n(&scale_add, &b, &input, &other_params, n, s)?;
            scale_add_n(&scale_add, &c, &input, &params, n, s) // one kernel more
        })
        .expect("capture of two kernels");
    let e = other.share_executable(&leader).expect_err("a graph of another structure");
    assert_error(&e, Status::NotSupported, "cgc_graph_share_executable");
    let info = other.info().unwrap();
    assert_ne!(info.family_result, 0, "{:?}", info);
    assert_eq!(info.family_size, 1, "{:?}", info);
    assert_eq!(leader.info().unwrap().family_result, 0);
    assert_ne!(leader.native_exec(), other.native_exec());
    launch_and_check(&other, &stream, &b, &inputs, UPDATE_COUNT, 3.0, -1.0, "b, of the refused graph");
    assert_scale_add(&stream, &c, &inputs, 2.0, 1.0, "c, of the refused graph");
    launch_and_check(&leader, &stream, &a, &inputs, UPDATE_COUNT, 2.0, 1.0, "a, of the leader");

    other.destroy().unwrap();
    leader.destroy().unwrap();
    stream.synchronize().unwrap();
    module.unload().unwrap();
    for buffer in [input, params, other_params, a, b, c] {
        buffer.free().unwrap();
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: two graphs of one structure captured into a pool at fixed addresses, saved, and restored
/// with RestoreOptions::with_families (on cgc's choice of threads, then with_threads(1)): the
/// restored graphs share one executable (a family of 2) and each launch writes the launched
/// graph's own output; with_threads(65) is refused. The base is the Rust binding's own.
#[test]
fn a_restore_with_families_shares_one_executable() {
    const TEST: &str = "a_restore_with_families_shares_one_executable";
    const BASE: usize = 0x6880_0000_0000;
    const CAPACITY: usize = 64 << 20;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let ptx = CString::new(SCALE_ADD_PTX).unwrap();
    let module = Module::from_ptx(&ctx, &ptx).unwrap();
    let scale_add = module.function("scale_add").unwrap();
    let pool = Pool::create_at(&ctx, BASE as *mut std::ffi::c_void, CAPACITY)
        .unwrap_or_else(|e| panic!("cgc_pool_create_at({:#x}, {}): {}", BASE, CAPACITY, e));
    let (first, out0) = capture_scale_add_in_the_pool(&ctx, &stream, &scale_add, &pool).expect("first capture");
    let (second, out1) = capture_scale_add_in_the_pool(&ctx, &stream, &scale_add, &pool).expect("second capture");
    let at = [out0.as_ptr(), out1.as_ptr()];
    assert_ne!(at[0], at[1]);
    let data = cgc::save_graphs(&[&first, &second], &[]).expect("cgc_graphs_save");
    first.destroy().unwrap();
    second.destroy().unwrap();
    out0.free().unwrap();
    out1.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the saved pool");
    module.unload().unwrap();

    // More than 64 threads are refused before anything is made; on the calling thread alone
    // (with_threads(1)) the restore gives the same family and outputs as on cgc's choice.
    let families = cgc::RestoreOptions::new().with_families(true);
    let e = ctx.restore_graphs_with(&data, &families.with_threads(65)).expect_err("a restore on 65 threads");
    assert_eq!(e.status(), Some(Status::InvalidArgument), "{}", e);
    assert!(e.message().contains("options->threads is 65"), "{}", e);
    for options in [families, families.with_threads(1)] {
        let (graphs, mut pools) = ctx.restore_graphs_with(&data, &options)
            .unwrap_or_else(|e| panic!("cgc_graphs_restore with {:?}: {}", options, e));
        assert_eq!((graphs.len(), pools.len()), (2, 1));
        for (i, graph) in graphs.iter().enumerate() {
            let info = graph.info().unwrap();
            assert_eq!((info.family_size, info.family_result), (2, 0), "restored graph {}: {:?}", i, info);
        }
        assert_eq!(graphs[0].native_exec(), graphs[1].native_exec(), "one executable");
        // SAFETY: the restore claimed the blocks at `at` for the application, and nothing else
        // frees them.
        let outs: Vec<DeviceBuffer> =
            at.iter().map(|&p| unsafe { DeviceBuffer::from_raw(p, UPDATE_COUNT * 4) }.unwrap()).collect();
        for round in 0..2 {
            for (i, graph) in graphs.iter().enumerate().rev() {
                for out in &outs {
                    stream.memset_d32(out, 0, UPDATE_COUNT).unwrap();
                }
                graph.launch(&stream).unwrap();
                let (mine, theirs) = (&outs[i], &outs[1 - i]);
                let got = read_back::<f32>(&stream, mine, UPDATE_COUNT);
                assert!(got.iter().all(|&x| x == 5.0), "round {}, graph {}: {:?}", round, i, &got[..4]);
                let other = read_back::<f32>(&stream, theirs, UPDATE_COUNT);
                assert!(other.iter().all(|&x| x == 0.0), "round {}: graph {} wrote the other's output", round, i);
            }
        }

        for graph in graphs {
            graph.destroy().unwrap();
        }
        for out in outs {
            out.free().unwrap();
        }
        stream.synchronize().unwrap();
        pools.pop().unwrap().try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the restored pool");
    }
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}

/// 1.6: a graph that draws uniform numbers from a generator (seed 1234) into its pool at fixed
/// addresses is saved with the generator's state after one replay (SavedInfo::n_generators 1),
/// then replayed twice more, its outputs recorded. Once the graph, its output, its pool and the
/// generator are all gone, restore_graphs_with_generators hands back the generator created again
/// at that state (seed 1234, offset one replay's draws: DRAWS rounded up to a multiple of 4), and
/// the restored graph's two launches write, word for word, what the saving process's two replays
/// wrote, each advancing the generator by one replay's draws. Dropping the Rng leaves the graph
/// drawing; a plain restore_graphs (no generators asked for) draws from the saved state too. The
/// base is the Rust binding's own.
#[test]
fn a_graph_that_draws_is_restored_with_its_generator() {
    const TEST: &str = "a_graph_that_draws_is_restored_with_its_generator";
    const BASE: usize = 0x6E00_0000_0000;
    const CAPACITY: usize = 64 << 20;
    const SEED: u64 = 1234;
    const DRAWS: usize = 1001; // one replay advances the offset by 1004
    const PER_REPLAY: u64 = (DRAWS as u64 + 3) / 4 * 4;
    let _serial = serial();
    let ctx = match gpu(TEST) {
        Some(c) => c,
        None => return,
    };
    let stream = Stream::new(&ctx).unwrap();
    let rng = Rng::new(&ctx, SEED).unwrap();
    let pool = Pool::create_at(&ctx, BASE as *mut std::ffi::c_void, CAPACITY)
        .unwrap_or_else(|e| panic!("cgc_pool_create_at({:#x}, {}): {}", BASE, CAPACITY, e));
    let mut out = None;
    let graph = stream
        .capture(&CaptureOptions::new().with_pool(&pool), |s| {
            let o = DeviceBuffer::alloc(&ctx, DRAWS * 4, s)?;
            rng.uniform(&o, DRAWS, s)?;
            out = Some(o);
            Ok(())
        })
        .expect("capture of a draw into the pool at fixed addresses");
    let out = out.expect("the capture's output");
    let at = out.as_ptr();
    assert!((BASE..BASE + CAPACITY).contains(&(at as usize)), "the output at {:p} is outside the pool", at);
    graph.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(rng.state().unwrap(), (SEED, PER_REPLAY), "one replay draws {} numbers", DRAWS);

    let data = cgc::save_graphs(&[&graph], &[]).expect("cgc_graphs_save of a graph that draws");
    let info = cgc::SavedInfo::read(&data).expect("cgc_saved_info");
    assert_eq!((info.n_graphs, info.n_pools, info.n_generators), (1, 1, 1), "{:?}", info);
    // What the saving process's next two replays write.
    let mut want: Vec<Vec<u32>> = Vec::new();
    for _ in 0..2 {
        graph.launch(&stream).unwrap();
        want.push(read_back::<u32>(&stream, &out, DRAWS));
    }
    assert!(want[0] != want[1], "two replays drew the same numbers");
    assert!(want.iter().flatten().all(|&w| (0.0..1.0).contains(&f32::from_bits(w))), "a draw outside [0, 1)");

    // Everything goes: the graph, the output, the pool (its range given back), the generator.
    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the saved pool");
    rng.destroy().unwrap();

    let (mut graphs, mut pools, mut generators) = ctx
        .restore_graphs_with_generators(&data, &cgc::RestoreOptions::new())
        .expect("cgc_graphs_restore with room for the generators");
    assert_eq!((graphs.len(), pools.len(), generators.len()), (1, 1, 1));
    let (graph, pool, rng) = (graphs.pop().unwrap(), pools.pop().unwrap(), generators.pop().unwrap());
    assert_eq!(rng.state().unwrap(), (SEED, PER_REPLAY), "the generator as it was at the save");
    // SAFETY: the restore claimed the block at `at` for the application, and nothing else frees it.
    let out = unsafe { DeviceBuffer::from_raw(at, DRAWS * 4) }.unwrap();
    for (i, words) in want.iter().enumerate() {
        graph.launch(&stream).expect("launch of the restored graph");
        let got = read_back::<u32>(&stream, &out, DRAWS);
        if let Some(k) = (0..DRAWS).find(|&k| got[k] != words[k]) {
            panic!("restored replay {}: word {} is {:#010x}, the saving process drew {:#010x}", i, k, got[k],
                   words[k]);
        }
    }
    assert_eq!(rng.state().unwrap(), (SEED, 3 * PER_REPLAY), "each replay advances the generator");
    // The caller's reference goes; the graph keeps its own and draws on.
    rng.destroy().unwrap();
    graph.launch(&stream).expect("a launch after the generator's handle went");
    stream.synchronize().unwrap();
    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the restored pool");

    // A plain restore leaves the generator to the graph alone, at the same saved state.
    let (mut graphs, mut pools) = ctx.restore_graphs(&data).expect("cgc_graphs_restore without the generators");
    let (graph, pool) = (graphs.pop().unwrap(), pools.pop().unwrap());
    // SAFETY: as above, for this restore's block.
    let out = unsafe { DeviceBuffer::from_raw(at, DRAWS * 4) }.unwrap();
    graph.launch(&stream).unwrap();
    assert!(read_back::<u32>(&stream, &out, DRAWS) == want[0], "a plain restore's first replay");
    graph.destroy().unwrap();
    out.free().unwrap();
    stream.synchronize().unwrap();
    pool.try_release().map_err(|(e, _)| e).expect("cgc_pool_release of the restored pool");
    stream.destroy().unwrap();
    ctx.destroy().unwrap();
}
