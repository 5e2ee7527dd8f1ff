#!/usr/bin/env python3
"""PyTorch beside cgc: scenarios 1, 2, 3 and 5 of cgc_bench measured with torch.cuda.graph.

Run it on the GPU machine that ran cgc_bench, after it:

    cgc_bench --json cgc.json                       # or: bazel run //bench:cgc_bench -- --json ...
    python3 bench/torch_compare.py --cgc-json cgc.json [--full] [--json torch.json]

It needs PyTorch (written against 2.11) and the standard library, nothing else. The sizes and
batch sizes come from cgc's JSON so that the rows line up; without --cgc-json it uses the quick
preset's and prints PyTorch's figures alone.

What is measured, the same way as cgc_bench does it:
  1. host cost of CUDAGraph.replay() (a batch of 20 launches timed, the stream drained before
     each batch outside the clock), graphs of 1..1000 tiny kernels (buf.add_(1) on 32 floats);
  2. replay + synchronize vs the same ops run eagerly + synchronize;
  3. capture + instantiate: CUDAGraph.capture_begin()/capture_end() on a side stream, and the
     torch.cuda.graph context manager (which also synchronizes and empties the cache on entry);
  4. (not here: cgc's allocator pairs have no PyTorch counterpart worth timing from Python);
  5. memory of 35 graphs x[b,4096] -> h1 -> h2 -> out with private pools, and sharing one
     pool (torch.cuda.graph_pool_handle()) smallest first and largest first, from
     torch.cuda.memory_reserved().
Timings from Python include the interpreter's cost of each call: that is what a PyTorch user
pays, and it is why "torch / cgc" is the figure to read, not a claim about the C++ underneath.
"""

import argparse
import gc
import json
import sys
import time

import torch

QUICK_NODES = [1, 10, 100, 1000]
QUICK_CAPTURE_NODES = [10, 100, 1000, 10000]
HIDDEN = 4096
MIB = 1024.0 * 1024.0
BATCH = 20  # launches per timed batch, as in cgc_bench


def server_batches():
    return [1, 2, 4, 8] + list(range(16, 257, 8))


def summarize(samples):
    """Median (mean of the middle two for an even count) and nearest-rank 90th percentile."""
    v = sorted(samples)
    n = len(v)
    median = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    rank = (9 * n + 9) // 10
    return median, v[rank - 1]


def launch_reps(nodes, full):
    """Repetitions of scenarios 1 and 2, as in cgc_bench."""
    if nodes <= 100:
        return 1000 if full else 200
    if nodes <= 300:
        return 400 if full else 100
    return 150 if full else 40


def now_ns():
    return time.perf_counter_ns()  # monotonic, like CLOCK_MONOTONIC


def tiny_graph(stream, buf, nodes, pool=None):
    """A graph of `nodes` one-kernel ops on a 32-float tensor."""
    with torch.cuda.stream(stream):
        buf.add_(1.0)  # eager warm-up before capture, as PyTorch advises
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, stream=stream):
        for _ in range(nodes):
            buf.add_(1.0)
    return g


# ---- scenario 1: replay launch cost on the host ----------------------------------------------


def torch_launch(nodes_list, full):
    rows = []
    s = torch.cuda.Stream()
    for nodes in nodes_list:
        reps = launch_reps(nodes, full)
        buf = torch.rand(32, device="cuda") + 0.5
        g = tiny_graph(s, buf, nodes)
        with torch.cuda.stream(s):
            for _ in range(BATCH):
                g.replay()
            s.synchronize()
            samples = []
            for _ in range(reps):
                s.synchronize()  # an empty queue for every batch, outside the clock
                t0 = now_ns()
                for _ in range(BATCH):
                    g.replay()
                t1 = now_ns()
                samples.append((t1 - t0) / 1e3 / BATCH)
            s.synchronize()
        med, p90 = summarize(samples)
        rows.append({"nodes": nodes, "torch_median": med, "torch_p90": p90, "reps": reps})
        del g
    return rows


# ---- scenario 2: replay + sync vs eager + sync ------------------------------------------------


