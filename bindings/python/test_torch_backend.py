"""cgc's complete PyTorch allocator (bindings/torch_bridge/backend.cc), through cgc.py: built on
first use against the running PyTorch's headers and installed as PyTorch's current allocator by
cgc.use_as_torch_allocator(backend="native"). Each test checks one behaviour PyTorch's own
allocator has and PyTorch's pluggable allocator refuses: memory statistics and their peaks, the
out-of-memory error type and its count, the memory fraction, torch.cuda.MemPool scopes on cgc
pools, the pool checks of torch.compile's CUDA-graph trees, and torch.compile's reduce-overhead
mode itself. RandomNumbersTest checks what the backend adds to cgc.graph: PyTorch's generators
enrolled in its captures as torch.cuda.graph enrols them (docs/TORCH.md, "Random numbers").

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -W error -m unittest -v test_torch_backend
Skips (with the reason) without PyTorch or a GPU; FAILS where the backend cannot be built (no
C++ compiler or PyTorch headers), saying why.
"""

import threading
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
N = 1 << 16  # float32 elements of the random-number tests' tensors
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

    def test_a_checkpoint_puts_freed_outputs_back_at_their_addresses(self):
        """What the CUDA-graph trees do when execution leaves a recorded path: a pool's checkpoint
        (its live blocks) is restored after some of them were freed and others allocated; the
        freed ones are allocated again at their addresses and the others freed."""
        device = torch.cuda.current_device()
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            with torch.cuda.graph(g, stream=side):
                out_a = torch.full((1 << 16,), 3.0, device="cuda")
                out_b = out_a * 2
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = g.pool()
        state = torch._C._cuda_getCheckpointState(device, pool)
        a_ptr, a_bytes = out_a.untyped_storage().data_ptr(), out_a.untyped_storage().nbytes()
        b_ptr = out_b.untyped_storage().data_ptr()
        del out_a  # freed since the checkpoint
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2, pool=pool, stream=side):
                extra = torch.ones(1 << 20, device="cuda")  # allocated since (too large for out_a's block)
        torch.cuda.current_stream().wait_stream(side)
        extra_ptr = extra.untyped_storage().data_ptr()
        self.assertNotEqual(extra_ptr, a_ptr)
        self.assertFalse(torch._C._cuda_checkPoolLiveAllocations(device, pool, {a_ptr, b_ptr}))
        # The trees pass the storages of stale tensors (their deleters are taken away) and storages
        # made without deleters over the checkpoint's blocks (given the new blocks' deleters).
        rebuilt = torch._C._construct_storage_from_data_pointer(a_ptr, torch.device("cuda", device), a_bytes)
        torch._C._cuda_setCheckpointPoolState(device, state, [extra.untyped_storage()._cdata],
                                              [rebuilt._cdata])
        self.assertTrue(torch._C._cuda_checkPoolLiveAllocations(device, pool, {a_ptr, b_ptr}))
        self.assertEqual(rebuilt.data_ptr(), a_ptr)
        snapshot = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool)]
        live = {b["address"] for s in snapshot for b in s["blocks"] if b["state"] == "active_allocated"}
        self.assertIn(a_ptr, live)
        self.assertNotIn(extra_ptr, live)
        del rebuilt, extra, out_b, g, g2
        torch.cuda.synchronize()

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


def generator_offset():
    """The philox offset of the current device's default CUDA generator (its state is the seed,
    then the offset, 8 bytes each)."""
    state = torch.cuda.get_rng_state()
    return int.from_bytes(bytes(state[8:16].tolist()), "little")


def rng_body(x):
    """Two random ops of two kinds: dropout (a fused kernel with its mask) and torch.rand."""
    return torch.nn.functional.dropout(x, 0.5), torch.rand(N, device="cuda")


class BodyFailed(Exception):
    pass


