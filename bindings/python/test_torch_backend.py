"""cgc's complete PyTorch allocator (bindings/torch_bridge/backend.cc), through cgc.py: built on
first use against the running PyTorch's headers and installed as PyTorch's current allocator by
cgc.use_as_torch_allocator(backend="native"). Each test checks one behaviour PyTorch's own
allocator has and PyTorch's pluggable allocator refuses: memory statistics and their peaks, the
out-of-memory error type and its count, the memory fraction, torch.cuda.MemPool scopes on cgc
pools, the pool checks of torch.compile's CUDA-graph trees, and torch.compile's reduce-overhead
mode itself.

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -W error -m unittest -v test_torch_backend
Skips (with the reason) without PyTorch or a GPU; FAILS where the backend cannot be built (no
C++ compiler or PyTorch headers), saying why.
"""

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

MIB = 1 << 20
_install_error = []
_first_snapshot = []


def setUpModule():
    if SKIP:
        raise unittest.SkipTest(SKIP)
    try:
        cgc.use_as_torch_allocator(backend="native")
    except cgc.Error as e:
        _install_error.append(str(e))
        return
    # A snapshot before any statistics call lists the device's segments too (it once listed
    # only devices whose statistics had been asked).
    first = torch.empty(1000, dtype=torch.uint8, device="cuda")
    _first_snapshot.extend(torch.cuda.memory_snapshot())
    del first
    warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")


def rounded(nbytes):
    return (nbytes + 511) // 512 * 512


