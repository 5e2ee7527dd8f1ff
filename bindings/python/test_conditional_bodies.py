"""Tests of 1.3's conditional nodes in cgc.py: Stream.conditional_bodies (IF/ELSE, SWITCH, a
WHILE whose body sets its own condition), and the allocations and generator draws that bodies may
hold since 1.3. CI tests (no GPU needed) and GPU tests (skipped with the reason without one).

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -m unittest -v test_conditional_bodies
The GPU tests load the bindings' shared test kernels, tests/kernels/binding_tests.ptx, and
examples/kernels/loop_continue.ptx, found from this folder or the GPU bundle's tools/, or at
$CGC_BINDING_TESTS_PTX and $CGC_LOOP_CONTINUE_PTX.
"""

import ctypes
import os
import unittest

import cgc
from test_cgc import FOREIGN, ExpectMixin, binding_tests_ptx, foreign, forget, kernel_path, require_gpu

BEGIN_BODIES = "cgc_capture_conditional_begin_bodies"


class FakeBody(object):
    """Stands for a lent body in the tests of the ending order: records its end, may fail it."""

    def __init__(self, name, ends, error=None):
        self.name, self.ends, self.error = name, ends, error

    def _end(self):
        self.ends.append(self.name)
        if self.error is not None:
            raise self.error


