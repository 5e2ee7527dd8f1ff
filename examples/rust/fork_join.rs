//! A fork/join capture with cgc's Rust binding, in two graphs that share one memory pool.
//!
//! Graph 1: the origin stream draws uniform numbers into x and forks two side streams; side 1
//! draws normal numbers into y, side 2 uniform numbers into z; both join back. Graph 2, captured
//! into graph 1's pool, draws normal numbers into w. Both are replayed a few times: every replay
//! draws fresh numbers. Without a GPU the example prints cgc's message and exits with status 1.
//!
//! Run: CGC_LIBRARY=/path/to/libcgc.so.1 cargo run --example fork_join
use cgc::{CaptureOptions, Context, DeviceBuffer, Event, Rng, Stream};

const N: usize = 1 << 20; // floats per buffer
const REPLAYS: usize = 5;

fn main() {
    match cgc::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => {
            println!("cgc fork/join example: no GPU here (cgc_device_count found no device)");
            std::process::exit(1);
        }
        Err(e) => {
            println!("cgc fork/join example: no GPU here\n  {}", e);
            std::process::exit(1);
        }
    }
    if let Err(e) = run() {
        eprintln!("cgc fork/join example failed: {}", e);
        std::process::exit(1);
    }
}

fn run() -> Result<(), cgc::Error> {
    let ctx = Context::new(0)?;
    println!("cgc {} on device {}", cgc::version()?, ctx.device());
    let (origin, side1, side2) = (Stream::new(&ctx)?, Stream::new(&ctx)?, Stream::new(&ctx)?);
    let (fork, join1, join2) = (Event::new(&ctx)?, Event::new(&ctx)?, Event::new(&ctx)?);
    let rng = Rng::new(&ctx, 2024)?;
    // The graphs' outputs: blocks allocated during capture and kept, freed when dropped.
    let mut outputs: Vec<DeviceBuffer> = Vec::new();

    let g1 = origin.capture(&CaptureOptions::default(), |s| {
        let x = DeviceBuffer::alloc(&ctx, N * 4, s)?;
        rng.uniform(&x, N, s)?;
        fork.record(s)?; // fork: both side streams join the capture
        side1.wait_event(&fork)?;
        side2.wait_event(&fork)?;
        let y = DeviceBuffer::alloc(&ctx, N * 4, &side1)?;
        rng.normal(&y, N, 0.0, 1.0, &side1)?;
        let z = DeviceBuffer::alloc(&ctx, N * 4, &side2)?;
        rng.uniform(&z, N, &side2)?;
        join1.record(&side1)?; // join: the origin waits for both
        join2.record(&side2)?;
        s.wait_event(&join1)?;
        s.wait_event(&join2)?;
        outputs.extend([x, y, z]);
        Ok(())
    })?;

    let pool = g1.pool()?;
    let g2 = origin.capture(&CaptureOptions::new().with_pool(&pool), |s| {
        let w = DeviceBuffer::alloc(&ctx, N * 4, s)?;
        rng.normal(&w, N, 0.0, 1.0, s)?;
        outputs.push(w);
        Ok(())
    })?;

    // Graphs sharing a pool replay in capture order, on one stream.
    for _ in 0..REPLAYS {
        g1.launch(&origin)?;
        g2.launch(&origin)?;
    }
    origin.synchronize()?;

    for (name, g) in [("graph 1 (fork/join)", &g1), ("graph 2 (shared pool)", &g2)] {
        let info = g.info()?;
        println!(
            "{}: {} nodes, replayed {} times",
            name, info.node_count, info.replay_count
        );
    }
    println!(
        "pool bytes reserved: {}",
        ctx.memory_stats(Some(&pool))?.bytes_reserved
    );
    println!(
        "pool shared: {}",
        if g2.pool()? == pool { "yes" } else { "no" }
    );
    Ok(())
}