class BackendTest(unittest.TestCase):
    def setUp(self):
        if _install_error:
            self.fail("the backend was not installed: %s" % _install_error[0])
        torch.cuda.synchronize()

    def test_it_is_pytorchs_allocator(self):
        self.assertEqual(cgc.use_as_torch_allocator(), "native")  # installed: a second call says which
        self.assertTrue(cgc.torch_graph_pools())
        x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        with cgc.Context(0) as ctx:
            self.assertGreaterEqual(ctx.memory_stats().bytes_allocated, MIB)  # cgc's memory
        del x

    def test_allocated_bytes_and_their_peak_follow_each_tensor(self):
        before = torch.cuda.memory_allocated()
        x = torch.empty(1000, dtype=torch.uint8, device="cuda")  # 1000 bytes: one 1024-byte block
        self.assertEqual(torch.cuda.memory_allocated(), before + rounded(1000))
        stats = torch.cuda.memory_stats()
        self.assertGreaterEqual(stats["allocation.all.current"], 1)
        self.assertGreaterEqual(stats["requested_bytes.all.current"], 1000)
        big = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")  # a large-pool request
        large = torch.cuda.memory_stats()["allocated_bytes.large_pool.current"]
        self.assertGreaterEqual(large, 3 * MIB)
        del big
        self.assertEqual(torch.cuda.memory_stats()["allocated_bytes.large_pool.current"], large - 3 * MIB)
        peak = torch.cuda.max_memory_allocated()
        self.assertGreaterEqual(peak, before + rounded(1000) + 3 * MIB)
        torch.cuda.reset_peak_memory_stats()
        self.assertEqual(torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
        del x
        self.assertEqual(torch.cuda.memory_allocated(), before)

    def test_reserved_bytes_are_cgcs(self):
        x = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")
        with cgc.Context(0) as ctx:
            reserved = ctx.memory_stats().bytes_reserved
        self.assertEqual(torch.cuda.memory_reserved(), reserved)
        self.assertGreaterEqual(torch.cuda.max_memory_reserved(), reserved)
        self.assertGreaterEqual(torch.cuda.memory_stats()["segment.all.current"], 1)
        del x

    def test_snapshot_lists_cgcs_segments_with_their_pools(self):
        small = torch.empty(1000, dtype=torch.uint8, device="cuda")
        large = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            pooled = torch.empty(4096, dtype=torch.uint8, device="cuda")
        self.assertGreaterEqual(len(_first_snapshot), 1, "the process's first snapshot listed no segment")
        segments = torch.cuda.memory_snapshot()
        self.assertEqual(sum(s["total_size"] for s in segments), torch.cuda.memory_reserved())

        def block_of(t):
            for s in segments:
                addr = s["address"]
                for b in s["blocks"]:
                    if addr == t.data_ptr():
                        return s, b
                    addr += b["size"]
            return None, None

        seg, block = block_of(small)
        self.assertIsNotNone(block)
        self.assertEqual(block["state"], "active_allocated")
        self.assertEqual(block["size"], 1024)
        self.assertEqual(seg["segment_type"], "small")
        seg, block = block_of(large)
        self.assertEqual(seg["segment_type"], "large")
        self.assertEqual(seg["total_size"], 20 * MIB)  # PyTorch's segment for a request below 10 MiB
        seg, block = block_of(pooled)
        self.assertEqual(tuple(seg["segment_pool_id"]), tuple(pool.id))
        only_pool = torch.cuda.memory_snapshot(pool.id) if "mempool_id" in \
            torch.cuda.memory_snapshot.__code__.co_varnames else None
        if only_pool is not None:
            self.assertTrue(all(tuple(s["segment_pool_id"]) == tuple(pool.id) for s in only_pool))
        stats = torch.cuda.memory_stats()
        self.assertEqual(stats["reserved_bytes.small_pool.current"] + stats["reserved_bytes.large_pool.current"],
                         stats["reserved_bytes.all.current"])
        self.assertGreaterEqual(stats["segment.large_pool.current"], 1)
        del small, large, pooled

    def test_out_of_memory_is_pytorchs_error_and_is_counted(self):
        ooms = torch.cuda.memory_stats().get("num_ooms", 0)
        total = torch.cuda.get_device_properties(0).total_memory
        with self.assertRaises(torch.cuda.OutOfMemoryError) as raised:
            torch.empty(4 * total, dtype=torch.uint8, device="cuda")
        self.assertIn("cgc", str(raised.exception))
        self.assertEqual(torch.cuda.memory_stats()["num_ooms"], ooms + 1)
        torch.empty(MIB, device="cuda")  # still usable

    def test_memory_fraction_limits_what_pytorch_gets(self):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(0.5)
        try:
            with self.assertRaises(torch.cuda.OutOfMemoryError):
                torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda")
            torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")  # within the fraction
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)

    def test_mem_pool_scopes_allocate_from_a_cgc_pool(self):
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            inside = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
        outside = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
        with cgc.Context(0) as ctx, cgc.torch_pool(pool.id) as cgc_pool:
            self.assertEqual(cgc_pool.memory_stats(ctx).bytes_allocated, 4 * MIB)
        inside.fill_(1)
        outside.fill_(2)
        self.assertEqual(int(inside.sum().item()), 4 * MIB)
        del inside, outside

    def test_a_mem_pool_scope_outlives_a_capture_begun_inside_it(self):
        pool = torch.cuda.MemPool()
        side = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.use_mem_pool(pool):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                x = torch.zeros(1 << 16, device="cuda")
                with torch.cuda.graph(g, stream=side):
                    y = x + 1  # the graph's own pool: a scope never claims a capture
            torch.cuda.current_stream().wait_stream(side)
            after = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")  # still the scope's
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(y, x + 1))

        def pool_of(t):
            for s in torch.cuda.memory_snapshot():
                if s["address"] <= t.data_ptr() < s["address"] + s["total_size"]:
                    return tuple(s["segment_pool_id"])
            return None

        self.assertEqual(pool_of(x), tuple(pool.id))
        self.assertEqual(pool_of(after), tuple(pool.id))
        self.assertEqual(pool_of(y), tuple(g.pool()))
        del x, y, after, g

    def test_out_of_memory_allocations_use_a_use_on_oom_pool(self):
        pool = torch.cuda.MemPool(use_on_oom=True)
        with torch.cuda.use_mem_pool(pool):
            cached = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
        del cached  # the pool keeps its memory while the MemPool lives

        def pool_bytes_allocated():
            with cgc.Context(0) as ctx, cgc.torch_pool(pool.id) as cgc_pool:
                return cgc_pool.memory_stats(ctx).bytes_allocated

        self.assertEqual(pool_bytes_allocated(), 0)
        hog = []
        try:
            # The device filled: what it cannot serve any more, the pool's free 256 MiB serve.
            for chunk in (1 << 30, 64 * MIB, 2 * MIB):
                while True:
                    try:
                        hog.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
                    except torch.cuda.OutOfMemoryError:
                        break
            self.assertEqual(pool_bytes_allocated(), 256 * MIB)
        finally:
            del hog
            torch.cuda.empty_cache()
        self.assertEqual(pool_bytes_allocated(), 0)

    def test_pool_live_allocations_are_the_graphs_outputs(self):
        static_in = torch.randn(1 << 16, device="cuda")
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            static_in * 2  # warm-up outside the capture
            torch.cuda.current_stream().synchronize()
            with torch.cuda.graph(g, stream=side):
                hidden = static_in * 2
                out_a = hidden + 1
                out_b = hidden.relu()
                del hidden
        torch.cuda.current_stream().wait_stream(side)
        device = torch.cuda.current_device()
        live = {out_a.untyped_storage().data_ptr(), out_b.untyped_storage().data_ptr()}
        self.assertTrue(torch._C._cuda_checkPoolLiveAllocations(device, g.pool(), live))
        self.assertFalse(torch._C._cuda_checkPoolLiveAllocations(device, g.pool(), {out_a.data_ptr()}))
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out_a, static_in * 2 + 1))
        del out_a, out_b, g

    def test_compile_reduce_overhead_matches_eager(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
        compiled = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(32, 256, device="cuda")
        with torch.no_grad():
            expected = model(x)
            for _ in range(4):  # warm-up, record, then replays
                got = compiled(x).clone()
        torch.cuda.synchronize()
        self.assertTrue(torch.allclose(got, expected, rtol=1e-4, atol=1e-4),
                        "max difference %g" % (got - expected).abs().max().item())


if __name__ == "__main__":
    unittest.main()
