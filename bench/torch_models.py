#!/usr/bin/env python3
"""Real models captured three ways, side by side: torch.cuda.graph vs cgc, on one GPU.

    python3 bench/torch_models.py [--batch-sizes 1,2,4,...] [--models encoder,llama]
                                  [--variants A,B,C] [--rounds N] [--json FILE]

In the GPU bundle the script is tools/torch_models.py; it finds cgc.py in ../python (the
repository: ../bindings/python) and libcgc.so.1 through $CGC_LIBRARY, --cgc-library, else
../data/libcgc.so.1 (the bundle) or ../bazel-bin/libcgc.so (the repository). It needs PyTorch
(written against 2.11) and a GPU; without them it says why and exits with status 1. Nothing is
downloaded: the models are made here from torch's own modules, weights from a fixed seed.

Models (eval mode, torch.no_grad(), bf16 by default):
  encoder  torch.nn.TransformerEncoder: 4 layers of TransformerEncoderLayer(d_model=1024,
           nhead=16, dim_feedforward=4096, batch_first=True, norm_first=True),
           enable_nested_tensor=False, input (bs, 16, 1024). torch's MHA "fast path" is turned
           off (torch.backends.mha.set_fastpath_enabled(False)) unless --encoder-fastpath, so
           what is captured is the plain op-by-op path (layer_norm, SDPA, linear).
  llama    a Llama-like decoder stack made here: 8 layers of RMSNorm, attention with rotary
           embeddings and scaled_dot_product_attention (is_causal=False) of one new token
           against a static KV cache of 128 positions (the new key/value appended with
           torch.cat), SwiGLU MLP (1024 -> 2816 -> 1024), hidden 1024, 16 heads; input
           (bs, 1, 1024): one decode step.
Both models' attention runs on SDPA's flash kernel (--sdpa-backend; "auto" leaves the choice to
torch): PyTorch 2.11 picks cuDNN's attention on Hopper, which is not bitwise repeatable from one
eager call to the next at large batch sizes, so replay-vs-eager equality would say nothing there.

Variants, each in its own child process (torch's allocator can be chosen once per process):
  A  torch.cuda.graph, torch's native caching allocator
  B  torch.cuda.graph on cgc's pools: cgc.use_as_torch_allocator(), then plain torch.cuda.graph
  C  cgc.graph with cgc as torch's allocator (g = cgc.Graph(); with cgc.graph(g, pool=...))
All three: the same weights, inputs and warm-up (3 eager runs per batch size on a side stream,
largest first), then one graph per batch size captured largest first on that stream into one
shared pool (torch.cuda.graph_pool_handle(); for C too, which cgc.graph accepts once cgc is
torch's allocator; if this binding refuses it, C shares the first graph's g.pool() and the
table says so), every static input and output kept alive.

Columns:
  capture ms         sum over batch sizes of the wall time of the `with ...graph(...)` block,
                     entry and exit included (torch.cuda.graph synchronizes and empties the cache
                     on entry, and collects garbage where its version does; cgc.graph collects
                     garbage)
  graphs MiB         device memory the graphs took: cuMemGetInfo's free bytes
                     (torch.cuda.mem_get_info) before the first capture minus after the last,
                     the same meter for all three (caches emptied and the device synchronized
                     before the first capture)
  replay GPU ms      sum over batch sizes of the median CUDA-event time of one replay (--replays
                     replays queued back to back behind a sleep kernel, so the host is ahead)
  replay() host us   median of time.perf_counter() around g.replay() alone, the stream drained
                     before each call outside the clock (all batch sizes pooled)
  max diff vs eager  max |replay - eager| over all batch sizes: a fresh random input copied into
                     the static input, the output filled with NaN, one replay, compared with the
                     eager model on the same input; "bitwise" says whether every batch size's
                     output was bit-for-bit the eager one (the JSON also says whether eager itself
                     was, run twice on the same input)
  replay bits = A's  whether B's or C's replay outputs are bit-for-bit A's, batch size by batch
                     size (checksums of the bits; same weights and inputs in every variant)
  x A                the B and C figures divided by A's
A table of capture and replay figures per batch size is printed for each model as it finishes;
the summary tables come last. --rounds N runs every variant N times, interleaved (A, B, C, A, ...),
and reports medians: host timings on a shared machine drift from one process to the next by more
than the variants differ. --json FILE writes everything, per batch size and per round. Exit status: 0, 1 without PyTorch or a GPU, 3 when
a variant failed or a replay differed from eager by more than --tolerance (relative to the
eager output's largest magnitude).
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)
# cgc.py: beside this file, in the bundle's python/, or the repository's bindings/python.
BINDING_DIRS = [HERE, os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "bindings", "python")]
# libcgc when $CGC_LIBRARY is not set: the bundle's data/, beside this file, the repository's bazel-bin/.
LIBRARY_CANDIDATES = [
    os.path.join(HERE, "..", "data", "libcgc.so.1"),
    os.path.join(HERE, "libcgc.so.1"),
    os.path.join(HERE, "..", "bazel-bin", "libcgc.so"),
]

DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
VARIANTS = {
    "A": "torch.cuda.graph, native allocator",
    "B": "torch.cuda.graph, cgc allocator",
    "C": "cgc.graph, cgc allocator",
}
MODELS = ("encoder", "llama")
MIB = float(1 << 20)
SEED = 0
SLEEP_CYCLES = 5_000_000  # ~3 ms of torch.cuda._sleep: the timed replays queue up behind it

# Model shapes.
HIDDEN, HEADS = 1024, 16
ENC_LAYERS, ENC_FFN, ENC_SEQ = 4, 4096, 16
LLAMA_LAYERS, LLAMA_FFN, LLAMA_CACHE, ROPE_BASE, RMS_EPS = 8, 2816, 128, 10000.0, 1e-5

MODEL_TITLES = {
    "encoder": "torch.nn.TransformerEncoder, %d layers, d_model %d, %d heads, ffn %d, norm_first, "
               "input (bs, %d, %d)" % (ENC_LAYERS, HIDDEN, HEADS, ENC_FFN, ENC_SEQ, HIDDEN),
    "llama": "Llama-like decoder, %d layers, hidden %d, %d heads, SwiGLU %d, RoPE, one decode token "
             "against a KV cache of %d, input (bs, 1, %d)" % (LLAMA_LAYERS, HIDDEN, HEADS, LLAMA_FFN,
                                                            LLAMA_CACHE, HIDDEN),
}


# ---- finding cgc ------------------------------------------------------------------------------


def binding_dir():
    for d in BINDING_DIRS:
        if os.path.isfile(os.path.join(d, "cgc.py")):
            return os.path.normpath(d)
    return None


def import_cgc():
    """The cgc.py that ships beside this script (bundle or repository), else an installed one."""
    d = binding_dir()
    if d is not None and d not in sys.path:
        sys.path.insert(0, d)
    import cgc
    return cgc


def find_library(explicit):
    """libcgc's full path, or None to leave it to cgc.py (the dynamic loader's search path)."""
    if explicit:
        return os.path.abspath(explicit)
    if os.environ.get("CGC_LIBRARY"):
        return os.environ["CGC_LIBRARY"]
    for path in LIBRARY_CANDIDATES:
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


# ---- the models (built only in a child, where torch is imported) -------------------------------


def build_model(torch, name, max_bs, dtype):
    """(model, input shape for a batch size) with weights from SEED; the model on the GPU, eval."""
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(SEED)  # weights made on the CPU: the same in every process

    if name == "encoder":
        layer = nn.TransformerEncoderLayer(d_model=HIDDEN, nhead=HEADS, dim_feedforward=ENC_FFN,
                                           batch_first=True, norm_first=True)
        model = nn.TransformerEncoder(layer, num_layers=ENC_LAYERS, enable_nested_tensor=False)
        model = model.to(device="cuda", dtype=dtype).eval()
        return model, (lambda bs: (bs, ENC_SEQ, HIDDEN))

    head_dim = HIDDEN // HEADS

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(HIDDEN))

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
            return xf.to(x.dtype) * self.weight

    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)

        def forward(self, x, cos, sin, k_cache, v_cache):
            bs = x.shape[0]
            q = self.q(x).view(bs, 1, HEADS, head_dim).transpose(1, 2)  # (bs, heads, 1, head_dim)
            k = self.k(x).view(bs, 1, HEADS, head_dim).transpose(1, 2)
            v = self.v(x).view(bs, 1, HEADS, head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = torch.cat((k_cache[:bs], k), dim=2)  # (bs, heads, cache + 1, head_dim)
            v = torch.cat((v_cache[:bs], v), dim=2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=False)
            return self.o(y.transpose(1, 2).reshape(bs, 1, HIDDEN))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(HIDDEN, LLAMA_FFN, bias=False)
            self.up = nn.Linear(HIDDEN, LLAMA_FFN, bias=False)
            self.down = nn.Linear(LLAMA_FFN, HIDDEN, bias=False)

        def forward(self, x):
            return self.down(F.silu(self.gate(x)) * self.up(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.attn = RMSNorm(), Attention()
            self.mlp_norm, self.mlp = RMSNorm(), MLP()

        def forward(self, x, cos, sin, k_cache, v_cache):
            x = x + self.attn(self.attn_norm(x), cos, sin, k_cache, v_cache)
            return x + self.mlp(self.mlp_norm(x))

    class Decoder(nn.Module):
        """One decode step at position LLAMA_CACHE; the caches hold the earlier positions."""

        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Block() for _ in range(LLAMA_LAYERS))
            self.norm = RMSNorm()
            inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            angle = float(LLAMA_CACHE) * inv_freq
            self.register_buffer("cos", torch.cat((angle.cos(), angle.cos())))
            self.register_buffer("sin", torch.cat((angle.sin(), angle.sin())))
            self.k_caches, self.v_caches = [], []

        def make_caches(self, max_bs, gen):
            shape = (max_bs, HEADS, LLAMA_CACHE, head_dim)
            for _ in range(LLAMA_LAYERS):
                self.k_caches.append(torch.randn(shape, device="cuda", dtype=self.cos.dtype, generator=gen))
                self.v_caches.append(torch.randn(shape, device="cuda", dtype=self.cos.dtype, generator=gen))

        def forward(self, x):
            for layer, kc, vc in zip(self.layers, self.k_caches, self.v_caches):
                x = layer(x, self.cos, self.sin, kc, vc)
            return self.norm(x)

    model = Decoder().to(device="cuda", dtype=dtype).eval()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(SEED + 1)
    model.make_caches(max_bs, gen)
    return model, (lambda bs: (bs, 1, HIDDEN))


# ---- one variant, in a child process ------------------------------------------------------------


def median(v):
    return statistics.median(v) if v else None


def checksum(torch, t):
    """Two int64 sums of a 16-bit tensor's bit patterns (plain, and weighted by position): equal
    for equal bits, and unequal for practically any difference."""
    bits = t.contiguous().view(torch.int16).flatten().long()
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
    return "%d:%d" % (bits.sum().item(), (bits * weights).sum().item())


def child_main(args, measure_variant=None):
    """Measures one variant of one model with `measure_variant` (this script's measure by default;
    torch_compile.py passes its own); prints one JSON line (with "error" on failure)."""
    result = {"variant": args.child, "model": args.model}
    try:
        (measure_variant or measure)(args, result)
        status = 0
    except Exception as e:  # reported to the parent, which prints it in the table
        text = str(e).strip()
        result["error"] = "%s: %s" % (type(e).__name__, text.splitlines()[0] if text else "")
        result["traceback"] = traceback.format_exc()[-4000:]
        cgc = sys.modules.get("cgc")
        if cgc is not None:  # what cgc said last on this thread (e.g. why a torch malloc got NULL)
            try:
                last = (cgc.api().cgc_last_error() or b"").decode("utf-8", "replace")
                if last:
                    result["cgc_last_error"] = last
            except Exception:
                pass
        status = 2
    print(json.dumps(result), flush=True)
    return status


def measure(args, result):
    variant = args.child
    import torch

    cgc = ctx = None
    if variant in ("B", "C"):
        cgc = import_cgc()
        # Before any torch CUDA work in this process; "native" or "pluggable" (docs/TORCH.md).
        result["torch_allocator"] = cgc.use_as_torch_allocator()
        result["cgc_version"] = ".".join(map(str, cgc.version()))
        result["cgc_library"] = cgc.library_path()
        if hasattr(cgc, "torch_graph_pools"):  # torch's captures allocate from cgc's pools
            result["torch_graph_pools"] = bool(cgc.torch_graph_pools())
    if args.sdpa_backend != "auto":  # that SDPA kernel alone
        cuda = torch.backends.cuda
        for backend, enable in (("flash", cuda.enable_flash_sdp), ("efficient", cuda.enable_mem_efficient_sdp),
                                ("cudnn", getattr(cuda, "enable_cudnn_sdp", None)), ("math", cuda.enable_math_sdp)):
            if enable is not None:
                enable(backend == args.sdpa_backend)
    result["sdpa_backend"] = args.sdpa_backend
    if hasattr(torch.backends, "mha") and hasattr(torch.backends.mha, "set_fastpath_enabled"):
        torch.backends.mha.set_fastpath_enabled(bool(args.encoder_fastpath))
        result["mha_fastpath"] = bool(args.encoder_fastpath)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    batch_sizes = sorted(set(args.batch_sizes), reverse=True)  # largest first
    max_bs = batch_sizes[0]
    result.update(device=torch.cuda.get_device_name(), torch_version=torch.__version__,
                  dtype=args.dtype, batch_sizes=batch_sizes)
    if cgc is not None:
        ctx = cgc.Context(torch.cuda.current_device())

    model, shape_of = build_model(torch, args.model, max_bs, dtype)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(SEED + 2)
    static_x = torch.randn(shape_of(max_bs), device="cuda", dtype=dtype, generator=gen)  # sliced per bs

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        # Warm-up, as PyTorch's docs advise: on the side stream that will capture, so that
        # cuBLAS's handle and per-stream workspace exist before any capture, in every variant.
        with torch.cuda.stream(side):
            for bs in batch_sizes:
                for _ in range(args.warmup):
                    model(static_x[:bs])
        torch.cuda.synchronize()

        def allocator_reserved():
            if cgc is not None:
                return ctx.memory_stats().bytes_reserved
            return torch.cuda.memory_reserved()

        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        if cgc is not None:
            cgc.empty_cache(ctx)
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        reserved_before = allocator_reserved()

        pool = torch.cuda.graph_pool_handle()
        pool_kind = "torch.cuda.graph_pool_handle()"
        if variant == "C" and args.c_pool == "cgc":
            pool, pool_kind = None, "the first graph's g.pool()"
        graphs, outputs, capture_s = [], [], []
        for i, bs in enumerate(batch_sizes):
            x = static_x[:bs]
            if variant in ("A", "B"):
                g = torch.cuda.CUDAGraph()
                t0 = time.perf_counter()
                with torch.cuda.graph(g, pool=pool, stream=side):
                    out = model(x)
                t1 = time.perf_counter()
            else:
                g = cgc.Graph()
                try:
                    t0 = time.perf_counter()
                    with cgc.graph(g, stream=side, pool=pool):
                        out = model(x)
                    t1 = time.perf_counter()
                except (AttributeError, TypeError, cgc.Error) as e:
                    if i != 0 or pool is None:
                        raise
                    # This binding takes no torch pool handle: share the first graph's cgc.Pool.
                    result["c_pool_fallback"] = "%s: %s" % (type(e).__name__, e)
                    pool, pool_kind = None, "the first graph's g.pool() (the binding refused a torch pool handle)"
                    g = cgc.Graph()
                    t0 = time.perf_counter()
                    with cgc.graph(g, stream=side, pool=pool):
                        out = model(x)
                    t1 = time.perf_counter()
                if pool is None:
                    pool = g.pool()
            graphs.append(g)
            outputs.append(out)  # outputs kept: later captures must not reuse their memory
            del out
            capture_s.append(t1 - t0)
        torch.cuda.synchronize()
        free_after = torch.cuda.mem_get_info()[0]
        reserved_after = allocator_reserved()
        result["pool"] = pool_kind

        # Replays: GPU time by CUDA events, then the host time of replay() alone.
        gpu_us, host_us = [], []
        with torch.cuda.stream(side):
            for g in graphs:
                for _ in range(3):
                    g.replay()
                side.synchronize()
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.replays)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.replays)]
                if hasattr(torch.cuda, "_sleep"):
                    torch.cuda._sleep(SLEEP_CYCLES)  # the GPU waits while the host queues every replay
                for s, e in zip(starts, ends):
                    s.record(side)
                    g.replay()
                    e.record(side)
                side.synchronize()
                gpu_us.append([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])
                host = []
                for _ in range(args.replays):
                    side.synchronize()  # an empty queue for every call, outside the clock
                    t0 = time.perf_counter()
                    g.replay()
                    t1 = time.perf_counter()
                    host.append((t1 - t0) * 1e6)
                side.synchronize()
                host_us.append(host)

            # Replay vs eager on fresh inputs, each graph checked right after its own replay
            # (graphs sharing a pool may overwrite each other's intermediates, not their outputs).
            check_gen = torch.Generator(device="cuda")
            diffs, scales, bitwise, eager_repeat, checksums = [], [], [], [], []
            for bs, g, out in zip(batch_sizes, graphs, outputs):
                check_gen.manual_seed(SEED + 1000 + bs)
                fresh = torch.randn(shape_of(bs), device="cuda", dtype=dtype, generator=check_gen)
                static_x[:bs].copy_(fresh)
                out.fill_(float("nan"))  # a replay that does not write its output shows
                g.replay()
                eager = model(fresh)
                d = (out.float() - eager.float()).abs().max().item()
                diffs.append(d if not math.isnan(d) else math.inf)
                scales.append(eager.float().abs().max().item())
                bitwise.append(bool(torch.equal(out, eager)))
                # The control: is eager itself bitwise repeatable? And the replay's bits, which
                # the parent compares across variants (same weights, inputs and kernels).
                eager_repeat.append(bool(torch.equal(eager, model(fresh))))
                checksums.append(checksum(torch, out))
            side.synchronize()

    result.update(
        capture_ms=[s * 1e3 for s in capture_s],
        capture_total_ms=sum(capture_s) * 1e3,
        free_before=free_before,
        free_after=free_after,
        graphs_mib=(free_before - free_after) / MIB,
        allocator_reserved_mib=(reserved_after - reserved_before) / MIB,
        allocator_meter="cgc memory_stats(ctx).bytes_reserved" if cgc else "torch.cuda.memory_reserved()",
        replays=args.replays,
        replay_gpu_us=[median(v) for v in gpu_us],
        replay_gpu_sum_ms=sum(median(v) for v in gpu_us) / 1e3,
        replay_host_us=[median(v) for v in host_us],
        replay_host_median_us=median([t for v in host_us for t in v]),
        max_abs_diff_per_bs=diffs,
        max_abs_diff=max(diffs),
        rel_diff=max(d / s if s > 0 else (0.0 if d == 0 else math.inf) for d, s in zip(diffs, scales)),
        bitwise_per_bs=bitwise,
        bitwise_all=all(bitwise),
        eager_repeat_bitwise_per_bs=eager_repeat,
        eager_repeat_bitwise_all=all(eager_repeat),
        replay_checksums=checksums,
    )
    if variant == "C":
        result["graph_nodes"] = [g.info().node_count for g in graphs]
        result.update(same_process_host(torch, model, static_x[:batch_sizes[-1]], graphs[-1], side, args.replays))
    # Graphs before the pool and the tensors they use; torch's own objects go with the process.
    if variant == "C":
        for g in reversed(graphs):
            g.close()
        if hasattr(pool, "close"):
            pool.close()
    del graphs, outputs
    torch.cuda.synchronize()


def same_process_host(torch, model, x, g, side, replays):
    """replay() host time of C's cgc.Graph beside torch's CUDAGraph.replay() of the same work in
    this process (a torch.cuda.graph on cgc's pools), interleaved call by call: host times drift
    between processes, not within one, so this pair is the fair comparison of the two calls."""
    tg = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(tg, stream=side):
        out = model(x)
    timings = {"cgc": [], "torch": []}
    with torch.cuda.stream(side):
        for _ in range(3):
            g.replay()
            tg.replay()
        for i in range(4 * replays):
            order = (("cgc", g), ("torch", tg)) if i % 2 == 0 else (("torch", tg), ("cgc", g))
            for name, graph in order:
                side.synchronize()  # an empty queue for every call, outside the clock
                t0 = time.perf_counter()
                graph.replay()
                timings[name].append((time.perf_counter() - t0) * 1e6)
        side.synchronize()
    del tg, out
    return {"host_same_process_cgc_us": median(timings["cgc"]), "host_same_process_torch_us": median(timings["torch"])}


# ---- the parent: runs the children, prints the tables --------------------------------------------


def run_child(args, model, variant, env):
    cmd = [sys.executable, SCRIPT, "--child", variant, "--model", model,
           "--batch-sizes", ",".join(map(str, args.batch_sizes)), "--replays", str(args.replays),
           "--warmup", str(args.warmup), "--dtype", args.dtype, "--c-pool", args.c_pool,
           "--sdpa-backend", args.sdpa_backend]
    if args.encoder_fastpath:
        cmd.append("--encoder-fastpath")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "model": model, "error": "timed out after %d s" % args.child_timeout}
    result = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except ValueError:
                pass
    if result is None:
        tail = (proc.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        result = {"variant": variant, "model": model,
                  "error": "exit status %d, no result: %s" % (proc.returncode, tail),
                  "stderr": proc.stderr[-4000:]}
    elif proc.returncode != 0 and "error" not in result:
        result["note"] = "exit status %d after its result" % proc.returncode
    result["child_seconds"] = time.perf_counter() - t0
    return result


SUMMED = ("capture_total_ms", "graphs_mib", "allocator_reserved_mib", "replay_gpu_sum_ms", "replay_host_median_us")
SAME_PROCESS = ("host_same_process_cgc_us", "host_same_process_torch_us")  # C's only
PER_BS = ("capture_ms", "replay_gpu_us", "replay_host_us")


def combine(rounds):
    """One result from a variant's rounds: medians of the figures (per batch size too), the worst
    of the checks; every round kept under "rounds". A failed round fails the variant."""
    for k, r in enumerate(rounds):
        if not ok(r):
            if len(rounds) > 1:
                r = dict(r, error="round %d: %s" % (k + 1, r.get("error")))
            return r
    if len(rounds) == 1:
        return rounds[0]
    out = dict(rounds[0])
    for key in SUMMED + tuple(k for k in SAME_PROCESS if k in out):
        out[key] = median([r[key] for r in rounds])
    for key in PER_BS:
        out[key] = [median(list(column)) for column in zip(*(r[key] for r in rounds))]
    out["max_abs_diff"] = max(r["max_abs_diff"] for r in rounds)
    out["rel_diff"] = max(r["rel_diff"] for r in rounds)
    out["bitwise_all"] = all(r["bitwise_all"] for r in rounds)
    out["eager_repeat_bitwise_all"] = all(r["eager_repeat_bitwise_all"] for r in rounds)
    out["replay_checksums_repeatable"] = all(r["replay_checksums"] == rounds[0]["replay_checksums"] for r in rounds)
    out["child_seconds"] = sum(r["child_seconds"] for r in rounds)
    out["rounds"] = rounds
    return out


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return "%.*f" % (digits, v)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def markdown_table(header, rows):
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


def ok(r):
    return r is not None and "error" not in r


def per_bs_table(runs):
    """Per batch size: capture ms and replay GPU us of each variant."""
    done = [v for v in runs if ok(runs[v])]
    if not done:
        return None
    sizes = runs[done[0]]["batch_sizes"]
    header = ["bs"] + ["%s capture ms" % v for v in done] + ["%s replay GPU us" % v for v in done] + \
        ["%s replay() us" % v for v in done]
    rows = []
    for i, bs in enumerate(sizes):
        rows.append([str(bs)] + [fmt(runs[v]["capture_ms"][i]) for v in done] +
                    [fmt(runs[v]["replay_gpu_us"][i], 1) for v in done] +
                    [fmt(runs[v]["replay_host_us"][i], 1) for v in done])
    return markdown_table(header, rows)


def summary_table(runs):
    header = ["variant", "capture ms", "graphs MiB", "replay GPU ms", "replay() host us",
              "max diff vs eager", "bitwise", "replay bits = A's", "capture x A", "capture x A, paired",
              "MiB x A", "replay GPU x A"]
    a = runs.get("A") if ok(runs.get("A")) else None
    rows = []
    for v, r in runs.items():
        name = "%s %s" % (v, VARIANTS[v])
        if not ok(r):
            error = r.get("error", "?")
            rows.append([name, "FAILED: %s" % (error if len(error) <= 72 else error[:69] + "...")] +
                        ["-"] * (len(header) - 2))
            continue
        x, same = {}, "-"
        if a is not None and v != "A":
            same = "yes" if r["replay_checksums"] == a["replay_checksums"] else "no"
        if a is not None:
            # Host timings drift between processes more than between variants: the median of the
            # ratios of rounds run one after the other (A, B, C of round k) pairs like with like.
            pairs = zip(r.get("rounds", [r]), a.get("rounds", [a]))
            x = {"paired": median([ri["capture_total_ms"] / ai["capture_total_ms"] for ri, ai in pairs]),
                 "cap": ratio(r["capture_total_ms"], a["capture_total_ms"]),
                 "mib": ratio(r["graphs_mib"], a["graphs_mib"]),
                 "gpu": ratio(r["replay_gpu_sum_ms"], a["replay_gpu_sum_ms"])}
        rows.append([name, fmt(r["capture_total_ms"], 1), fmt(r["graphs_mib"], 1), fmt(r["replay_gpu_sum_ms"], 3),
                     fmt(r["replay_host_median_us"], 1), "%.3g" % r["max_abs_diff"],
                     "yes" if r["bitwise_all"] else "no", same,
                     fmt(x.get("cap")), fmt(x.get("paired")), fmt(x.get("mib")), fmt(x.get("gpu"))])
    return markdown_table(header, rows)


def parse_sizes(text):
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError("batch sizes are integers separated by commas: %r" % text)
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("batch sizes must be at least 1: %r" % text)
    return sizes


def parse_list(allowed):
    def parse(text):
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError("choose from %s, not %r" % (",".join(allowed), text))
        return [s for s in allowed if s in items]  # the usual order, each once
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=parse_sizes, default=DEFAULT_BATCH_SIZES,
                    help="comma-separated (default %s); captured largest first" %
                    ",".join(map(str, DEFAULT_BATCH_SIZES)))
    ap.add_argument("--models", type=parse_list(MODELS), default=list(MODELS),
                    help="comma-separated, of %s (default: both)" % ",".join(MODELS))
    ap.add_argument("--variants", type=parse_list(tuple(VARIANTS)), default=list(VARIANTS),
                    help="comma-separated, of A,B,C (default: all)")
    ap.add_argument("--replays", type=int, default=50, help="timed replays per batch size (default 50)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every variant this many times, interleaved, and report medians (default 1; "
                         "host timings drift from one process to the next)")
    ap.add_argument("--warmup", type=int, default=3, help="eager runs per batch size before capture (default 3)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--sdpa-backend", choices=("flash", "efficient", "cudnn", "math", "auto"), default="flash",
                    help="the one scaled_dot_product_attention kernel allowed (default flash: bitwise "
                         "repeatable); auto: torch's own choice")
    ap.add_argument("--encoder-fastpath", action="store_true",
                    help="leave torch's MHA fast path on for the encoder (off by default)")
    ap.add_argument("--c-pool", choices=("torch", "cgc"), default="torch",
                    help="the pool variant C shares: a torch.cuda.graph_pool_handle() (default) or the "
                         "first graph's g.pool()")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="largest |replay - eager| relative to the eager output's largest magnitude "
                         "before a variant counts as wrong (default 0.02; bitwise equality is reported apart)")
    ap.add_argument("--cgc-library", help="libcgc.so.1 to use (default: $CGC_LIBRARY, else the bundle's or "
                                          "the repository's)")
    ap.add_argument("--child-timeout", type=int, default=240, help="seconds per child process (default 240)")
    ap.add_argument("--json", help="write every figure, per batch size too, to this file")
    ap.add_argument("--child", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replays < 1 or args.warmup < 1 or args.rounds < 1:
        ap.error("--replays, --warmup and --rounds must be at least 1")

    if args.child:
        if not args.model:
            ap.error("--child needs --model")
        return child_main(args)

    try:
        import torch
    except ImportError as e:
        print("torch_models: no PyTorch here (%s); nothing to measure" % e)
        return 1
    if not torch.cuda.is_available():
        print("torch_models: no GPU visible to PyTorch (torch %s); nothing to measure" % torch.__version__)
        return 1

    env = dict(os.environ)
    library = find_library(args.cgc_library)
    if library:
        env["CGC_LIBRARY"] = os.environ["CGC_LIBRARY"] = library
    cgc_version = cgc_error = None
    try:
        cgc = import_cgc()
        cgc_version = ".".join(map(str, cgc.version()))
        library = cgc.library_path()
    except Exception as e:
        cgc_error = "%s: %s" % (type(e).__name__, e)

    device = torch.cuda.get_device_name(0)
    print("torch_models: %s, PyTorch %s (CUDA %s), cgc %s" % (
        device, torch.__version__, torch.version.cuda, cgc_version or "unavailable (%s)" % cgc_error))
    print("  cgc.py from %s, libcgc from %s" % (binding_dir() or "the import path", library or "the loader's path"))
    print("  batch sizes %s captured largest first, one shared pool, outputs kept; %s; SDPA %s; %d replays "
          "per batch size" % (",".join(map(str, sorted(args.batch_sizes, reverse=True))), args.dtype,
                              args.sdpa_backend, args.replays))

    results = {"device": device, "torch_version": torch.__version__, "cuda": torch.version.cuda,
               "cgc_version": cgc_version, "cgc_error": cgc_error, "cgc_library": library,
               "batch_sizes": sorted(args.batch_sizes, reverse=True), "dtype": args.dtype,
               "replays": args.replays, "warmup": args.warmup, "encoder_fastpath": args.encoder_fastpath,
               "sdpa_backend": args.sdpa_backend, "c_pool": args.c_pool, "rounds": args.rounds,
               "tolerance": args.tolerance, "models": {}}
    failed = 0
    for model in args.models:
        rounds = {v: [] for v in args.variants}
        for k in range(args.rounds):  # A, B, C, A, B, C, ...: drift of the machine spreads over all
            for v in args.variants:
                if v != "A" and cgc_error:
                    r = {"variant": v, "model": model, "error": "cgc unavailable: " + cgc_error}
                else:
                    r = run_child(args, model, v, env)
                rounds[v].append(r)
                label = "%s %s%s" % (model, v, " round %d" % (k + 1) if args.rounds > 1 else "")
                if ok(r):
                    print("%s: %.1f s, capture %.1f ms, %.1f MiB, max diff %.3g" % (
                        label, r["child_seconds"], r["capture_total_ms"], r["graphs_mib"], r["max_abs_diff"]), flush=True)
                else:
                    print("%s: FAILED: %s" % (label, r.get("error")), flush=True)
                    if r.get("cgc_last_error"):
                        print("    cgc_last_error(): %s" % r["cgc_last_error"])
                    if r.get("traceback") or r.get("stderr"):
                        print("\n".join("    " + l for l in (r.get("traceback") or r["stderr"]).strip().splitlines()[-8:]))
        runs = {v: combine(rounds[v]) for v in args.variants}
        for v, r in runs.items():
            if ok(r):
                r["wrong"] = not math.isfinite(r["rel_diff"]) or r["rel_diff"] > args.tolerance
                failed += r["wrong"]
                if r["wrong"]:
                    print("%s %s: WRONG: replay differs from eager by %.3g of its largest magnitude" % (
                        model, v, r["rel_diff"]))
            else:
                failed += 1
        results["models"][model] = {"title": MODEL_TITLES[model], "variants": runs}
        table = per_bs_table(runs)
        if table:
            print("\n%s per batch size (replay figures: medians of %d%s)" % (
                model, args.replays, "; medians over %d rounds" % args.rounds if args.rounds > 1 else ""))
            print(table)

    for model in args.models:
        runs = results["models"][model]["variants"]
        print("\n### %s: %s, %s%s" % (model, MODEL_TITLES[model], args.dtype,
                                       ", medians over %d rounds" % args.rounds if args.rounds > 1 else ""))
        print(summary_table(runs))
        c = runs.get("C")
        if ok(c):
            print("C's pool: %s" % c.get("pool"))
            if "host_same_process_cgc_us" in c:
                cg, tg = c["host_same_process_cgc_us"], c["host_same_process_torch_us"]
                print("replay() host us in one process, batch size %d, interleaved: cgc.Graph %.2f, torch "
                      "CUDAGraph %.2f (x %.2f)" % (min(args.batch_sizes), cg, tg, cg / tg))
        unrepeatable = [v for v, r in runs.items() if ok(r) and not r["eager_repeat_bitwise_all"]]
        if unrepeatable:
            print("eager itself was not bitwise repeatable in %s (the same input twice)" % ",".join(unrepeatable))
    print("\ncapture ms: sum over batch sizes of the `with ...graph(...)` block, entry and exit included; "
          "graphs MiB: free device memory (cuMemGetInfo) before the first capture minus after the last; "
          "replay GPU ms: sum over batch sizes of the median CUDA-event time of one replay; replay() host us: "
          "median over all replays; max diff vs eager: max |replay - eager| over all batch sizes; bitwise: all outputs bit-for-bit "
          "eager's; replay bits = A's: every batch size's replay output bit-for-bit A's (same weights and "
          "inputs); x A: divided by A's figure; capture x A, paired: the median over rounds of round k's "
          "capture time divided by A's in round k.")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print("figures written to %s" % args.json)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
