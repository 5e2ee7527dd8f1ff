//! GPU tests. Each prints "skipping: <reason>" and returns when cgc finds no GPU (Rust tests
//! cannot mark themselves skipped at run time). Find libcgc through CGC_LIBRARY.
//!
//! They run one at a time (GPU_LOCK): a Global-mode capture is broken by an unsafe call from
//! any thread, so one test's synchronisation must not overlap another test's capture.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use cgc::{
    CaptureMode, CaptureOptions, CaptureStatus, Comm, CommId, Context, DType, DeviceBuffer, Error,
    Event, ReduceOp, Rng, Status, Stream,
};
use common::Cuda;

const N: usize = 1 << 16;
const BYTES: usize = N * 4;

static GPU_LOCK: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the next test must still run.
    GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0's context, or None after printing why the test is skipped.
fn gpu(test: &str) -> Option<Context> {
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
