#!/usr/bin/env python3
"""torch.compile(mode="reduce-overhead") on PyTorch's own allocator vs on cgc's, on one GPU.

    python3 bench/torch_compile.py [--models mlp,block] [--batch 32] [--calls 50] [--rounds 1]
                                   [--dtype bf16|fp32] [--json FILE] [--cgc-library PATH]
                                   [--child-timeout 600] [--tolerance 0.02]
                                   [--sdpa-backend flash|efficient|cudnn|math|auto]
                                   [--inductor-cache fresh|warm]

In the GPU bundle the script is tools/torch_compile.py, beside tools/torch_models.py, whose
helpers it imports (finding cgc.py and libcgc.so.1 the same way: $CGC_LIBRARY, --cgc-library,
else ../data/libcgc.so.1 in the bundle or ../bazel-bin/libcgc.so in the repository). It needs
PyTorch (written against 2.11) and a GPU; without them it says why and exits with status 1.
Nothing is downloaded: the models are made here from torch's own modules, weights from a fixed
seed. reduce-overhead mode is inductor's CUDA-graph trees: the compiled function runs once as a
warm-up, is captured into a CUDA graph on its second call and replayed from its third; the
trees' memory comes from the allocator's private graph pools and needs its checkpoints.

Variants, each model in its own child process (PyTorch's allocator is chosen once per process):
  A  PyTorch's own CUDA caching allocator
  B  cgc as PyTorch's allocator: cgc.use_as_torch_allocator(backend="native") before any CUDA
     work, cgc's complete PyTorch allocator (built on first use, cached); the variant fails if
     it returns anything but "native" (the pluggable allocator has no checkpoints, so the trees
     cannot run on it)
--rounds N runs A, B, A, B, ... N times per model and reports medians: host timings drift from
one process to the next. Each child gets its own empty inductor/Triton cache folder
(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR; removed afterwards), so call 1 compiles from nothing
in every variant and round; --inductor-cache warm shares one folder instead, filled first by an
unmeasured A child per model, so call 1 is compiled from the cache in every measured child.

Models (eval mode, torch.no_grad(), weights from a fixed seed, bf16 by default):
  mlp    Sequential(Linear(1024, 4096), GELU, Linear(4096, 1024), GELU, Linear(1024, 4096), GELU,
         Linear(4096, 1024)), input (batch, 1024)
  block  nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
         batch_first=True, norm_first=True), input (batch, 128, 1024), torch's MHA fast path off
         (torch.backends.mha.set_fastpath_enabled(False)) and scaled_dot_product_attention
         restricted to one kernel (--sdpa-backend; flash for bf16, efficient for fp32, which
         flash cannot run), as torch_models.py does: PyTorch 2.11's own choice on Hopper, cuDNN's
         attention, is not always bitwise repeatable from one eager call to the next.

In each child, in this order:
  1. eager reference: the model on a seeded check input, twice (is eager bitwise repeatable?);
  2. torch._dynamo.reset(); compiled = torch.compile(model, mode="reduce-overhead"); the run
     input made; gc.collect(); torch.cuda.synchronize(); torch.cuda.empty_cache();
     free_before = torch.cuda.mem_get_info()[0];
  3. call 1 (compile + warm-up), call 2 (record), call 3 (first replay) on a seeded input, each
     timed on its own: time.perf_counter() around the call and a torch.cuda.synchronize() after
     it, inside the clock;
  4. graph MiB = free_before - free bytes right after call 3 (cuMemGetInfo, the same meter in
     both variants: device memory the compile, the warm-up, the recording and the first replay
     kept, the graph pool and the loaded kernels included); the JSON adds the allocator's own
     torch.cuda.memory_reserved() difference over the same span;
  5. --calls calls, the device synchronized before each outside the clock: host us is the call
     alone (time.perf_counter() around `compiled(x)`), wall us (JSON only) the call and a
     torch.cuda.synchronize() after it;
  6. --calls calls queued back to back behind about 0.1 ms of torch.cuda._sleep per call, a
     CUDA event recorded before and after each on the current stream: GPU us is the median of
     their elapsed times (the input copy and the graph's replay); the JSON says whether the host
     finished queueing before the sleep ended (if not, host gaps may be in the figure);
  7. 10 more calls under torch.profiler (activities CPU and CUDA): the number of profiler events
     whose name contains "cudaGraphLaunch" (expected: 10, one replay per call); null, with the
     reason, if the profiler fails or records no CUDA runtime call at all;
  8. correctness: a new tensor holding the check input (made again from its seed; reduce-overhead
     copies inputs into its static ones, so a new tensor is a fresh input) through the compiled
     model, compared with step 1's eager output: max |compiled - eager|, whether bitwise equal,
     and a SHA-256 of the output's bytes (output.view(torch.uint8) on the CPU) for comparing A
     and B bit for bit; also torch._dynamo.utils.counters["inductor"] entries whose key
     mentions "cudagraph" (the trees' skips), and whether that call compiled anything anew.

Table per model, rows A, B and B/A (B's median over A's median; with --rounds above 1 also
"B/A paired", the median over rounds of round k's B over round k's A):
  compile+warm-up ms  call 1      record ms  call 2      first replay ms  call 3
  graph MiB           step 4      call host us / call GPU us  medians of steps 5 and 6
  graph launches      step 7's count
  max diff vs eager, bitwise  step 8 (the largest over rounds; bitwise in every round)
  output bits = A's   whether B's step-8 output is bit for bit A's, round by round
--json FILE writes everything, every round and every per-call timing included. Exit status: 0;
1 without PyTorch or a GPU; 3 when a variant failed, when B's output differed from eager by more
than --tolerance of the eager output's largest magnitude, or when a profiled count of graph
launches was not 10.
"""