class ConditionalBodiesBadCallTest(ExpectMixin, unittest.TestCase):
    """Without a GPU: what the library checks before it touches the driver (the bodies array,
    then the stream handle; kind, count and flags come after a live stream, in the GPU tests),
    what the binding refuses itself, and how the bodies are ended."""

    def test_null_and_foreign_arguments_are_refused_by_name(self):
        lib, h = cgc.api(), ctypes.c_uint64(7)

        def begin(stream, bodies, n_bodies=2, kind=cgc.ConditionalKind.IF, handle=ctypes.byref(h)):
            return lambda: lib.cgc_capture_conditional_begin_bodies(stream, kind, FOREIGN, 0, n_bodies, bodies, handle)

        # The bodies array is checked first, even before the stream.
        self.expect(cgc.Status.INVALID_ARGUMENT, BEGIN_BODIES, begin(FOREIGN, None), "bodies is NULL")
        self.expect(cgc.Status.INVALID_ARGUMENT, BEGIN_BODIES, begin(None, None), "bodies is NULL")
        for stream, status, words in ((None, cgc.Status.INVALID_ARGUMENT, "NULL"),
                                      (FOREIGN, cgc.Status.INVALID_HANDLE, "not a live cgc stream handle")):
            # Outputs are cleared on failure: the n_bodies first bodies and the handle, nothing past them.
            bodies, h.value = (ctypes.c_void_p * 3)(FOREIGN, FOREIGN, FOREIGN), 7
            self.expect(status, BEGIN_BODIES, begin(stream, bodies), words)
            self.assertEqual([bodies[0], bodies[1], bodies[2]], [None, None, FOREIGN])
            self.assertEqual(h.value, 0, "the handle is cleared on failure")
        # The handle may be NULL; the stream is checked before the kind, count and flags.
        self.expect(cgc.Status.INVALID_HANDLE, BEGIN_BODIES, begin(FOREIGN, (ctypes.c_void_p * 1)(), handle=None),
                    "stream")
        self.expect(cgc.Status.INVALID_HANDLE, BEGIN_BODIES, begin(FOREIGN, (ctypes.c_void_p * 1)(), 0, kind=7),
                    "stream")

    def test_the_1_3_function_follows_1_2s(self):
        self.assertEqual([p[0] for p in cgc._PROTOTYPES[63 + 29 + 4:63 + 29 + 4 + 1]], [BEGIN_BODIES])
        self.assertGreaterEqual(cgc.VERSION_MINOR, 3)
        self.assertGreaterEqual(cgc.version()[:2], (1, 3))

    def test_constants_are_the_header_ones(self):
        self.assertEqual(cgc.ConditionalKind.SWITCH, 2)
        self.assertEqual(cgc.CONDITIONAL_BODY_SETS_CONDITION, 1)
        self.assertEqual(cgc.LOOP_EAGER_ITERATIONS, 65536)
        self.assertEqual(cgc.ConditionalNode._fields, ("bodies", "handle"))

    def test_the_binding_checks_what_ctypes_would_cut_and_passes_the_rest_on(self):
        stream = foreign(cgc.Stream)
        ran = []

        def enter(*args, **kwargs):
            with stream.conditional_bodies(*args, **kwargs) as node:
                ran.append(node)

        err = cgc.InvalidArgumentError
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("until", FOREIGN), "'until' is not one of if, while, switch")
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("switch", FOREIGN, -1), "n_bodies")
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("switch", FOREIGN, 1.5), "n_bodies", "integer")
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("switch", FOREIGN, 257), "n_bodies is 257", "256")
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("while", FOREIGN, flags=-1), "flags")
        self.expect_raise(err, BEGIN_BODIES, lambda: enter("while", FOREIGN, flags=1 << 32), "flags")
        # What passes reaches the library, which refuses the foreign stream first. 0 bodies still
        # gets an array (the library says why 0 is wrong once it has a live stream, not "NULL").
        for args in (("switch", FOREIGN, 256), (cgc.ConditionalKind.IF, FOREIGN, 2), (7, FOREIGN), ("if", None, 0),
                     ("while", FOREIGN, 1, cgc.CONDITIONAL_BODY_SETS_CONDITION)):
            self.expect_raise(cgc.InvalidHandleError, BEGIN_BODIES, lambda: enter(*args), "stream")
        self.assertEqual(ran, [], "the block ran without bodies")
        forget(stream)
        self.expect_raise(cgc.InvalidHandleError, "Stream", lambda: enter("if", FOREIGN), "closed")

    def test_every_body_is_ended_once_the_last_first(self):
        ends = []
        bodies = tuple(FakeBody(i, ends) for i in range(3))
        with cgc._ending_bodies(bodies) as lent:
            self.assertIs(lent, bodies)
            self.assertEqual(ends, [])
        self.assertEqual(ends, [2, 1, 0])

    def test_a_failed_end_ends_the_others_and_is_raised_after(self):
        ends = []
        first = cgc.Error(cgc.Status.CUDA, "body 2 failed")
        bodies = (FakeBody(0, ends), FakeBody(1, ends, cgc.Error(cgc.Status.INTERNAL, "body 1 failed")),
                  FakeBody(2, ends, first))
        with self.assertRaises(cgc.CudaError) as cm:
            with cgc._ending_bodies(bodies):
                pass
        self.assertIs(cm.exception, first, "the first failure (the last body's) is the one raised")
        self.assertEqual(ends, [2, 1, 0])

    def test_the_blocks_exception_wins_over_failed_ends(self):
        ends = []
        bodies = (FakeBody(0, ends, cgc.Error(cgc.Status.CUDA, "hidden")), FakeBody(1, ends))
        with self.assertRaises(ZeroDivisionError):
            with cgc._ending_bodies(bodies):
                1 / 0
        self.assertEqual(ends, [1, 0])

    def test_a_body_refused_for_an_open_inner_body_stays_lent(self):
        # The library refuses to end a body while a body begun inside it is open
        # (InvalidStateError) and keeps it lent; every other end frees the handle. Here the
        # library's answer is made up: its real one needs a capture (the GPU test has it).
        lib = cgc.api()
        real_end, ended = lib.cgc_capture_conditional_end, []

        def refuse(handle):
            ended.append(handle)
            return int(cgc.Status.INVALID_STATE)

        parent = foreign(cgc.Stream)
        body = cgc._BodyStream._lend(FOREIGN, parent)
        lib.cgc_capture_conditional_end = refuse
        try:
            with self.assertRaises(cgc.InvalidStateError):
                body._end()
        finally:
            lib.cgc_capture_conditional_end = real_end
        self.assertEqual(ended, [FOREIGN])
        self.assertFalse(body.closed, "still lent: it can be ended once the inner body is")
        self.assertRaises(cgc.InvalidStateError, body.close)
        self.expect_raise(cgc.InvalidHandleError, "cgc_capture_conditional_end", body._end, "stream")
        self.assertTrue(body.closed)
        forget(parent)


def loop_continue_ptx():
    """The examples' loop step that sets its WHILE node's condition itself (loop_continue.cu):
    loop_continue(u64 handle, unsigned* counter, const unsigned* n) counts, then sets the
    condition to counter < *n."""
    return kernel_path(os.path.join("examples", "kernels"), "loop_continue.ptx", "CGC_LOOP_CONTINUE_PTX")


