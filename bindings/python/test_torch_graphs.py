"""PyTorch's own CUDA graphs on cgc's memory, through cgc.py: with cgc as torch's allocator
(cgc.use_as_torch_allocator(), which also attaches torch's graph-pool hooks), the captures torch
begins itself (torch.cuda.graph, CUDAGraph.capture_begin, make_graphed_callables) allocate from
cgc private pools, one per torch pool id. Each test checks a result against eager PyTorch and that
the graph's memory came from its cgc pool (cgc.torch_pool(g.pool()) and its memory_stats()).

Covered, after PyTorch's test_cuda.py where it has the case: a simple capture, two and three
successive captures sharing a pool, graph_pool_handle() sharing, a deleted graph's memory coming
back while its outputs stay valid, fork/join and record_stream inside a capture, random numbers
replayed like eager, make_graphed_callables forward and backward, an allocation-heavy capture
whose pool reuses memory, cgc.graph sharing a pool with torch.cuda.graph, and torch's random
numbers refused inside cgc.graph.

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -W error -m unittest -v test_torch_graphs
Skips (with the reason) without PyTorch or a GPU. Where cgc is torch's allocator but torch's
captures do not allocate from cgc pools (cgc.torch_graph_pools() False), every test FAILS.
"""

import copy
import gc
import unittest
import warnings

import cgc

try:
    import torch
except ImportError as e:  # the CI machine has no PyTorch
    torch = None
    SKIP = "no PyTorch here (%s)" % e
else:
    SKIP = None if torch.cuda.is_available() else "no GPU visible to PyTorch"

N = 1 << 16  # float32 elements of most tensors here: 256 KiB
MIB = 1 << 20
SLACK = 2 * MIB  # device memory allowed to differ between two captures of the same work
_allocator_warnings = []  # what use_as_torch_allocator warned, shown if the bridge is missing
_allocator_kind = []  # what it installed: "native" or "pluggable"


def setUpModule():
    if SKIP:
        raise unittest.SkipTest(SKIP)
    # Before any torch CUDA work in this process. Without the bridge it warns (an error under
    # -W error); record that, so that each test fails with the reason instead of the module.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _allocator_kind.append(cgc.use_as_torch_allocator())
    _allocator_warnings.extend(str(w.message) for w in caught)
    # cgc allocates through the driver API and leaves each thread's current context as it found
    # it, so torch's autograd thread can reach cuBLAS with no context current; torch then makes
    # the primary context current itself and warns once (docs/TORCH.md). Not a fault under test.
    warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
    # No TF32 in matmuls (make_graphed_callables is compared to tight tolerances). PyTorch >= 2.9
    # warns on the old allow_tf32 switches: use the new ones where they exist.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matmul = torch.backends.cuda.matmul
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "ieee"
            if hasattr(torch.backends.cudnn, "conv"):
                torch.backends.cudnn.conv.fp32_precision = "ieee"
        else:
            matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False


# -- helpers ---------------------------------------------------------------------------------


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def randn(*shape):
    return torch.randn(*shape, device="cuda")


def small_ints(*shape):
    """Integer-valued float32 in [-2, 2]: sums of their products are exact in any order, so
    matmuls match eager bit for bit whatever algorithm cuBLAS picks."""
    return torch.randint(-2, 3, shape, device="cuda").float()


def churn(x, w, steps=20):
    """An allocation-heavy step loop: temporaries of changing sizes (flip, cat, chunk, matmuls
    of 8 to 32 columns), every value an integer in [-2, 2] again after each step."""
    h = x
    for i in range(steps):
        k = 8 * (1 + i % 4)
        wide = torch.cat([h, h.flip(1)], dim=1)
        left, right = wide.chunk(2, dim=1)
        mixed = (left - right)[:, :k] @ w[:k]
        h = torch.remainder(mixed + h, 5) - 2
    return h


def churn_fresh_bytes(rows, cols, steps=20):
    """A lower bound of the bytes churn() allocates: each step's cat, matmul and new h."""
    return steps * rows * (2 * cols + cols + cols) * 4


def make_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).cuda()