import argparse
import gc
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import torch_models as tm  # noqa: E402  (beside this file; imports nothing heavy)

VARIANTS = {
    "A": "PyTorch's allocator",
    "B": "cgc, native backend",
}
MODELS = ("mlp", "block")
MIB = float(1 << 20)
SEED = 0
HIDDEN, FFN, HEADS, SEQ = 1024, 4096, 16, 128
PROFILED_CALLS = 10
SLEEP_CYCLES_PER_CALL = 200_000  # about 0.1 ms of torch.cuda._sleep per queued call
MEDIAN_KEYS = ("compile_warmup_ms", "record_ms", "first_replay_ms", "graph_mib", "allocator_reserved_mib",
               "call_host_us", "call_wall_us", "call_gpu_us")

MODEL_TITLES = {
    "mlp": "Sequential(Linear(%d, %d), GELU, Linear(%d, %d), GELU, Linear(%d, %d), GELU, Linear(%d, %d)), "
           "input (batch, %d)" % (HIDDEN, FFN, FFN, HIDDEN, HIDDEN, FFN, FFN, HIDDEN, HIDDEN),
    "block": "TransformerEncoderLayer(d_model=%d, nhead=%d, dim_feedforward=%d, batch_first, norm_first), "
             "input (batch, %d, %d)" % (HIDDEN, HEADS, FFN, SEQ, HIDDEN),
}


# ---- one variant of one model, in a child process --------------------------------------------


def build_model(torch, name, dtype):
    """The model on the GPU in eval mode, weights from SEED (made on the CPU: the same in every
    process), and its input shape for a batch size."""
    nn = torch.nn
    torch.manual_seed(SEED)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(HIDDEN, FFN), nn.GELU(), nn.Linear(FFN, HIDDEN), nn.GELU(),
                              nn.Linear(HIDDEN, FFN), nn.GELU(), nn.Linear(FFN, HIDDEN))
        shape_of = lambda bs: (bs, HIDDEN)  # noqa: E731
    else:
        model = nn.TransformerEncoderLayer(d_model=HIDDEN, nhead=HEADS, dim_feedforward=FFN,
                                           batch_first=True, norm_first=True)
        shape_of = lambda bs: (bs, SEQ, HIDDEN)  # noqa: E731
    return model.to(device="cuda", dtype=dtype).eval(), shape_of


