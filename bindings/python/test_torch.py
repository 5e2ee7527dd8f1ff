"""PyTorch as a client of cgc, through cgc.py: cgc is torch's allocator in THIS process, torch
work is captured with cgc.graph on torch's current stream and replayed. Also the checks of the
older tests/torch_allocator_test.py, and a side-by-side measurement against torch.cuda.graph with
torch's native allocator (in a child process: the allocator cannot be switched back).

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -m unittest -v test_torch
Skips (with the reason) without PyTorch or a GPU. Measurements are printed, not asserted.
"""

import json
import os
import statistics
import subprocess
import sys
import time
import unittest

import cgc

try:
    import torch
except ImportError as e:  # the CI machine has no PyTorch
    torch = None
    SKIP = "no PyTorch here (%s)" % e
else:
    SKIP = None if torch.cuda.is_available() else "no GPU visible to PyTorch"

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SIZES = 64, (512, 1024, 1024, 512)
REPLAYS, WARMUP = 200, 20


def setUpModule():
    if SKIP:
        raise unittest.SkipTest(SKIP)
    # Before any torch CUDA work in this process; the one way cgc becomes torch's allocator.
    cgc.use_as_torch_allocator()


def make_mlp():
    torch.manual_seed(0)
    i, h1, h2, o = SIZES
    return torch.nn.Sequential(
        torch.nn.Linear(i, h1), torch.nn.GELU(), torch.nn.Linear(h1, h2), torch.nn.GELU(),
        torch.nn.Linear(h2, o)).cuda().eval()


def median_us(samples):
    return statistics.median(samples) * 1e6


def time_replays(replay, sync):
    """(median us of replay+sync, median us of the host-side launch alone)."""
    for _ in range(WARMUP):
        replay()
        sync()
    both, launch = [], []
    for _ in range(REPLAYS):
        t0 = time.perf_counter()
        replay()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        both.append(t2 - t0)
        launch.append(t1 - t0)
    return median_us(both), median_us(launch)


def measure(kind):
    """Child process (a fresh one per side, so device totals hold nothing else): the MLP captured
    by cgc.graph on cgc's allocator (kind "cgc") or by torch.cuda.graph on torch's native
    allocator (kind "torch"), both warmed up and captured on the same side stream, so that
    cuBLAS's per-stream workspace exists before either capture. Prints one JSON line."""
    import torch as t  # noqa: F811 (the child imports it itself)
    if kind == "cgc":
        cgc.use_as_torch_allocator()
        ctx = cgc.Context(0)
        reserved = lambda: ctx.memory_stats().bytes_reserved  # noqa: E731
    else:
        reserved = t.cuda.memory_reserved
    model = make_mlp()
    static_in = t.randn(BATCH, SIZES[0], device="cuda")
    side = t.cuda.Stream()
    side.wait_stream(t.cuda.current_stream())
    with t.no_grad(), t.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    side.synchronize()
    before = reserved()
    with t.no_grad():
        if kind == "cgc":
            g = cgc.Graph()
            with t.cuda.stream(side), cgc.graph(g):  # torch's current stream: side
                static_out = model(static_in)
        else:
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g, stream=side):
                static_out = model(static_in)
    t.cuda.synchronize()
    after = reserved()
    x = t.randn(BATCH, SIZES[0], device="cuda")
    static_in.copy_(x)
    g.replay()
    t.cuda.synchronize()
    with t.no_grad():
        diff = (static_out - model(x)).abs().max().item()
    current = t.cuda.current_stream()
    result = {"pool_reserved": after - before, "device_reserved": reserved(), "max_diff": diff}
    result["replay_sync_us"], result["replay_us"] = time_replays(g.replay, current.synchronize)
    if kind == "cgc":  # launch on a stream handle made once, without looking up torch's stream
        stream = cgc.Stream.from_torch(current)
        result["launch_sync_us"], result["launch_us"] = time_replays(
            lambda: g.launch(stream), current.synchronize)
        with g.pool() as pool:
            result["pool_reserved"] = pool.memory_stats(ctx).bytes_reserved
        stream.close()
        g.close()
    print(json.dumps(result))