@unittest.skipIf(SKIP, SKIP or "")
class TorchGraphsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = cgc.Context(0)

    @classmethod
    def tearDownClass(cls):
        torch.cuda.synchronize()
        cls.ctx.close()

    def setUp(self):
        said = "; ".join(_allocator_warnings) or "use_as_torch_allocator warned nothing"
        self.assertTrue(cgc.torch_graph_pools(), "cgc is torch's allocator, but torch's captures do not "
                        "allocate from cgc pools (the graph-pool bridge did not attach): %s" % said)

    def tearDown(self):
        left_open = torch.cuda.is_current_stream_capturing()
        self.assertFalse(left_open, "the test left a capture open on torch's current stream")
        torch.cuda.synchronize()

    # -- helpers of the tests ---------------------------------------------------------------

    def open_pool(self, pool_id):
        """The cgc Pool behind a torch pool id (close it); fails where cgc holds none."""
        pool = cgc.torch_pool(pool_id)
        self.assertIsNotNone(pool, "cgc holds no pool for torch pool id %r (it holds %r)"
                             % (pool_id, cgc.torch_pool_ids()))
        return pool

    def pool_stats(self, pool_id):
        with self.open_pool(pool_id) as pool:
            return pool.memory_stats()

    def assert_from_pool(self, pool_id, *tensors):
        """The torch pool id has a cgc pool that holds memory and at least the tensors' bytes
        allocated (tensors the capture made and that are still alive). Returns its stats."""
        self.assertIn(tuple(pool_id), cgc.torch_pool_ids())
        stats = self.pool_stats(pool_id)
        self.assertGreater(stats.bytes_reserved, 0, "pool %r" % (pool_id,))
        self.assertGreaterEqual(stats.bytes_allocated, nbytes(*tensors), "pool %r" % (pool_id,))
        return stats

    def assert_one_pool(self, *pool_ids):
        """The torch pool ids all name the same cgc pool."""
        pools = [self.open_pool(i) for i in pool_ids]
        try:
            for pool_id, pool in zip(pool_ids[1:], pools[1:]):
                self.assertEqual(pool, pools[0], "pools of %r and %r" % (pool_ids[0], pool_id))
        finally:
            for pool in pools:
                pool.close()

    def flush(self):
        """Cached device memory back to the driver (torch's call, and cgc's own to be sure)."""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.ctx.empty_cache()

    def device_reserved(self):
        return self.ctx.memory_stats().bytes_reserved

    # -- the tests ----------------------------------------------------------------------------

    def test_simple(self):
        """Mirrors test_graph_simple: one capture, replayed with new inputs."""
        x = torch.zeros(N, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x * 2 + 1
        self.assert_from_pool(g.pool(), y)
        for _ in range(3):
            x.copy_(randn(N))
            g.replay()
            self.assertTrue(torch.equal(y, x * 2 + 1))

    def test_two_successive(self):
        """Mirrors test_graph_two_successive: the second capture shares the first's pool."""
        before = set(cgc.torch_pool_ids())
        x = randn(N)
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            a = x + 1
            b = a * 2
            del a  # freed in g1's capture: the shared pool may give it to g2
        with torch.cuda.graph(g2, pool=g1.pool()):
            c = b - 3
            d = c * c
        self.assertEqual(g2.pool(), g1.pool())
        self.assertEqual(len(set(cgc.torch_pool_ids()) - before), 1, "one cgc pool for both graphs")
        self.assert_one_pool(g1.pool(), g2.pool())
        self.assert_from_pool(g1.pool(), b, c, d)
        for _ in range(3):
            x.copy_(randn(N))
            g1.replay()  # in capture order, as graphs sharing a pool must replay
            g2.replay()
            c_ref = (x + 1) * 2 - 3
            self.assertTrue(torch.equal(b, (x + 1) * 2))
            self.assertTrue(torch.equal(d, c_ref * c_ref))

    def test_three_successive(self):
        """Mirrors test_graph_three_successive: three capture_begin/capture_end on a side
        stream sharing the first graph's pool, one freeing what another made."""
        before = set(cgc.torch_pool_ids())
        a = randn(N)
        s = torch.cuda.Stream()
        graphs = [torch.cuda.CUDAGraph() for _ in range(3)]
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            graphs[0].capture_begin()
            b = a.clone()
            c = b + 1
            d = b + 2
            graphs[0].capture_end()
            graphs[1].capture_begin(pool=graphs[0].pool())
            e = c + 3
            del c  # made by graphs[0], freed in graphs[1]'s capture: graphs[2] may reuse it
            graphs[1].capture_end()
            graphs[2].capture_begin(pool=graphs[0].pool())
            f = d + 4
            graphs[2].capture_end()
        torch.cuda.current_stream().wait_stream(s)
        self.assertEqual(len(set(cgc.torch_pool_ids()) - before), 1, "one cgc pool for the three graphs")
        self.assert_one_pool(*(g.pool() for g in graphs))
        self.assert_from_pool(graphs[0].pool(), b, d, e, f)
        for _ in range(3):
            a.copy_(randn(N))
            for g in graphs:  # capture order
                g.replay()
            self.assertTrue(torch.equal(e, (a.clone() + 1) + 3))
            self.assertTrue(torch.equal(f, (a.clone() + 2) + 4))

    def test_graph_pool_handle(self):
        """Two captures sharing a pool made by torch.cuda.graph_pool_handle()."""
        handle = torch.cuda.graph_pool_handle()
        self.assertIsNone(cgc.torch_pool(handle), "no capture has used the handle yet")
        x = randn(N)
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1, pool=handle):
            y = x.sin()
        with torch.cuda.graph(g2, pool=handle):
            z = y * 3
        self.assert_one_pool(handle, g1.pool(), g2.pool())
        self.assert_from_pool(handle, y, z)
        for _ in range(3):
            x.copy_(randn(N))
            g1.replay()
            g2.replay()
            self.assertTrue(torch.equal(z, x.sin() * 3))

    def test_memory_of_a_deleted_graph_comes_back(self):
        """Mirrors test_graph_memory_stats_and_use_result_after_destroy_graph (memory): once a
        graph and its outputs are gone, its pool's memory serves the next graph."""
        x = randn(MIB)  # 4 MiB of float32: so is each temporary below

        def body():
            return ((x * 2).sin() + 1).cos()

        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            y1 = body()
        first_id = g1.pool()
        stats = self.assert_from_pool(first_id, y1)
        self.assertGreater(stats.bytes_reserved, SLACK, "the pool must outweigh the slack to tell")
        g1.replay()
        self.assertTrue(torch.equal(y1, body()))
        self.flush()
        after_g1 = self.device_reserved()

        del g1, y1
        gc.collect()
        torch.cuda.synchronize()
        self.assertIsNone(cgc.torch_pool(first_id), "torch released the pool of the deleted graph")
        self.assertNotIn(tuple(first_id), cgc.torch_pool_ids())

        self.flush()
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            y2 = body()
        self.assertNotEqual(g2.pool(), first_id)
        self.assert_from_pool(g2.pool(), y2)
        self.flush()
        after_g2 = self.device_reserved()
        self.assertLessEqual(after_g2, after_g1 + SLACK,
                             "device reserved grew by %d bytes over a second graph of the same work: "
                             "the deleted graph's memory did not come back" % (after_g2 - after_g1))
        x.copy_(randn(x.numel()))
        g2.replay()
        self.assertTrue(torch.equal(y2, body()))

    def test_output_outlives_its_graph(self):
        """Mirrors test_graph_memory_stats_and_use_result_after_destroy_graph (use of the result):
        an output stays valid after its graph is deleted, and frees normally later."""
        x = randn(N)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x.sin() * 3
        self.assert_from_pool(g.pool(), y)
        g.replay()
        expected = x.sin() * 3
        self.assertTrue(torch.equal(y, expected))
        del g
        gc.collect()
        torch.cuda.synchronize()
        # New work, eager and captured, that would land on y's memory had it been given back.
        fillers = [torch.full_like(y, 7.0) for _ in range(4)]
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            z = torch.full_like(y, -1.0) + fillers[0]
        g2.replay()
        self.assertTrue(torch.equal(z, torch.full_like(y, 6.0)))
        self.assertTrue(torch.equal(y, expected))
        torch.cuda.synchronize()
        allocated = self.ctx.memory_stats().bytes_allocated
        del y
        torch.cuda.synchronize()
        self.assertLessEqual(self.ctx.memory_stats().bytes_allocated, allocated - nbytes(expected))

    def test_fork_join_in_capture(self):
        """Work forked to a side stream and joined back inside torch.cuda.graph; what the side
        stream allocates comes from the graph's pool too."""
        x = randn(N)
        side = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x + 1
            side.wait_stream(torch.cuda.current_stream())  # fork
            with torch.cuda.stream(side):
                z = y * 3  # allocated on the side stream
            w = y - 2  # meanwhile on the capture stream
            torch.cuda.current_stream().wait_stream(side)  # join
            out = z * w
        self.assert_from_pool(g.pool(), y, z, w, out)
        for _ in range(3):
            x.copy_(randn(N))
            g.replay()
            y_ref = x + 1
            self.assertTrue(torch.equal(z, y_ref * 3))
            self.assertTrue(torch.equal(out, (y_ref * 3) * (y_ref - 2)))

    def test_record_stream(self):
        """Mirrors test_graph_record_stream: a tensor used on a side stream, record_stream'd and
        freed inside the capture is not handed to an allocation made before the join."""
        x = randn(MIB)  # 4 MiB: enough work for a wrong reuse to race
        side = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            t = x * 2
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                u = t.sin() + 1
            t.record_stream(side)
            del t  # the side stream still reads it until the join
            v = x * 5  # must not take t's memory
            torch.cuda.current_stream().wait_stream(side)
            out = u + v
        self.assert_from_pool(g.pool(), u, v, out)
        for _ in range(3):
            x.copy_(randn(x.numel()))
            g.replay()
            u_ref = (x * 2).sin() + 1
            v_ref = x * 5
            self.assertTrue(torch.equal(u, u_ref))
            self.assertTrue(torch.equal(v, v_ref))
            self.assertTrue(torch.equal(out, u_ref + v_ref))

    def test_rng_functional(self):
        """Mirrors test_graph_rng_functional: dropout and torch.rand replay fresh numbers each
        time, the very numbers eager PyTorch draws from the same seed."""
        x = torch.ones(N, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dropped = torch.nn.functional.dropout(x, 0.5)
            noise = torch.rand(N, device="cuda")
        self.assert_from_pool(g.pool(), dropped, noise)
        for seed in (5, 7):
            torch.manual_seed(seed)
            replays = []
            for _ in range(2):
                g.replay()
                replays.append((dropped.clone(), noise.clone()))
            torch.manual_seed(seed)
            for step, (got_dropped, got_noise) in enumerate(replays):
                eager_dropped = torch.nn.functional.dropout(x, 0.5)
                eager_noise = torch.rand(N, device="cuda")
                self.assertTrue(torch.equal(got_dropped, eager_dropped), "seed %d, replay %d" % (seed, step))
                self.assertTrue(torch.equal(got_noise, eager_noise), "seed %d, replay %d" % (seed, step))
            (d0, n0), (d1, n1) = replays
            self.assertFalse(torch.equal(d0, d1), "each replay drops other elements")
            self.assertFalse(torch.equal(n0, n1), "each replay draws new numbers")
            kept = (d0 != 0).float().mean().item()
            self.assertTrue(0.4 < kept < 0.6, "dropout(0.5) kept %.3f" % kept)

    def test_make_graphed_callables(self):
        """Mirrors test_graph_make_graphed_callables: an MLP's forward and backward as graphs,
        compared with an eager copy of the same parameters."""
        model = make_mlp()
        eager = copy.deepcopy(model)
        before = set(cgc.torch_pool_ids())
        sample = randn(8, 32).requires_grad_()
        graphed = torch.cuda.make_graphed_callables(model, (sample,))
        new_ids = set(cgc.torch_pool_ids()) - before
        self.assertEqual(len(new_ids), 1, "forward and backward graphs share one new pool: %r" % (new_ids,))
        self.assert_from_pool(new_ids.pop())
        tight = dict(rtol=1e-5, atol=1e-6)
        for _ in range(3):
            x = randn(8, 32).requires_grad_()
            x_ref = x.detach().clone().requires_grad_()
            grad_out = randn(8, 16)
            out = graphed(x)
            got = out.detach().clone()
            out.backward(grad_out)
            ref = eager(x_ref)
            ref.backward(grad_out)
            torch.testing.assert_close(got, ref.detach(), **tight)
            torch.testing.assert_close(x.grad, x_ref.grad, **tight)
            for (name, p), q in zip(graphed.named_parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: "%s.grad: %s" % (name, m),
                                           **tight)
                p.grad, q.grad = None, None

    def test_allocation_heavy_capture(self):
        """Twenty steps of temporaries of varied sizes captured; replays equal eager exactly and
        the pool reuses memory (its peak is below the bytes the steps allocate)."""
        rows, cols = 256, 32
        x, w = small_ints(rows, cols), small_ints(cols, cols)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up (cuBLAS's workspace for s) and the eager result
            first_ref = churn(x, w)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            out = churn(x, w)
        g.replay()
        self.assertTrue(torch.equal(out, first_ref))
        stats = self.assert_from_pool(g.pool(), out)
        fresh = churn_fresh_bytes(rows, cols)
        self.assertLess(stats.peak_bytes_allocated, fresh, "pool peak %d bytes, the steps allocate at "
                        "least %d: no reuse" % (stats.peak_bytes_allocated, fresh))
        for _ in range(3):
            x.copy_(small_ints(rows, cols))
            g.replay()
            self.assertTrue(torch.equal(out, churn(x, w)))

    def test_cgc_graph_shares_a_torch_pool(self):
        """cgc.graph takes a torch pool id: its capture and torch.cuda.graph's share one cgc pool."""
        x = randn(N)
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            y = x.cos() + 1
        pool_id = tg.pool()
        allocated = self.assert_from_pool(pool_id, y).bytes_allocated
        cg = cgc.Graph()
        with cgc.graph(cg, pool=pool_id):  # on a capture stream of torch's, as torch.cuda.graph does
            z = y * 2
        try:
            with cg.pool() as mine, self.open_pool(pool_id) as theirs:
                self.assertEqual(mine, theirs)
            self.assertGreaterEqual(self.pool_stats(pool_id).bytes_allocated, allocated + nbytes(z))
            for _ in range(3):
                x.copy_(randn(N))
                tg.replay()  # capture order
                cg.replay()
                self.assertTrue(torch.equal(z, (x.cos() + 1) * 2))
            # Torch lets go of the pool; the cgc graph still holds it and replays.
            del tg
            gc.collect()
            y.copy_(randn(N))
            cg.replay()
            self.assertTrue(torch.equal(z, y * 2))
        finally:
            cg.close()

    def test_rng_refused_in_cgc_graph(self):
        """Like test_graph_error (a failing capture leaves nothing capturing): on the pluggable
        allocator, torch.rand inside cgc.graph raises CaptureUnsupportedError naming the ways out
        (cgc's native allocator enrols torch's generators instead: test_torch_backend.py)."""
        if _allocator_kind != ["pluggable"]:
            self.skipTest("cgc's native allocator enrols torch's generators in cgc.graph (test_torch_backend.py "
                          "tests that); the refusal is the pluggable allocator's (CGC_TORCH_BACKEND=pluggable)")
        s = torch.cuda.Stream()
        g = cgc.Graph()
        with self.assertRaises(cgc.CaptureUnsupportedError) as raised:
            with cgc.graph(g, stream=s):
                torch.rand(N, device="cuda")
        g.close()
        self.assertIsInstance(raised.exception, cgc.Error)
        message = str(raised.exception)
        self.assertIn("torch.cuda.graph", message)
        self.assertIn("cgc.Rng", message)
        self.assertFalse(torch.cuda.is_current_stream_capturing())
        with torch.cuda.stream(s):
            self.assertFalse(torch.cuda.is_current_stream_capturing())
        with cgc.Stream.from_torch(s) as stream:
            self.assertFalse(stream.is_capturing())

        # Captures work as before: cgc.graph on the same stream, and torch.cuda.graph drawing
        # random numbers (torch's generator is unharmed).
        x = randn(N)
        g2 = cgc.Graph()
        with cgc.graph(g2, stream=s):
            y = x * 2
        try:
            g2.replay()
            self.assertTrue(torch.equal(y, x * 2))
        finally:
            g2.close()
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            noise = torch.rand(N, device="cuda")
        torch.manual_seed(3)
        tg.replay()
        got = noise.clone()
        torch.manual_seed(3)
        self.assertTrue(torch.equal(got, torch.rand(N, device="cuda")))

    def test_failed_capture_holds_nothing_back(self):
        """A torch capture that fails after its first allocation (PyTorch then calls neither
        endAllocateToPool nor releasePool): the cache can be emptied, the thread's next capture
        works, and its routing is ended with it (docs/TORCH.md)."""
        x = randn(N)
        bridge = cgc._torch_bridge
        current = torch.cuda.current_stream()
        pools_before = set(cgc.torch_pool_ids())
        g = torch.cuda.CUDAGraph()
        with self.assertRaises(RuntimeError):  # a device synchronisation invalidates the capture
            with torch.cuda.graph(g):
                y = x * 2
                torch.cuda.synchronize()
        del y
        torch.cuda.set_stream(current)  # torch.cuda.graph leaves its stream current when its end fails
        self.assertFalse(torch.cuda.is_current_stream_capturing())
        self.assertEqual(bridge.cgc_torch_bridge_open_routes(), 1, "the failed capture's route is still open")
        torch.cuda.empty_cache()  # not held back by the adopted capture, which is over
        self.ctx.empty_cache()
        self.assertEqual(bridge.cgc_torch_bridge_open_routes(), 0, "empty_cache ended the failed capture's route")
        self.assertEqual(set(cgc.torch_pool_ids()), pools_before,
                         "the failed capture's use of its pool was dropped (PyTorch never releases it)")
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            z = x + 1
        g2.replay()
        self.assertTrue(torch.equal(z, x + 1))
        self.assertEqual(bridge.cgc_torch_bridge_open_routes(), 0)
        with self.open_pool(g2.pool()) as pool:
            self.assertGreaterEqual(pool.memory_stats().bytes_allocated, nbytes(z))
        del g, g2

    def test_two_captures_of_one_thread_at_once(self):
        """One thread captures into two pools at once, on two streams (PyTorch's allocator allows
        captures into different pools together; Relaxed mode, as the first capture's end would
        break the second in Global mode): the second begin leaves the first capture's route,
        which has claimed its capture and still runs, open."""
        x = randn(N)
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        s1.wait_stream(torch.cuda.current_stream())
        s2.wait_stream(torch.cuda.current_stream())
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        open_on = []
        try:
            with torch.cuda.stream(s1):
                g1.capture_begin(capture_error_mode="relaxed")
                open_on.append((g1, s1))
                y1 = x * 2  # claims the first route
            with torch.cuda.stream(s2):
                g2.capture_begin(capture_error_mode="relaxed")
                open_on.append((g2, s2))
                y2 = x + 1
            with torch.cuda.stream(s1):
                z1 = y1 * 3  # the first capture allocates again after the second began
                open_on.remove((g1, s1))
                g1.capture_end()
            with torch.cuda.stream(s2):
                open_on.remove((g2, s2))
                g2.capture_end()
        finally:
            for g, s in open_on:  # a failure above must not leave a capture open for later tests
                with torch.cuda.stream(s):
                    try:
                        g.capture_end()
                    except RuntimeError:
                        pass
        torch.cuda.current_stream().wait_stream(s1)
        torch.cuda.current_stream().wait_stream(s2)
        self.assert_from_pool(g1.pool(), y1, z1)
        self.assert_from_pool(g2.pool(), y2)
        x.copy_(randn(N))
        g1.replay()
        g2.replay()
        self.assertTrue(torch.equal(z1, x * 2 * 3))
        self.assertTrue(torch.equal(y2, x + 1))
        self.assertEqual(cgc._torch_bridge.cgc_torch_bridge_open_routes(), 0)
        del g1, g2

if __name__ == "__main__":
    unittest.main()