def restrict_sdpa(torch, backend):
    """Only that scaled_dot_product_attention kernel, as torch_models.py's --sdpa-backend."""
    if backend == "auto":
        return
    cuda = torch.backends.cuda
    for name, enable in (("flash", cuda.enable_flash_sdp), ("efficient", cuda.enable_mem_efficient_sdp),
                         ("cudnn", getattr(cuda, "enable_cudnn_sdp", None)), ("math", cuda.enable_math_sdp)):
        if enable is not None:
            enable(name == backend)


def sha256_of(torch, t):
    """SHA-256 of a tensor's bytes, read on the CPU as uint8."""
    b = t.detach().contiguous().view(torch.uint8).cpu()
    try:
        data = b.numpy().tobytes()
    except Exception:  # no numpy: slower, same bytes
        data = bytes(b.flatten().tolist())
    return hashlib.sha256(data).hexdigest()


def child_main(args):
    """Measures one variant of one model; prints one JSON line (torch_models.py's runner)."""
    return tm.child_main(args, measure)


def measure(args, result):
    import torch

    if args.child == "B":
        cgc = tm.import_cgc()
        t0 = time.perf_counter()
        kind = cgc.use_as_torch_allocator(backend="native")  # before any torch CUDA work here
        result["allocator_install_s"] = time.perf_counter() - t0  # a first use builds it
        result["torch_allocator"] = kind
        if kind != "native":
            raise RuntimeError("cgc.use_as_torch_allocator(backend='native') returned %r, not 'native': "
                               "not cgc's complete PyTorch allocator" % (kind,))
        result["cgc_version"] = ".".join(map(str, cgc.version()))
        result["cgc_library"] = cgc.library_path()
        result["torch_graph_pools"] = bool(cgc.torch_graph_pools())
    else:
        result["torch_allocator"] = "PyTorch's CUDACachingAllocator"
    try:
        result["allocator_backend"] = torch.cuda.get_allocator_backend()
    except Exception as e:
        result["allocator_backend"] = "unknown (%s)" % e

    restrict_sdpa(torch, args.sdpa_backend)
    result["sdpa_backend"] = args.sdpa_backend
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(False)
        result["mha_fastpath"] = False
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    result.update(device=torch.cuda.get_device_name(), torch_version=torch.__version__, cuda=torch.version.cuda,
                  dtype=args.dtype, batch=args.batch, calls=args.calls)
    try:
        import torch._inductor.config
        result["cudagraph_trees"] = bool(torch._inductor.config.triton.cudagraph_trees)
    except Exception as e:
        result["cudagraph_trees"] = "unknown (%s)" % e

    model, shape_of = build_model(torch, args.model, dtype)
    shape = shape_of(args.batch)

    def seeded_input(seed):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        return torch.randn(shape, device="cuda", dtype=dtype, generator=gen)

    import torch._dynamo
    from torch._dynamo.utils import counters
    with torch.no_grad():
        # 1. Eager reference, twice on the same input: is eager itself bitwise repeatable?
        check_seed, run_seed = SEED + 3, SEED + 2
        eager = model(seeded_input(check_seed))
        again = model(seeded_input(check_seed))
        result["eager_repeat_bitwise"] = bool(torch.equal(eager, again))
        result["eager_sha256"] = sha256_of(torch, eager)
        del again

        # 2. Compile (lazily: the work happens in call 1).
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead")
        x = seeded_input(run_seed)
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free_before = torch.cuda.mem_get_info()[0]
        try:
            reserved_before = torch.cuda.memory_reserved()
        except Exception:
            reserved_before = None

        # 3. Call 1 compiles and warms up, call 2 records the graph, call 3 replays it.
        first = []
        for _ in range(3):
            t0 = time.perf_counter()
            out = compiled(x)
            torch.cuda.synchronize()
            first.append((time.perf_counter() - t0) * 1e3)
            del out
        # 4. What the compile, the warm-up, the recording and the first replay kept.
        free_after = torch.cuda.mem_get_info()[0]
        try:
            reserved_after = torch.cuda.memory_reserved()
        except Exception:
            reserved_after = None
        result.update(compile_warmup_ms=first[0], record_ms=first[1], first_replay_ms=first[2],
                      free_before=free_before, free_after=free_after,
                      graph_mib=(free_before - free_after) / MIB,
                      allocator_reserved_mib=None if reserved_before is None or reserved_after is None
                      else (reserved_after - reserved_before) / MIB)
        graphs_compiled = counters["stats"].get("unique_graphs", 0)

        # 5. Host time of one call on an empty queue; wall time with its synchronize.
        host, wall = [], []
        for _ in range(args.calls):
            torch.cuda.synchronize()  # outside the clock
            t0 = time.perf_counter()
            out = compiled(x)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            host.append((t1 - t0) * 1e6)
            wall.append((t2 - t0) * 1e6)
            del out
        result.update(call_host_us=tm.median(host), call_wall_us=tm.median(wall),
                      call_host_us_all=host, call_wall_us_all=wall)

        # 6. GPU time of one call: events around each, all queued behind a sleep kernel.
        Event = torch.cuda.Event
        starts = [Event(enable_timing=True) for _ in range(args.calls)]
        ends = [Event(enable_timing=True) for _ in range(args.calls)]
        sleep_start, sleep_end = Event(enable_timing=True), Event(enable_timing=True)
        slept = hasattr(torch.cuda, "_sleep")
        torch.cuda.synchronize()
        sleep_start.record()
        if slept:
            torch.cuda._sleep(SLEEP_CYCLES_PER_CALL * args.calls)
        sleep_end.record()
        t0 = time.perf_counter()
        for s, e in zip(starts, ends):
            s.record()
            out = compiled(x)
            e.record()
            del out
        enqueue_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        gpu = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
        sleep_ms = sleep_start.elapsed_time(sleep_end)
        result.update(call_gpu_us=tm.median(gpu), call_gpu_us_all=gpu,
                      gpu_timing={"sleep_kernel": slept, "sleep_ms": sleep_ms, "enqueue_ms": enqueue_ms,
                                  "queued_before_sleep_ended": slept and enqueue_ms < sleep_ms})

        # 7. Graph launches of PROFILED_CALLS calls, as the profiler sees them.
        result["profiled_calls"] = PROFILED_CALLS
        try:
            from torch.profiler import ProfilerActivity, profile
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(PROFILED_CALLS):
                    out = compiled(x)
                    del out
                torch.cuda.synchronize()
            names = [e.name for e in prof.events()]
            runtime = [n for n in names if n.startswith("cuda")]
            launches = sum(1 for n in names if "cudaGraphLaunch" in n)
            result["profiled_runtime_calls"] = len(runtime)
            if not runtime:
                result["graph_launches"] = None
                result["graph_launches_error"] = ("the profiler recorded no CUDA runtime call at all (%d events): "
                                                  "CUPTI unavailable?" % len(names))
            else:
                result["graph_launches"] = launches
        except Exception as e:
            result["graph_launches"] = None
            result["graph_launches_error"] = "%s: %s" % (type(e).__name__, (str(e).strip().splitlines() or [""])[0])

        # 8. A fresh input through the compiled model, against step 1's eager output.
        out = compiled(seeded_input(check_seed))
        torch.cuda.synchronize()
        d = (out.float() - eager.float()).abs().max().item()
        scale = eager.float().abs().max().item()
        d = d if not math.isnan(d) else math.inf
        result.update(max_abs_diff=d, eager_max_abs=scale,
                      rel_diff=d / scale if scale > 0 else (0.0 if d == 0 else math.inf),
                      bitwise=bool(torch.equal(out, eager)), output_sha256=sha256_of(torch, out),
                      recompiled_for_check=counters["stats"].get("unique_graphs", 0) != graphs_compiled)
        del out
        torch.cuda.synchronize()

    result["inductor_cudagraph_counters"] = {k: v for k, v in counters["inductor"].items() if "cudagraph" in k.lower()}
    result["dynamo_stats"] = dict(counters["stats"])
    result["graph_breaks"] = sum(counters["graph_break"].values())