class RandomNumbersTest(unittest.TestCase):
    """PyTorch's random numbers inside cgc.graph: the native backend enrols the device's default
    CUDA generator (and registered ones) in the capture as CUDAGraph.capture_begin does, so each
    replay draws fresh numbers, bitwise those of a torch.cuda.graph of the same body from the same
    seed, and advances the generator's offset as torch's replay does."""

    def setUp(self):
        if _install_error:
            self.fail("the backend was not installed: %s" % _install_error[0])
        enrols, takes_registered, why = cgc._torch_rng_supported()
        self.assertTrue(enrols, "the backend does not enrol PyTorch's generators: %s" % why)
        self.takes_registered, self.why = takes_registered, why
        torch.cuda.synchronize()

    def replays(self, graph, outputs, seed, n=2):
        """[the outputs' values after each of n replays from `seed`], and the offset's advance."""
        torch.manual_seed(seed)
        start = generator_offset()
        runs = []
        for _ in range(n):
            graph.replay()
            runs.append(tuple(t.clone() for t in outputs))
        torch.cuda.synchronize()
        return runs, generator_offset() - start

    def assert_runs_equal(self, expected, got, what):
        self.assertEqual(len(expected), len(got))
        for step, (e, g) in enumerate(zip(expected, got)):
            for i, (a, b) in enumerate(zip(e, g)):
                self.assertTrue(torch.equal(a, b), "%s: replay %d, output %d differs" % (what, step, i))

    def test_fresh_numbers_bitwise_those_of_torch_cuda_graph(self):
        x = torch.ones(N, device="cuda")
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            t_out = rng_body(x)
        cg = cgc.Graph()
        try:
            before = generator_offset()
            with cgc.graph(cg):
                c_out = rng_body(x)
            self.assertEqual(generator_offset(), before, "a capture draws nothing eagerly")
            self.assertIsNotNone(cg._rng, "the graph drew from the default generator")
            for seed in (5, 7):
                t_runs, t_advance = self.replays(tg, t_out, seed)
                c_runs, c_advance = self.replays(cg, c_out, seed)
                self.assertGreater(t_advance, 0)
                self.assertEqual(c_advance, t_advance, "each replay advances the offset as torch's does")
                self.assert_runs_equal(t_runs, c_runs, "seed %d" % seed)
                (d0, n0), (d1, n1) = c_runs
                self.assertFalse(torch.equal(d0, d1), "each replay drops other elements")
                self.assertFalse(torch.equal(n0, n1), "each replay draws new numbers")
                kept = (d0 != 0).float().mean().item()
                self.assertTrue(0.4 < kept < 0.6, "dropout(0.5) kept %.3f" % kept)
                torch.manual_seed(seed)  # and eager PyTorch draws the same from that seed
                for step, (d, n) in enumerate(c_runs):
                    self.assertTrue(torch.equal(d, torch.nn.functional.dropout(x, 0.5)), "replay %d" % step)
                    self.assertTrue(torch.equal(n, torch.rand(N, device="cuda")), "replay %d" % step)
        finally:
            cg.close()
        del tg

    def test_each_replay_advances_the_offset_by_the_graphs_draws(self):
        g = cgc.Graph()
        try:
            with cgc.graph(g):
                out = torch.rand(N, device="cuda")
            torch.manual_seed(1)
            torch.rand(N, device="cuda")
            eager_step = generator_offset()  # what one eager draw of the same op advances
            self.assertGreater(eager_step, 0)
            torch.manual_seed(1)
            offsets = [generator_offset()]
            for _ in range(3):
                g.replay()
                offsets.append(generator_offset())
            self.assertEqual([b - a for a, b in zip(offsets, offsets[1:])], [eager_step] * 3)
            del out
        finally:
            g.close()

    def test_a_graph_that_draws_nothing_leaves_the_generator_alone(self):
        x = torch.ones(N, device="cuda")
        g = cgc.Graph()
        try:
            with cgc.graph(g):
                y = x * 2
            self.assertIsNone(g._rng, "no replay prologue for a graph without draws")
            offset = generator_offset()
            g.replay()
            torch.cuda.synchronize()
            self.assertEqual(generator_offset(), offset)
            self.assertTrue(torch.equal(y, x * 2))
        finally:
            g.close()

    def test_replay_on_another_stream_and_launch(self):
        g = cgc.Graph()
        side = torch.cuda.Stream()
        try:
            with cgc.graph(g):
                out = torch.rand(N, device="cuda")
            expected, _ = self.replays(g, (out,), 11, n=2)
            torch.manual_seed(11)
            side.wait_stream(torch.cuda.current_stream())
            got = []
            with torch.cuda.stream(side):
                g.replay()  # replays on torch's current stream, the prologue with it
                got.append((out.clone(),))
                with cgc.Stream.from_torch(side) as stream:
                    g.launch(stream)
                got.append((out.clone(),))
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self.assert_runs_equal(expected, got, "on a side stream")
        finally:
            g.close()

    def test_two_graphs_interleaved_draw_as_torchs(self):
        x = torch.ones(N, device="cuda")
        ta, tb = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(ta):
            ta_out = torch.rand(N, device="cuda")
        with torch.cuda.graph(tb):
            tb_out = torch.nn.functional.dropout(x, 0.5)
        ca, cb = cgc.Graph(), cgc.Graph()
        try:
            with cgc.graph(ca):
                ca_out = torch.rand(N, device="cuda")
            with cgc.graph(cb):
                cb_out = torch.nn.functional.dropout(x, 0.5)

            def run(a, a_out, b, b_out):
                torch.manual_seed(9)
                values = []
                for graph, out in ((a, a_out), (b, b_out), (a, a_out), (b, b_out)):
                    graph.replay()
                    values.append((out.clone(),))
                torch.cuda.synchronize()
                return values, generator_offset()

            t_values, t_offset = run(ta, ta_out, tb, tb_out)
            c_values, c_offset = run(ca, ca_out, cb, cb_out)
            self.assert_runs_equal(t_values, c_values, "interleaved")
            self.assertEqual(c_offset, t_offset)
        finally:
            ca.close()
            cb.close()
        del ta, tb

    def test_replays_from_another_thread(self):
        g = cgc.Graph()
        try:
            with cgc.graph(g):
                out = torch.rand(N, device="cuda")
            expected, _ = self.replays(g, (out,), 4, n=3)
            torch.manual_seed(4)
            got, errors = [], []

            def run():
                try:
                    for _ in range(3):
                        g.replay()
                        got.append((out.clone(),))
                    torch.cuda.current_stream().synchronize()
                except BaseException as e:  # reported by the main thread
                    errors.append(e)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join()
            self.assertEqual(errors, [])
            self.assert_runs_equal(expected, got, "from another thread")
        finally:
            g.close()

    def test_a_failed_capture_leaves_the_generator_out_of_capture_mode(self):
        g = cgc.Graph()
        with self.assertRaises(BodyFailed):
            with cgc.graph(g):
                torch.rand(N, device="cuda")
                raise BodyFailed()
        self.assertIsNone(g._rng)
        with self.assertRaises(cgc.InvalidStateError):
            g.replay()  # nothing was kept
        # PyTorch raises for an eager draw while the generator is in capture mode.
        torch.rand(N, device="cuda")
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            noise = torch.rand(N, device="cuda")
        torch.manual_seed(3)
        tg.replay()
        got = noise.clone()
        torch.manual_seed(3)
        self.assertTrue(torch.equal(got, torch.rand(N, device="cuda")))
        with cgc.graph(g):  # and the same Graph captures again
            out = torch.rand(N, device="cuda")
        runs, _ = self.replays(g, (out,), 3, n=1)
        self.assertTrue(torch.equal(runs[0][0], got))
        g.close()

    def test_an_update_recapture_draws_its_own_numbers(self):
        g = cgc.Graph()
        try:
            with cgc.graph(g):
                first = torch.rand(N, device="cuda")
            old_rng = g._rng
            with cgc.graph(g, update=True):
                second = torch.rand(N, device="cuda") * 2
            self.assertIsNot(g._rng, old_rng, "the recapture has its own enrolment")
            runs, _ = self.replays(g, (second,), 6, n=2)
            torch.manual_seed(6)
            expected = [(torch.rand(N, device="cuda") * 2,) for _ in range(2)]
            self.assert_runs_equal(expected, runs, "after the update")
            del first
        finally:
            g.close()

    def test_capture_under_inference_mode_replays_outside_it(self):
        g = cgc.Graph()
        try:
            with torch.inference_mode():
                with cgc.graph(g):
                    out = torch.rand(N, device="cuda")
            runs, _ = self.replays(g, (out,), 8, n=2)
            torch.manual_seed(8)
            expected = [(torch.rand(N, device="cuda"),) for _ in range(2)]
            self.assert_runs_equal(expected, runs, "inference mode")
        finally:
            g.close()

    def test_a_registered_generator_takes_part(self):
        self.assertTrue(self.takes_registered, "registered generators are not taken: %s" % self.why)
        mine, theirs = torch.Generator(device="cuda"), torch.Generator(device="cuda")
        g = cgc.Graph()
        g.register_generator_state(mine)
        tg = torch.cuda.CUDAGraph()
        tg.register_generator_state(theirs)
        try:
            with cgc.graph(g):
                out = torch.rand(N, device="cuda", generator=mine)
            with torch.cuda.graph(tg):
                t_out = torch.rand(N, device="cuda", generator=theirs)
            default_offset = generator_offset()
            runs = []
            for graph, generator, o in ((g, mine, out), (tg, theirs, t_out)):
                generator.manual_seed(3)
                values = []
                for _ in range(2):
                    graph.replay()
                    values.append((o.clone(),))
                runs.append(values)
            torch.cuda.synchronize()
            self.assert_runs_equal(runs[1], runs[0], "a registered generator")
            self.assertFalse(torch.equal(runs[0][0][0], runs[0][1][0]), "each replay draws new numbers")
            self.assertEqual(generator_offset(), default_offset, "the default generator was not drawn from")
            mine.manual_seed(3)
            self.assertTrue(torch.equal(runs[0][0][0], torch.rand(N, device="cuda", generator=mine)))
        finally:
            g.close()
        del tg

    def test_a_graph_that_draws_cannot_be_launched_into_a_capture(self):
        g, outer = cgc.Graph(), cgc.Graph()
        try:
            with cgc.graph(g):
                torch.rand(N, device="cuda")
            offset = generator_offset()
            with self.assertRaises(cgc.CaptureUnsupportedError) as raised:
                with cgc.graph(outer):
                    g.replay()  # on the outer capture's stream
            self.assertIn("cannot be launched into a capture", str(raised.exception))
            self.assertEqual(generator_offset(), offset)
            torch.rand(N, device="cuda")  # the outer capture's window was ended
        finally:
            g.close()
            outer.close()

    def test_registration_checks(self):
        g = cgc.Graph()
        with self.assertRaises(cgc.InvalidArgumentError):
            g.register_generator_state(torch.Generator())  # a CPU generator
        g.register_generator_state(torch.Generator(device="cuda"))
        with cgc.Context(0) as ctx, cgc.Stream(ctx) as stream:
            with self.assertRaises(cgc.InvalidArgumentError):  # torch's ops are not captured on a cgc stream
                with cgc.graph(g, stream=stream):
                    pass
        g.close()

    def test_an_unregistered_generator_is_refused_saying_how(self):
        stranger = torch.Generator(device="cuda")
        g = cgc.Graph()
        with self.assertRaises(cgc.CaptureUnsupportedError) as raised:
            with cgc.graph(g):
                torch.rand(N, device="cuda", generator=stranger)
        g.close()
        self.assertIn("register_generator_state", str(raised.exception))
        torch.rand(N, device="cuda", generator=stranger)  # both generators work eagerly again
        torch.rand(N, device="cuda")
        self.assertFalse(torch.cuda.is_current_stream_capturing())


if __name__ == "__main__":
    unittest.main()