def torch_replay(nodes_list, full):
    rows = []
    s = torch.cuda.Stream()
    for nodes in nodes_list:
        reps = launch_reps(nodes, full)
        buf = torch.rand(32, device="cuda") + 0.5
        g = tiny_graph(s, buf, nodes)
        graph_t, eager_t = [], []
        with torch.cuda.stream(s):
            for _ in range(3):  # warm-up
                g.replay()
                for _ in range(nodes):
                    buf.add_(1.0)
                s.synchronize()
            for rep in range(reps):
                for half in range(2):
                    if (rep + half) % 2 == 0:
                        t0 = now_ns()
                        g.replay()
                        s.synchronize()
                        graph_t.append((now_ns() - t0) / 1e3)
                    else:
                        t0 = now_ns()
                        for _ in range(nodes):
                            buf.add_(1.0)
                        s.synchronize()
                        eager_t.append((now_ns() - t0) / 1e3)
        gm, gp = summarize(graph_t)
        em, ep = summarize(eager_t)
        rows.append({"nodes": nodes, "graph_median": gm, "graph_p90": gp, "eager_median": em,
                     "eager_p90": ep, "speedup": em / gm, "reps": reps})
        del g
    return rows


# ---- scenario 3: capture + instantiate --------------------------------------------------------


def capture_low_level(s, buf, nodes):
    """CUDAGraph.capture_begin()/capture_end(): the capture and instantiation alone, us."""
    g = torch.cuda.CUDAGraph()
    s.synchronize()
    with torch.cuda.stream(s):
        t0 = now_ns()
        g.capture_begin()
        for _ in range(nodes):
            buf.add_(1.0)
        g.capture_end()
        t1 = now_ns()
    del g
    return (t1 - t0) / 1e3


def capture_context_manager(s, buf, nodes):
    """with torch.cuda.graph(g): what most users write, us."""
    g = torch.cuda.CUDAGraph()
    s.synchronize()
    t0 = now_ns()
    with torch.cuda.graph(g, stream=s):
        for _ in range(nodes):
            buf.add_(1.0)
    t1 = now_ns()
    del g
    return (t1 - t0) / 1e3


def torch_capture(nodes_list, full):
    rows = []
    s = torch.cuda.Stream()
    buf = torch.rand(32, device="cuda") + 0.5
    with torch.cuda.stream(s):
        buf.add_(1.0)
    s.synchronize()
    for nodes in nodes_list:
        if nodes <= 100:
            reps = 200 if full else 40
        elif nodes <= 1000:
            reps = 60 if full else 15
        else:
            reps = 15 if full else 7
        capture_low_level(s, buf, nodes)  # warm-up
        capture_context_manager(s, buf, nodes)
        low, ctx = [], []
        for rep in range(reps):
            for half in range(2):
                if (rep + half) % 2 == 0:
                    low.append(capture_low_level(s, buf, nodes))
                else:
                    ctx.append(capture_context_manager(s, buf, nodes))
                gc.collect()  # graphs freed outside the clock
        lm, lp = summarize(low)
        cm, cp = summarize(ctx)
        rows.append({"nodes": nodes, "capture_end_median": lm, "capture_end_p90": lp,
                     "context_manager_median": cm, "context_manager_p90": cp, "reps": reps})
    return rows


# ---- scenario 5: memory of 35 graphs ---------------------------------------------------------

SCALE = (0.5, -0.75, 1.25)
BIAS = (0.1, 0.2, -0.3)


def layer(inp, k):
    out = inp.mul(SCALE[k])  # the layer's one allocation
    out.add_(BIAS[k])
    return out


def mlp(x, b):
    """x[b] -> h1 -> h2 -> out; h1 and h2 go back to the pool inside the capture."""
    h1 = layer(x[:b], 0)
    h2 = layer(h1, 1)
    del h1
    out = layer(h2, 2)
    del h2
    return out