# ---- the parent: runs the children, prints the tables --------------------------------------------


def run_child(args, model, variant, env, cache_dir=None):
    cmd = [sys.executable, SCRIPT, "--child", variant, "--model", model, "--batch", str(args.batch),
           "--calls", str(args.calls), "--dtype", args.dtype, "--sdpa-backend", args.sdpa_backend]
    fresh = cache_dir is None
    if fresh:
        cache_dir = tempfile.mkdtemp(prefix="cgc-torch-compile-")
    env = dict(env, TORCHINDUCTOR_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=os.path.join(cache_dir, "triton"))
    t0 = time.perf_counter()
    try:
        # Its own session: on a timeout the child and inductor's compile workers go together.
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=args.child_timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.communicate()
            return {"variant": variant, "model": model, "error": "timed out after %d s" % args.child_timeout}
    finally:
        if fresh:
            shutil.rmtree(cache_dir, ignore_errors=True)
    result = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except ValueError:
                pass
    if result is None:
        tail = (stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        result = {"variant": variant, "model": model,
                  "error": "exit status %d, no result: %s" % (proc.returncode, tail),
                  "stderr": stderr[-4000:]}
    elif proc.returncode != 0 and "error" not in result:
        result["note"] = "exit status %d after its result" % proc.returncode
    result["child_seconds"] = time.perf_counter() - t0
    return result


def combine(rounds):
    """One result from a variant's rounds: medians of the timings and memory, the worst of the
    checks, every round's graph-launch count and output digest; every round kept under "rounds".
    A failed round fails the variant."""
    for k, r in enumerate(rounds):
        if not tm.ok(r):
            if len(rounds) > 1:
                r = dict(r, error="round %d: %s" % (k + 1, r.get("error")))
            return r
    out = dict(rounds[0])
    for key in MEDIAN_KEYS:
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[key] = tm.median(values) if values else None
    out["max_abs_diff"] = max(r["max_abs_diff"] for r in rounds)
    out["rel_diff"] = max(r["rel_diff"] for r in rounds)
    out["bitwise"] = all(r["bitwise"] for r in rounds)
    out["eager_repeat_bitwise"] = all(r["eager_repeat_bitwise"] for r in rounds)
    out["graph_launches_per_round"] = [r.get("graph_launches") for r in rounds]
    out["output_sha256_per_round"] = [r["output_sha256"] for r in rounds]
    out["output_same_every_round"] = len(set(out["output_sha256_per_round"])) == 1
    out["child_seconds"] = sum(r["child_seconds"] for r in rounds)
    if len(rounds) > 1:
        out["rounds"] = rounds
    return out


def launches_text(r):
    counts = r["graph_launches_per_round"]
    if all(c is None for c in counts):
        return "null"
    distinct = []
    for c in counts:
        if c not in distinct:
            distinct.append(c)
    return "/".join("null" if c is None else str(c) for c in distinct)


def model_table(runs, paired):
    """Rows A, B, B/A (and B/A paired) for one model."""
    header = ["variant", "compile+warm-up ms", "record ms", "first replay ms", "graph MiB", "call host us",
              "call GPU us", "graph launches", "max diff vs eager", "bitwise", "output bits = A's"]
    keys = ("compile_warmup_ms", "record_ms", "first_replay_ms", "graph_mib", "call_host_us", "call_gpu_us")
    digits = (1, 2, 3, 1, 1, 1)
    a = runs.get("A") if tm.ok(runs.get("A")) else None
    rows = []
    for v, r in runs.items():
        name = "%s %s" % (v, VARIANTS[v])
        if not tm.ok(r):
            error = r.get("error", "?")
            rows.append([name, "FAILED: %s" % (error if len(error) <= 72 else error[:69] + "...")] +
                        ["-"] * (len(header) - 2))
            continue
        same = "-"
        if a is not None and v != "A":
            same = "yes" if r["output_sha256_per_round"] == a["output_sha256_per_round"] else "no"
        rows.append([name] + [tm.fmt(r[k], n) for k, n in zip(keys, digits)] +
                    [launches_text(r), "%.3g" % r["max_abs_diff"], "yes" if r["bitwise"] else "no", same])
    b = runs.get("B") if tm.ok(runs.get("B")) else None
    if a is not None and b is not None:
        rows.append(["B/A"] + [tm.fmt(tm.ratio(b[k], a[k])) for k in keys] + ["-"] * 4)
        if paired:
            rows.append(["B/A paired"] + [tm.fmt(paired.get(k)) for k in keys] + ["-"] * 4)
    return tm.markdown_table(header, rows)


def paired_ratios(rounds_a, rounds_b):
    """Per figure, the median over rounds of round k's B over round k's A (rounds run one after
    the other pair like with like)."""
    out = {}
    for key in MEDIAN_KEYS:
        values = [tm.ratio(rb.get(key), ra.get(key)) for ra, rb in zip(rounds_a, rounds_b)]
        values = [x for x in values if x is not None]
        out[key] = tm.median(values) if values else None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=tm.parse_list(MODELS), default=list(MODELS),
                    help="comma-separated, of %s (default: both)" % ",".join(MODELS))
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--calls", type=int, default=50, help="timed calls after the first three (default 50)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run A and B this many times per model, interleaved, and report medians (default 1; "
                         "host timings drift from one process to the next)")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--sdpa-backend", choices=("flash", "efficient", "cudnn", "math", "auto"),
                    help="the one scaled_dot_product_attention kernel allowed (default: flash for bf16, "
                         "efficient for fp32); auto: torch's own choice")
    ap.add_argument("--inductor-cache", choices=("fresh", "warm"), default="fresh",
                    help="fresh (default): an empty inductor/Triton cache per child, every call 1 a cold compile; "
                         "warm: one cache for the run, filled first by an unmeasured A child per model")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="largest |B - eager| relative to the eager output's largest magnitude before B counts "
                         "as wrong (default 0.02; bitwise equality is reported apart)")
    ap.add_argument("--cgc-library", help="libcgc.so.1 to use (default: $CGC_LIBRARY, else the bundle's or "
                                          "the repository's)")
    ap.add_argument("--child-timeout", type=int, default=600, help="seconds per child process (default 600)")
    ap.add_argument("--json", help="write every figure, every round and call too, to this file")
    ap.add_argument("--child", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.batch < 1 or args.calls < 1 or args.rounds < 1 or args.child_timeout < 1:
        ap.error("--batch, --calls, --rounds and --child-timeout must be at least 1")
    if args.sdpa_backend is None:
        args.sdpa_backend = "flash" if args.dtype == "bf16" else "efficient"

    if args.child:
        if not args.model:
            ap.error("--child needs --model")
        return child_main(args)

    try:
        import torch
    except ImportError as e:
        print("torch_compile: no PyTorch here (%s); nothing to measure" % e)
        return 1
    if not torch.cuda.is_available():  # the parent makes no CUDA context of its own
        print("torch_compile: no GPU visible to PyTorch (torch %s); nothing to measure" % torch.__version__)
        return 1

    env = dict(os.environ)
    library = tm.find_library(args.cgc_library)
    if library:
        env["CGC_LIBRARY"] = os.environ["CGC_LIBRARY"] = library
    cgc_version = cgc_error = None
    try:
        cgc = tm.import_cgc()
        cgc_version = ".".join(map(str, cgc.version()))
        library = cgc.library_path()
    except Exception as e:
        cgc_error = "%s: %s" % (type(e).__name__, e)

    print("torch_compile: PyTorch %s (CUDA %s), cgc %s" % (
        torch.__version__, torch.version.cuda, cgc_version or "unavailable (%s)" % cgc_error))
    print("  cgc.py from %s, libcgc from %s" % (tm.binding_dir() or "the import path", library or "the loader's path"))
    print("  torch.compile(mode=\"reduce-overhead\"), batch %d, %s, SDPA %s, %d timed calls, %d round%s, "
          "inductor cache %s" % (args.batch, args.dtype, args.sdpa_backend, args.calls, args.rounds,
                                 "s" if args.rounds > 1 else "", args.inductor_cache), flush=True)

    results = {"torch_version": torch.__version__, "cuda": torch.version.cuda, "device": None,
               "cgc_version": cgc_version, "cgc_error": cgc_error, "cgc_library": library,
               "batch": args.batch, "calls": args.calls, "profiled_calls": PROFILED_CALLS, "rounds": args.rounds,
               "dtype": args.dtype, "sdpa_backend": args.sdpa_backend, "inductor_cache": args.inductor_cache,
               "tolerance": args.tolerance, "variants": VARIANTS, "models": {}}
    shared_cache = tempfile.mkdtemp(prefix="cgc-torch-compile-") if args.inductor_cache == "warm" else None
    failed = 0
    try:
        for model in args.models:
            priming = None
            if shared_cache:
                priming = run_child(args, model, "A", env, shared_cache)
                print("%s priming (A, not measured): %s" % (
                    model, "%.1f s" % priming["child_seconds"] if tm.ok(priming) else "FAILED: %s" % priming.get("error")),
                    flush=True)
            rounds = {v: [] for v in VARIANTS}
            for k in range(args.rounds):  # A, B, A, B, ...: drift of the machine spreads over both
                for v in VARIANTS:
                    if v == "B" and cgc_error:
                        r = {"variant": v, "model": model, "error": "cgc unavailable: " + cgc_error}
                    else:
                        r = run_child(args, model, v, env, shared_cache)
                    rounds[v].append(r)
                    if tm.ok(r) and not results["device"]:
                        results["device"] = r.get("device")
                    label = "%s %s%s" % (model, v, " round %d" % (k + 1) if args.rounds > 1 else "")
                    if tm.ok(r):
                        launches = r.get("graph_launches")
                        print("%s: %.1f s, compile+warm-up %.0f ms, record %.1f ms, %.1f MiB, %s graph launches, "
                              "max diff %.3g" % (label, r["child_seconds"], r["compile_warmup_ms"], r["record_ms"],
                                                 r["graph_mib"], "null" if launches is None else launches,
                                                 r["max_abs_diff"]), flush=True)
                    else:
                        print("%s: FAILED: %s" % (label, r.get("error")), flush=True)
                        if r.get("cgc_last_error"):
                            print("    cgc_last_error(): %s" % r["cgc_last_error"])
                        if r.get("traceback") or r.get("stderr"):
                            print("\n".join("    " + l for l in
                                            (r.get("traceback") or r["stderr"]).strip().splitlines()[-8:]), flush=True)
            runs = {v: combine(rounds[v]) for v in VARIANTS}
            entry = {"title": MODEL_TITLES[model], "variants": runs}
            if priming is not None:
                entry["priming"] = priming
            for v, r in runs.items():
                if not tm.ok(r):
                    failed += 1
                    continue
                r["wrong"] = not math.isfinite(r["rel_diff"]) or r["rel_diff"] > args.tolerance
                if r["wrong"]:
                    print("%s %s: %s: its output differs from eager by %.3g of eager's largest magnitude" % (
                        model, v, "WRONG" if v == "B" else "note (inductor's own numerics, not counted)",
                        r["rel_diff"]))
                    failed += v == "B"
                bad = [c for c in r["graph_launches_per_round"] if c is not None and c != PROFILED_CALLS]
                r["launches_wrong"] = bool(bad)
                if bad:
                    print("%s %s: %s graph launches counted in %d calls, expected %d" % (
                        model, v, "/".join(map(str, bad)), PROFILED_CALLS, PROFILED_CALLS))
                    failed += 1
            if tm.ok(runs["A"]) and tm.ok(runs["B"]):
                entry["output_bits_equal"] = runs["B"]["output_sha256_per_round"] == runs["A"]["output_sha256_per_round"]
                entry["eager_bits_equal"] = runs["B"]["eager_sha256"] == runs["A"]["eager_sha256"]
                entry["ratios"] = {k: tm.ratio(runs["B"].get(k), runs["A"].get(k)) for k in MEDIAN_KEYS}
                entry["paired_ratios"] = paired_ratios(rounds["A"], rounds["B"])
            results["models"][model] = entry
    finally:
        if shared_cache:
            shutil.rmtree(shared_cache, ignore_errors=True)

    print("\ndevice: %s" % (results["device"] or "unknown (no child finished)"))
    for model in args.models:
        entry = results["models"][model]
        runs = entry["variants"]
        print("\n### %s: %s, %s, batch %d%s" % (model, MODEL_TITLES[model], args.dtype, args.batch,
                                                ", medians over %d rounds" % args.rounds if args.rounds > 1 else ""))
        print(model_table(runs, entry.get("paired_ratios") if args.rounds > 1 else None))
        for v, r in runs.items():
            if not tm.ok(r):
                continue
            notes = []
            if not r["eager_repeat_bitwise"]:
                notes.append("eager itself was not bitwise repeatable (the same input twice)")
            if r.get("inductor_cudagraph_counters"):
                notes.append("inductor cudagraph counters %s" % json.dumps(r["inductor_cudagraph_counters"]))
            if r.get("graph_launches_error"):
                notes.append("graph launches not counted: %s" % r["graph_launches_error"])
            if not r["gpu_timing"]["queued_before_sleep_ended"]:
                notes.append("the host was still queueing when the sleep kernel ended (%.2f ms against %.2f ms): "
                             "call GPU us may hold host gaps" % (r["gpu_timing"]["enqueue_ms"],
                                                                 r["gpu_timing"]["sleep_ms"]))
            if r.get("recompiled_for_check"):
                notes.append("the correctness call compiled anew")
            if not r["output_same_every_round"]:
                notes.append("its output bits differed between rounds")
            for n in notes:
                print("%s %s: %s" % (model, v, n))
        if entry.get("eager_bits_equal") is False:
            print("%s: the eager reference differed between A and B (the same model and input)" % model)
    print("\ncompile+warm-up ms, record ms, first replay ms: calls 1, 2 and 3 of the compiled model, each with a "
          "torch.cuda.synchronize() inside the clock; graph MiB: free device memory (cuMemGetInfo) before call 1 "
          "minus after call 3; call host us: median time of one call alone, the device idle before it; call GPU us: "
          "median CUDA-event time of one call, calls queued behind a sleep kernel; graph launches: profiler events "
          "named cudaGraphLaunch in %d calls; max diff vs eager, bitwise: a fresh input through the compiled model "
          "against eager on it; output bits = A's: that output's SHA-256 equal to A's in every round; B/A: B's "
          "median over A's%s." % (PROFILED_CALLS, "; B/A paired: the median over rounds of round k's B over round "
                                  "k's A" if args.rounds > 1 else ""))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print("figures written to %s" % args.json)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