@unittest.skipIf(SKIP, SKIP or "")
class TorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = cgc.Context(0)

    @classmethod
    def tearDownClass(cls):
        torch.cuda.synchronize()
        cls.ctx.close()

    # -- the checks of the older tests/torch_allocator_test.py --------------------------------

    def test_allocations_are_cgcs(self):
        torch.cuda.synchronize()
        before = self.ctx.memory_stats().bytes_allocated
        x = torch.randn(1 << 20, device="cuda")
        y = x * 2 + 1
        torch.cuda.synchronize()
        self.assertTrue(torch.allclose(y, x * 2 + 1))  # torch math runs on cgc memory
        during = self.ctx.memory_stats().bytes_allocated
        self.assertGreaterEqual(during - before, 2 * (4 << 20))
        del y
        torch.cuda.synchronize()
        self.assertLess(self.ctx.memory_stats().bytes_allocated, during)  # frees return to cgc
        # torch's own caching allocator holds nothing. With cgc's complete allocator torch's
        # statistics are cgc's; with the pluggable one they are refused or zero.
        try:
            reported = torch.cuda.memory_reserved()
        except RuntimeError:
            reported = 0
        if cgc.use_as_torch_allocator() == "native":
            self.assertEqual(reported, self.ctx.memory_stats().bytes_reserved)
        else:
            self.assertEqual(reported, 0)
        del x

    def test_capture_on_a_torch_side_stream(self):
        side = torch.cuda.Stream()
        static_in = torch.randn(4096, device="cuda")
        torch.cuda.synchronize()
        g = cgc.Graph()
        with cgc.graph(g, stream=side):  # a torch stream, made current for the body
            self.assertEqual(torch.cuda.current_stream(), side)
            hidden = static_in * 3
            static_out = hidden.relu() + 0.5
            del hidden  # freed inside the capture: reusable by the same capture
        with g.pool() as pool:
            self.assertGreaterEqual(pool.memory_stats(self.ctx).bytes_allocated, 4096 * 4)
        stream = cgc.Stream.from_torch(side)
        for _ in range(3):
            static_in.copy_(torch.randn(4096, device="cuda"))
            torch.cuda.synchronize()
            g.launch(stream)
            side.synchronize()
            self.assertTrue(torch.allclose(static_out, (static_in * 3).relu() + 0.5))
        g.close()
        stream.close()
        torch.cuda.synchronize()
        self.assertTrue(torch.isfinite(static_out).all().item())  # outputs outlive the graph

    # -- the MLP captured through cgc.graph on torch's current stream --------------------------

    def capture_mlp(self):
        model = make_mlp()
        static_in = torch.randn(BATCH, SIZES[0], device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        g = cgc.Graph()
        with torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(3):  # warm-up: cuBLAS handles and workspaces are made eagerly
                model(static_in)
            stream.synchronize()
            with cgc.graph(g):  # torch's current stream: `stream`
                static_out = model(static_in)
        torch.cuda.current_stream().wait_stream(stream)
        return model, g, static_in, static_out, stream

    def test_mlp_replays_match_eager(self):
        torch.cuda.synchronize()
        device_before = self.ctx.memory_stats().bytes_reserved
        model, g, static_in, static_out, stream = self.capture_mlp()
        pool = g.pool()
        stats = pool.memory_stats(self.ctx)
        self.assertGreater(stats.bytes_reserved, 0)  # the graph's tensors came from its pool
        self.assertGreaterEqual(stats.bytes_allocated, BATCH * SIZES[-1] * 4)
        self.assertGreaterEqual(g.info().node_count, 5)
        for step in range(3):
            x = torch.randn(BATCH, SIZES[0], device="cuda")
            static_in.copy_(x)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                g.replay()  # on torch's current stream, like CUDAGraph.replay()
            stream.synchronize()
            with torch.no_grad():
                eager = model(x)
            diff = (static_out - eager).abs().max().item()
            self.assertLess(diff, 1e-4, "replay %d" % step)
        self.assertEqual(g.info().replay_count, 3)
        print("\nMLP through cgc.graph: %d nodes, pool reserved %d bytes, device reserved grew %d"
              % (g.info().node_count, stats.bytes_reserved,
                 self.ctx.memory_stats().bytes_reserved - device_before))
        g.close()
        pool.close()

    def test_replay_on_default_stream_fallback(self):
        # torch's current stream is the legacy default stream here: cgc.graph captures on a side
        # stream instead (as torch.cuda.graph does) and replay() runs on the default stream.
        static_in = torch.randn(1000, device="cuda")
        g = cgc.Graph()
        self.assertEqual(torch.cuda.current_stream().cuda_stream, 0)
        with cgc.graph(g):
            static_out = static_in.sin() * 2
        static_in.fill_(0.5)
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.allclose(static_out, torch.full_like(static_out, 0.5).sin() * 2))
        g.close()

    # -- fork/join over two torch streams, the second graph sharing the first's pool ---------

    def test_fork_join_shared_pool(self):
        s0, s1 = torch.cuda.Stream(), torch.cuda.Stream()
        x = torch.randn(1 << 16, device="cuda")
        torch.cuda.synchronize()
        g1, g2 = cgc.Graph(), cgc.Graph()
        with cgc.graph(g1, stream=s0):
            a = x * 2
            s1.wait_stream(s0)  # fork
            with torch.cuda.stream(s1):
                b = a + 1  # allocated on s1: still from the capture's pool
            c = a.sin()
            s0.wait_stream(s1)  # join
        pool1 = g1.pool()
        with cgc.graph(g2, stream=s0, pool=pool1):
            d = b * c
        pool2 = g2.pool()
        self.assertEqual(pool1, pool2)
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            torch.cuda.synchronize()
            with torch.cuda.stream(s0):
                g1.replay()
                g2.replay()
            s0.synchronize()
            self.assertTrue(torch.allclose(d, (x * 2 + 1) * (x * 2).sin(), atol=1e-5))
        self.assertEqual(g1.info().replay_count, 3)
        self.assertGreater(pool1.memory_stats(self.ctx).bytes_reserved, 0)
        for obj in (g2, g1, pool2, pool1):
            obj.close()

    def test_body_exception_discards_the_graph(self):
        s = torch.cuda.Stream()
        g = cgc.Graph()
        with self.assertRaises(KeyError):
            with cgc.graph(g, stream=s):
                torch.ones(10, device="cuda").add_(1)
                raise KeyError("boom")
        self.assertFalse(cgc.Stream.from_torch(s).is_capturing())
        with self.assertRaises(cgc.InvalidStateError):
            g.replay()
        g.close()

    # -- side by side with torch.cuda.graph on the native allocator ---------------------------

    def test_side_by_side(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
        sides = {}
        for kind in ("torch", "cgc"):
            child = subprocess.run(
                [sys.executable, "-c", "import test_torch; test_torch.measure(%r)" % kind], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
            self.assertEqual(child.returncode, 0, child.stderr[-3000:])
            sides[kind] = json.loads(child.stdout.strip().splitlines()[-1])
            self.assertLess(sides[kind]["max_diff"], 1e-4, kind)

        mib = 1.0 / (1 << 20)
        c, n = sides["cgc"], sides["torch"]
        rows = [
            ("cgc.graph, cgc allocator: Graph.replay()", c["replay_sync_us"], c["replay_us"], c),
            ("cgc.graph, cgc allocator: Graph.launch(s)", c["launch_sync_us"], c["launch_us"], c),
            ("torch.cuda.graph, native allocator: replay()", n["replay_sync_us"], n["replay_us"], n),
        ]
        print("\nSIDE-BY-SIDE MLP %s, batch %d, float32, %s, %d replays (median)"
              % ("->".join(map(str, SIZES)), BATCH, torch.cuda.get_device_name(0), REPLAYS))
        print("SIDE-BY-SIDE %-46s %14s %10s %15s %17s" % (
            "", "replay+sync us", "launch us", "graph pool MiB", "device total MiB"))
        for name, both, launch, side in rows:
            print("SIDE-BY-SIDE %-46s %14.1f %10.1f %15.2f %17.2f" % (
                name, both, launch, side["pool_reserved"] * mib, side["device_reserved"] * mib))
        print("SIDE-BY-SIDE (graph pool: cgc's pool bytes_reserved, torch's memory_reserved growth "
              "over the capture; device total: all reserved memory of that process)")


if __name__ == "__main__":
    unittest.main()
