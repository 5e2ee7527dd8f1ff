//! The work a graph is made of, with cgc's Rust binding (the Rust twin of
//! examples/c/graph_work.c).
//!
//! Loads the examples' own kernel (examples/kernels/scale_add.ptx, built into this binary),
//! copies the input in, and captures one graph on two streams with a fork/join:
//!   origin: set flag = 0, copy the per-replay parameters in from page-locked host memory,
//!           fork ->
//!   side:   kernel out = in * params[0] + params[1], write flag = 1 (a stream memory operation),
//!           join ->
//!   origin: wait until flag == 1, copy out to page-locked host memory, host function (counts
//!           replays).
//! Then replays it three times with new parameters written into host memory between replays
//! (no recapture), checking every output on the host, and prints the graph's nodes by kind.
//! Without a GPU it prints cgc's message and exits with status 1.
//!
//! Run: CGC_LIBRARY=/path/to/libcgc.so.1 cargo run --example graph_work
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cgc::{
    CaptureOptions, Context, DeviceBuffer, Event, HostBuffer, LaunchConfig, Module, Stream,
    WaitCondition,
};

const COUNT: usize = 4096; // floats in and out
const REPLAYS: usize = 3;
const BLOCK: u32 = 256; // threads per block of the kernel

/// out[i] = in[i] * params[0] + params[1] (examples/kernels/scale_add.cu). In the binary, so
/// that it runs from anywhere; the driver compiles the PTX for whatever GPU it finds.
const SCALE_ADD_PTX: &str = include_str!("../kernels/scale_add.ptx");

fn main() {
    match cgc::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => {
            println!("cgc graph-work example: no GPU here (cgc_device_count found no device)");
            std::process::exit(1);
        }
        Err(e) => {
            println!("cgc graph-work example: no GPU here\n  {}", e);
            std::process::exit(1);
        }
    }
    match run() {
        Ok(0) => println!("ok: every replay saw its own parameters"),
        Ok(failures) => {
            eprintln!("FAILED: {} wrong values or counts", failures);
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("cgc graph-work example failed: {}", e);
            std::process::exit(1);
        }
    }
}

/// Runs the example; the number of wrong outputs (0 when all is well).
fn run() -> Result<usize, cgc::Error> {
    let ctx = Context::new(0)?;
    println!("cgc {} on device {}", cgc::version()?, ctx.device());
    let (origin, side) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    let (fork, join) = (Event::new(&ctx)?, Event::new(&ctx)?);
    let ptx = CString::new(SCALE_ADD_PTX).expect("the PTX text has no NUL byte");
    let module = Module::from_ptx(&ctx, &ptx)?;
    let scale_add = module.function("scale_add")?;

    // Page-locked host memory: what a captured copy reads or writes at every replay. Declared
    // before the graph, so that on every path the graph goes first.
    let inputs: Vec<f32> = (0..COUNT).map(|i| (i % 97) as f32 * 0.25).collect();
    let host_in = HostBuffer::from_slice(&ctx, &inputs)?;
    let mut host_out = HostBuffer::new(&ctx, COUNT, 0f32)?;
    let mut host_params = HostBuffer::new(&ctx, 2, 0f32)?;

    let input = DeviceBuffer::alloc(&ctx, COUNT * 4, &origin)?;
    let out = DeviceBuffer::alloc(&ctx, COUNT * 4, &origin)?;
    let params = DeviceBuffer::alloc(&ctx, 2 * 4, &origin)?;
    let flag = DeviceBuffer::alloc(&ctx, 4, &origin)?;
    origin.copy_to_device(&input, &host_in)?;
    origin.synchronize()?;
    // All four are used on the side stream too.
    for buffer in [&input, &out, &params, &flag] {
        buffer.record_stream(&side)?;
    }

    // The host function counts replays; it runs on a driver thread, so it shares an atomic.
    let replays_seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&replays_seen);
    let n = COUNT as u32; // the kernel's `unsigned n`
    let graph = origin.capture(&CaptureOptions::default(), |s| {
        s.memset_d32(&flag, 0, 1)?;
        s.copy_to_device(&params, &host_params)?;
        fork.record(s)?;
        // Fork: the side stream joins the capture.
        side.wait_event(&fork)?;
        // SAFETY: scale_add(float* out, const float* in, const float* params, unsigned n) gets
        // those four, in that order; out and input hold n floats, params 2, and all outlive
        // the graph.
        unsafe {
            scale_add.launch(
                &LaunchConfig::linear(n, BLOCK),
                &[&out, &input, &params, &n],
                &side,
            )?
        };
        side.write_value32(&flag, 1, 0)?;
        join.record(&side)?;
        s.wait_event(&join)?; // join
        s.wait_value32(&flag, 1, WaitCondition::Eq, 0)?;
        // SAFETY: host_out is page-locked, outlives the graph (declared before it), and is read
        // only after the stream is synchronised, when no replay writes it.
        unsafe { s.copy_to_host(&mut host_out, &out)? };
        s.launch_host_func(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })
    })?;

    let mut failures = 0;
    for replay in 1..=REPLAYS {
        // Per-replay parameters: written on the host, copied in by the graph.
        let (scale, shift) = (replay as f32, 10.0 * replay as f32);
        host_params.copy_from_slice(&[scale, shift]);
        graph.launch(&origin)?;
        origin.synchronize()?;
        for (i, (&x, &got)) in host_in.iter().zip(host_out.iter()).enumerate() {
            let want = x * scale + shift;
            if (got - want).abs() > 1e-4 * want.abs() + 1e-6 {
                if failures < 5 {
                    eprintln!("replay {}: out[{}] = {}, want {}", replay, i, got, want);
                }
                failures += 1;
            }
        }
        println!(
            "replay {}: scale {}, shift {}: out[1] = {}, host function ran {} time(s)",
            replay,
            scale,
            shift,
            host_out[1],
            replays_seen.load(Ordering::Relaxed)
        );
    }
    let info = graph.info()?;
    let nodes = info.nodes;
    println!(
        "graph: {} nodes: {} kernel, {} copies, {} set, {} host, {} memory operations, {} event",
        info.node_count,
        nodes.kernel,
        nodes.memcpy,
        nodes.memset,
        nodes.host,
        nodes.mem_op,
        nodes.event_record + nodes.event_wait
    );
    let seen = replays_seen.load(Ordering::Relaxed);
    if seen != REPLAYS {
        eprintln!("the host function ran {} times, want {}", seen, REPLAYS);
        failures += 1;
    }

    // Clean up, checking every call; the graph first: it uses everything else.
    graph.destroy()?;
    for buffer in [input, out, params, flag] {
        buffer.free()?;
    }
    host_in.free()?;
    host_out.free()?;
    host_params.free()?;
    module.unload()?;
    fork.destroy()?;
    join.destroy()?;
    side.destroy()?;
    origin.destroy()?;
    ctx.destroy()?;
    Ok(failures)
}