def clean():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def memory_variant(name, x, ref, batches, stream):
    """Captures the graphs of one variant; returns reserved MiB (delta of memory_reserved), live
    outputs MiB and a replay check. The graphs are freed before returning."""
    largest = batches[-1]
    if name == "largest_alone":
        order = [largest]
    elif name in ("shared_largest_first", "shared_largest_first_outputs_released"):
        order = list(reversed(batches))
    else:
        order = list(batches)
    shared = name.startswith("shared")
    released = name.endswith("outputs_released")
    clean()
    before = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle() if shared else None
    graphs, outputs = [], []
    for b in order:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, stream=stream):
            out = mlp(x, b)
        graphs.append(g)
        # Released: the output tensor is dropped at once (vLLM keeps only a weak reference), so
        # later captures may reuse its memory; it cannot be read back here, so not checked.
        outputs.append(None if released else out)
        del out
    reserved = (torch.cuda.memory_reserved() - before) / MIB
    outputs_mib = sum(o.numel() * o.element_size() for o in outputs if o is not None) / MIB
    checked = wrong = 0
    if not released:
        for o in outputs:
            o.fill_(float("nan"))  # a replay that does not write its output fails
        for g in graphs:  # capture order: the rule for graphs that share a pool
            g.replay()
        torch.cuda.synchronize()
        for b, o in zip(order, outputs):
            checked += 1
            if not torch.allclose(o.cpu(), ref[:b], rtol=1e-4, atol=1e-4):
                wrong += 1
    del graphs, outputs, pool
    clean()
    return {"name": name, "graphs": len(order), "reserved_mib": reserved, "outputs_mib": outputs_mib,
            "checked": checked, "wrong": wrong}


def torch_memory(batches):
    stream = torch.cuda.Stream()
    maxb = batches[-1]
    gen = torch.Generator().manual_seed(1)
    x_cpu = torch.rand(maxb, HIDDEN, generator=gen) * 2 - 1
    ref = x_cpu
    for k in range(3):
        ref = ref * SCALE[k] + BIAS[k]
    x = x_cpu.cuda()
    with torch.cuda.stream(stream):
        mlp(x, 1)  # eager warm-up
    torch.cuda.synchronize()
    names = ["largest_alone", "private", "shared_smallest_first", "shared_largest_first",
             "shared_largest_first_outputs_released"]
    return [memory_variant(n, x, ref, batches, stream) for n in names]