class GpuConditionalBodiesTest(ExpectMixin, unittest.TestCase):
    """1.3's conditional nodes on a GPU, with the shared conditional kernels of
    tests/kernels/binding_tests.ptx (cond_init, cond_step, cond_count over a counter, a bound n
    and a condition), replayed with per-replay conditions copied in from page-locked memory.
    Skipped with a driver older than CUDA 12.4; the IF/ELSE and SWITCH tests with one older than
    12.8."""

    def setUp(self):
        require_gpu(self)
        self.ctx = cgc.Context(0)
        self.addCleanup(self.ctx.close)
        self.stream = cgc.Stream(self.ctx)
        self.addCleanup(self.stream.close)
        self.module = cgc.Module.from_file(self.ctx, binding_tests_ptx())
        self.addCleanup(self.module.close)
        self.init, self.step, self.count = (self.module.function(n) for n in ("cond_init", "cond_step", "cond_count"))
        # Words: 0 counter, 1 n, 2 more (the condition), 3 odd (a second one), 4 hits.
        self.words = cgc.malloc(self.ctx, 64, self.stream)
        self.addCleanup(cgc.free, self.words)
        self.stream.memset_d32(self.words, 0, 16)
        self.counter, self.n, self.more, self.odd, self.hits = (self.words + 4 * i for i in range(5))
        self.host = cgc.HostBuffer(self.ctx, 4)  # page-locked: the per-replay value, copied in by the graph
        self.addCleanup(self.host.close)
        self.value = self.host.as_array(ctypes.c_uint32)
        self.graph = cgc.Graph()
        self.addCleanup(self.graph.close)  # where tearDown does not run: a skip in setUp
        self.require_driver("while", 1, "conditional nodes need a driver for CUDA 12.4")

    def tearDown(self):
        # Before the cleanups, which close what the tests made (generators, memory the graph
        # uses): a failed test's capture ends, the last replay finishes and the graph goes first.
        if self.stream.is_capturing():
            try:
                self.graph.capture_end()
            except cgc.Error:
                pass
        self.stream.synchronize()
        self.graph.close()

    def require_driver(self, kind, n_bodies, reason):
        """Skips the test where the driver cannot make this kind of node: begin says
        NotSupportedError then, after its arguments and before whether the stream captures."""
        try:
            with self.stream.conditional_bodies(kind, self.more, n_bodies):
                self.fail("bodies began outside a capture")
        except cgc.NotSupportedError as e:
            self.skipTest("%s: %s" % (reason, e.message))
        except cgc.InvalidStateError as e:
            self.assertIn("not capturing", e.message)

    def require_cuda_12_8(self):
        self.require_driver("switch", 1, "IF/ELSE and SWITCH nodes need a driver for CUDA 12.8")

    def args(self, *addresses):
        return [ctypes.c_void_p(a) for a in addresses]

    def words_now(self):
        out = (ctypes.c_uint32 * 16)()
        self.stream.synchronize()
        self.stream.memcpy_dtoh(out, self.words)
        self.stream.synchronize()
        return list(out)

    def replay_with(self, value):
        """Replays the graph with `value` as this replay's page-locked value."""
        self.value[0] = value
        self.graph.launch(self.stream)

    def test_the_library_checks_kind_count_and_flags_first_and_keeps_the_capture(self):
        s, err = self.stream, cgc.InvalidArgumentError

        def enter(*args, **kwargs):
            with s.conditional_bodies(*args, **kwargs):
                self.fail("bodies began with bad arguments")

        with cgc.graph(self.graph, stream=s):
            for args, flags, words in (
                    (("if", self.more, 3), 0, "n_bodies is 3"),
                    (("while", self.more, 2), 0, "n_bodies is 2"),
                    (("switch", self.more, 0), 0, "n_bodies is 0"),
                    (("if", self.more), cgc.CONDITIONAL_BODY_SETS_CONDITION, "WHILE"),
                    (("while", self.more), 0x80, "0x80"),
                    ((7, self.more), 0, "kind 7"),
                    (("while", None), 0, "condition is NULL")):
                self.expect_raise(err, BEGIN_BODIES, lambda: enter(*args, flags=flags), words)
            self.expect_raise(err, "cgc_capture_conditional_begin",
                              lambda: s.conditional("switch", self.more).__enter__(), BEGIN_BODIES)
        self.assertEqual(self.graph.info().conditional_nodes, 0, "the refusals added nothing")
        self.expect_raise(cgc.InvalidStateError, BEGIN_BODIES, lambda: enter("while", self.more), "not capturing")

    def test_an_if_else_runs_one_of_its_bodies_per_replay(self):
        self.require_cuda_12_8()
        s = self.stream
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.more, self.host, 4)  # the condition itself, per replay
            with s.conditional_bodies(cgc.ConditionalKind.IF, self.more, 2) as node:
                self.assertIsInstance(node, cgc.ConditionalNode)
                self.assertNotEqual(node.handle, 0)
                then_body, else_body = node.bodies
                self.assertNotEqual(then_body.handle, else_body.handle)
                then_body.memset_d32(self.hits, 1, 1)
                else_body.memset_d32(self.hits, 2, 1)
        self.assertTrue(then_body.closed and else_body.closed, "the block's end gave both bodies back")
        self.assertEqual(self.graph.info().conditional_nodes, 1)
        for condition in (1, 0, 5, 0):
            self.replay_with(condition)
            self.assertEqual(self.words_now()[4], 1 if condition else 2, "condition %d" % condition)

    def test_a_switch_runs_the_body_its_condition_names(self):
        self.require_cuda_12_8()
        s = self.stream
        s.memset_d32(self.odd, 100, 1)  # the second node's condition: past its bodies, none runs
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.more, self.host, 4)
            s.memset_d32(self.hits, 99, 1)  # what stays when no body runs
            with s.conditional_bodies("switch", self.more, 3) as (bodies, _):
                self.assertEqual(len(bodies), 3)
                for i, body in enumerate(bodies):
                    body.memset_d32(self.hits, 10 + i, 1)
            # A block that raises still ends every body (the capture could not end otherwise),
            # and its exception is the one that comes out. The bodies hold some work, as a block
            # that fails midway would (its condition, odd, names none of them: they never run).
            with self.assertRaises(ZeroDivisionError):
                with s.conditional_bodies("switch", self.odd, 4) as (failed, _):
                    for body in failed:
                        body.memset_d32(self.hits, 50, 1)
                    1 / 0
            self.assertTrue(all(body.closed for body in failed))
        self.assertTrue(all(body.closed for body in bodies))
        self.assertEqual(self.graph.info().conditional_nodes, 2)
        for condition in (0, 1, 2, 7, 3):
            self.replay_with(condition)
            self.assertEqual(self.words_now()[4], 10 + condition if condition < 3 else 99, "condition %d" % condition)

    def test_a_loop_whose_body_sets_the_condition_runs_to_its_bound(self):
        loop_module = cgc.Module.from_file(self.ctx, loop_continue_ptx())
        self.addCleanup(loop_module.close)
        loop_continue = loop_module.function("loop_continue")
        s = self.stream
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.n, self.host, 4)  # the bound, per replay
            self.init.launch(1, 1, self.args(self.counter, self.n, self.more), s)  # counter 0, more = n != 0
            with s.conditional_bodies(cgc.ConditionalKind.WHILE, self.more,
                                      flags=cgc.CONDITIONAL_BODY_SETS_CONDITION) as ((body,), handle):
                self.assertNotEqual(handle, 0)
                # The kernel decides whether another iteration follows, through the node's handle.
                loop_continue.launch(1, 1, [ctypes.c_uint64(handle), ctypes.c_void_p(self.counter),
                                            ctypes.c_void_p(self.n)], body)
        self.assertTrue(body.closed)
        for bound in (4, 1, 0, 9):
            self.replay_with(bound)
            self.assertEqual(self.words_now()[0], bound, "the body's kernel ended the loop at the bound")

    def test_a_body_ends_after_the_bodies_begun_inside_it(self):
        s = self.stream
        with cgc.graph(self.graph, stream=s):
            with s.conditional_bodies("if", self.more) as ((outer,), _):
                inner_block = outer.conditional("if", self.odd)
                inner = inner_block.__enter__()
                # The inner body is open: the outer one cannot end, and stays lent.
                self.expect_raise(cgc.InvalidStateError, "cgc_capture_conditional_end", outer._end, "still open")
                self.assertFalse(outer.closed)
                self.count.launch(1, 1, self.args(self.hits), inner)
                inner_block.__exit__(None, None, None)
                self.assertTrue(inner.closed)
            self.assertTrue(outer.closed, "the block ended it once the inner body had ended")
        s.memset_d32(self.more, 1, 1)
        s.memset_d32(self.odd, 1, 1)
        self.graph.launch(s)
        self.assertEqual(self.words_now()[4], 1, "the nested body ran")

    def test_memory_allocated_in_a_body_is_reused_there_and_after_it(self):
        s, size = self.stream, 1024
        pool = cgc.Pool(self.ctx)
        self.addCleanup(pool.close)
        with cgc.graph(self.graph, stream=s, pool=pool):
            # 1.2's single-body form holds allocations since 1.3 too.
            with s.conditional(cgc.ConditionalKind.IF, self.more) as body:
                first = cgc.malloc(self.ctx, size, body)
                body.memset_d32(first, 5, size // 4)
                body.memcpy_dtod(self.hits, first, 4)
                cgc.free(first)
                second = cgc.malloc(self.ctx, size, body)
                self.assertEqual(second, first, "freed in the body, reused by the body")
                body.memset_d32(second, 6, size // 4)
                body.memcpy_dtod(self.odd, second, 4)
                cgc.free(second)
            after = cgc.malloc(self.ctx, size, s)
            self.assertEqual(after, first, "the body's memory passed to the capture's stream at its end")
            cgc.free(after)
        self.assertGreater(pool.memory_stats(self.ctx).bytes_reserved, 0, "the body's memory is the pool's")
        s.memset_d32(self.more, 1, 1)
        self.graph.launch(s)
        words = self.words_now()
        self.assertEqual((words[4], words[3]), (5, 6), "each use of the block saw its own values")

    def test_draws_in_a_while_body_are_the_eager_draws(self):
        s, seed, bounds = self.stream, 42, (5, 3, 0, 7)
        per_iteration = 6  # drawn 4 at a time: an iteration takes 8 of the generator's offsets
        append = self.module.function("cond_append")  # launched with per_iteration threads
        rng = cgc.Rng(self.ctx, seed)
        self.addCleanup(rng.close)
        row = cgc.malloc(self.ctx, per_iteration * 4, s)
        self.addCleanup(cgc.free, row)
        rows = cgc.malloc(self.ctx, max(bounds) * per_iteration * 4, s)
        self.addCleanup(cgc.free, rows)
        loop = self.args(self.counter, self.n, self.more)
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.n, self.host, 4)
            self.init.launch(1, 1, loop, s)
            with s.conditional_bodies("while", self.more) as ((body,), _):
                rng.uniform(row, per_iteration, body)
                # Row `counter` of `rows` keeps this iteration's numbers; then the count goes on.
                append.launch(1, per_iteration, self.args(rows, row, self.counter) + [ctypes.c_uint32(per_iteration)],
                              body)
                self.step.launch(1, 1, loop, body)

        def read(address, count):
            if count == 0:
                return b""
            out = bytearray(count * 4)
            s.synchronize()
            s.memcpy_dtoh(out, address)
            s.synchronize()
            return bytes(out)

        def eager(offset, count):
            """What `count` eager draws of the loop's size give from (seed, offset), one after another."""
            with cgc.Rng(self.ctx, seed) as generator:
                generator.set_state(seed, offset)
                drawn = b""
                for _ in range(count):
                    generator.uniform(row, per_iteration, s)
                    drawn += read(row, per_iteration)
            return drawn

        window = 8 * cgc.LOOP_EAGER_ITERATIONS
        for bound in bounds:
            _, before = rng.get_state()
            self.replay_with(bound)
            got = read(rows, bound * per_iteration)
            # Bitwise: the same Philox numbers, not merely close ones.
            self.assertEqual(got, eager(before, bound), "a replay of %d iterations" % bound)
            if bound > 1:
                self.assertNotEqual(got[:per_iteration * 4], got[per_iteration * 4:2 * per_iteration * 4],
                                    "iterations draw fresh numbers")
            self.assertEqual(rng.get_state(), (seed, before + window), "a replay reserves the loop's window")


if __name__ == "__main__":
    unittest.main()