# ---- printing ---------------------------------------------------------------------------------


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def by_key(rows, key, value, **match):
    for r in rows or []:
        if r.get(key) == value and all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def print_table(title, header, rows):
    print(f"\n== {title}")
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(header)]
    line = " | ".join(str(h).rjust(w) for h, w in zip(header, widths))
    print(line)
    for r in rows:
        print(" | ".join(str(c).rjust(w) for c, w in zip(r, widths)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cgc-json", help="the file cgc_bench --json wrote (same machine)")
    ap.add_argument("--json", help="write PyTorch's figures (and cgc's beside them) to this file")
    preset = ap.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="the default")
    preset.add_argument("--full", action="store_true", help="more repetitions")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("torch_compare: no GPU visible to PyTorch; nothing to measure")
        return 1
    cgc = None
    if args.cgc_json:
        with open(args.cgc_json) as f:
            cgc = json.load(f)

    device = torch.cuda.get_device_name()
    print(f"torch_compare: PyTorch {torch.__version__} (CUDA {torch.version.cuda}) on {device}")
    if cgc:
        print(f"cgc figures: {args.cgc_json}: cgc {cgc.get('cgc_version')} on {cgc.get('device')}, "
              f"driver {cgc.get('driver_version')}, {cgc.get('preset')} preset")
        if cgc.get("device") != device:
            print("WARNING: cgc's figures come from another device; the comparison means little")

    launch_c = (cgc or {}).get("launch", {}).get("rows")
    replay_c = (cgc or {}).get("replay", {}).get("rows")
    capture_c = (cgc or {}).get("capture", {}).get("rows")
    memory_c = (cgc or {}).get("memory", {})
    launch_nodes = [r["nodes"] for r in launch_c] if launch_c else QUICK_NODES
    replay_nodes = [r["nodes"] for r in replay_c] if replay_c else QUICK_NODES
    capture_nodes = sorted({r["nodes"] for r in capture_c}) if capture_c else QUICK_CAPTURE_NODES
    batches = memory_c.get("batches") or server_batches()
    if memory_c.get("hidden", HIDDEN) != HIDDEN:
        print(f"WARNING: cgc used hidden width {memory_c.get('hidden')}, this script {HIDDEN}")

    results = {"device": device, "torch_version": torch.__version__, "cuda": torch.version.cuda}

    # 1
    rows = torch_launch(launch_nodes, args.full)
    results["launch"] = rows
    table = []
    for r in rows:
        c = by_key(launch_c, "nodes", r["nodes"]) or {}
        raw, cg, t = c.get("raw_median"), c.get("cgc_median"), r["torch_median"]
        table.append([r["nodes"], fmt(raw), fmt(cg), fmt(t), fmt(ratio(cg, raw)), fmt(ratio(t, raw)),
                      fmt(ratio(t, cg)), fmt(r["torch_p90"])])
    print_table("1. Replay launch cost on the host, us per launch (medians)",
                ["nodes", "raw cuGraphLaunch", "cgc_graph_launch", "torch replay()", "cgc/raw",
                 "torch/raw", "torch/cgc", "torch p90"], table)

    # 2
    rows = torch_replay(replay_nodes, args.full)
    results["replay"] = rows
    table = []
    for r in rows:
        c = by_key(replay_c, "nodes", r["nodes"]) or {}
        table.append([r["nodes"], fmt(c.get("graph_median")), fmt(r["graph_median"]), fmt(c.get("eager_median")),
                      fmt(r["eager_median"]), fmt(c.get("speedup"), 2), fmt(r["speedup"], 2)])
    print_table("2. Replay + sync vs eager + sync, us (medians; speedup = eager / graph, each against its own eager)",
                ["nodes", "cgc graph", "torch graph", "driver eager", "torch eager", "cgc speedup",
                 "torch speedup"], table)

    # 3
    rows = torch_capture(capture_nodes, args.full)
    results["capture"] = rows
    table = []
    for r in rows:
        c = by_key(capture_c, "nodes", r["nodes"], upload=False) or {}
        raw, cg = c.get("raw_median"), c.get("cgc_median")
        tl, tc = r["capture_end_median"], r["context_manager_median"]
        table.append([r["nodes"], fmt(raw), fmt(cg), fmt(tl), fmt(tc), fmt(ratio(cg, raw)), fmt(ratio(tl, raw)),
                      fmt(ratio(tl, cg))])
    print_table("3. Capture + instantiate, us (medians; torch's include Python's cost of issuing each op)",
                ["nodes", "raw driver", "cgc", "torch capture_end", "torch.cuda.graph", "cgc/raw", "torch/raw",
                 "torch/cgc"], table)

    # 5
    rows = torch_memory(batches)
    results["memory"] = {"hidden": HIDDEN, "batches": batches, "variants": rows}
    cgc_variants = {v["name"]: v for v in memory_c.get("variants", [])}
    torch_largest = rows[0]["reserved_mib"]
    cgc_largest = cgc_variants.get("largest_alone", {}).get("reserved_mib")
    table = []
    for r in rows:
        c = cgc_variants.get(r["name"], {})
        check = "n/a" if r["checked"] == 0 else ("OK" if r["wrong"] == 0 else "FAIL")
        table.append([r["name"], r["graphs"], fmt(c.get("reserved_mib"), 1), fmt(r["reserved_mib"], 1),
                      fmt(ratio(c.get("reserved_mib"), cgc_largest)), fmt(ratio(r["reserved_mib"], torch_largest)),
                      fmt(r["outputs_mib"], 1), check])
    print_table(f"5. Memory of {len(batches)} graphs x[b,{HIDDEN}] -> h1 -> h2 -> out, reserved MiB",
                ["variant", "graphs", "cgc MiB", "torch MiB", "cgc x largest", "torch x largest",
                 "torch outputs MiB", "torch check"], table)

    if cgc:
        results["cgc"] = cgc
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print(f"\nfigures written to {args.json}")
    failed = sum(r["wrong"] for r in rows)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
