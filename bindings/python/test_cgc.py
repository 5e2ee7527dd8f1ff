"""Tests of cgc.py: CI tests (no GPU needed) and GPU tests (skipped with the reason without one).

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -m unittest -v test_cgc
Child processes get this folder on PYTHONPATH, so nothing depends on the repository's layout.
"""

import array
import ctypes
import json
import math
import os
import subprocess
import sys
import unittest

import cgc

HERE = os.path.dirname(os.path.abspath(cgc.__file__))


def run_child(code, **env):
    """Runs `code` in a fresh interpreter (driver and library loading are once per process) and
    returns the JSON object it printed last."""
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = HERE + os.pathsep + full.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("child failed (%d): %s%s" % (r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def read_abi_description(path):
    """tools/abi_describe's lines: (functions [(name, ret class, [param classes])],
    statuses {name: value}, structs {name: (size, [(field, class, offset, size)])})."""
    functions, statuses, structs = [], {}, {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "function":
                functions.append((words[2], words[3], [w.split(":", 1)[1] for w in words[4:]]))
            elif words[0] == "status":
                statuses[words[1]] = int(words[2])
            elif words[0] == "struct":
                structs[words[1]] = (int(words[2]), [])
            elif words[0] == "field":
                structs[words[1]][1].append((words[3], words[4], int(words[5]), int(words[6])))
    return functions, statuses, structs


def abi_key(cls):
    """A class as the ABI sees it: size_t and uint64_t are one 64-bit type on every platform cgc
    supports, so are ssize_t and int64 (ctypes cannot tell them apart either)."""
    return {"usize": "u64", "isize": "i64"}.get(cls, cls)


def compatible(binding, header):
    """True when a binding's class passes what the header's class expects. "ptr(?)" is a
    pointer whose pointee the binding leaves open (ctypes.c_void_p)."""
    binding, header = abi_key(binding), abi_key(header)
    if binding == header:
        return True
    if binding == "ptr(?)":  # ctypes passes every handle as c_void_p: its kind is not checked here
        return header.startswith(("ptr(", "handle:", "fnptr:"))
    if binding == "fnptr":
        return header.startswith("fnptr:")
    if binding.startswith("ptr(") and header.startswith("ptr("):
        return compatible(binding[4:-1], header[4:-1])
    return False


STRUCT_NAMES = {cgc.capture_options_t: "cgc_capture_options_t", cgc.graph_info_t: "cgc_graph_info_t",
                cgc.memory_stats_t: "cgc_memory_stats_t", cgc.comm_id_t: "cgc_comm_id_t"}


def ctypes_class(t):
    """The class (as tools/abi_describe names them) of a ctypes type."""
    if t is None:
        return "void"
    if t is ctypes.c_void_p:
        return "ptr(?)"
    if t is ctypes.c_char_p:
        return "ptr(i8)"
    if t in STRUCT_NAMES:
        return "struct:" + STRUCT_NAMES[t]
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return "ptr(%s)" % ctypes_class(t._type_)
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return "fnptr"
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return "array(%d,%s)" % (t._length_, ctypes_class(t._type_))
    if t is ctypes.c_float:
        return "f32"
    if t is ctypes.c_char:
        return "i8"
    signed = t(-1).value < 0
    return ("i%d" if signed else "u%d") % (8 * ctypes.sizeof(t))


class AbiDescriptionTest(unittest.TestCase):
    """The module's function table, structs and status codes against capi/cgc.h's own lists, as
    tools/abi_describe prints them: a parameter changed in one place only fails here."""

    @classmethod
    def setUpClass(cls):
        path = os.environ.get("CGC_ABI_DESCRIPTION")
        if not path:
            raise unittest.SkipTest("CGC_ABI_DESCRIPTION is not set (Bazel's test and the GPU bundle set it)")
        cls.functions, cls.statuses, cls.structs = read_abi_description(path)

    def test_the_table_has_the_header_functions_in_order_with_their_types(self):
        self.assertEqual([p[0] for p in cgc._PROTOTYPES], [f[0] for f in self.functions])
        for (name, restype, argtypes), (_, ret, params) in zip(cgc._PROTOTYPES, self.functions):
            self.assertTrue(compatible(ctypes_class(restype), ret),
                            "%s returns %s in the header, %s here" % (name, ret, ctypes_class(restype)))
            self.assertEqual(len(argtypes), len(params), "%s: number of parameters" % name)
            for i, (argtype, param) in enumerate(zip(argtypes, params)):
                self.assertTrue(compatible(ctypes_class(argtype), param),
                                "%s parameter %d is %s in the header, %s here" % (name, i, param, ctypes_class(argtype)))

    def test_structs_have_the_header_layout(self):
        self.assertEqual(sorted(STRUCT_NAMES.values()), sorted(self.structs), "the header's public structs")
        for struct, c_name in STRUCT_NAMES.items():
            size, fields = self.structs[c_name]
            self.assertEqual(ctypes.sizeof(struct), size, c_name)
            self.assertEqual([f[0] for f in struct._fields_], [f[0] for f in fields], c_name)
            for (name, ctype), (_, cls, offset, field_size) in zip(struct._fields_, fields):
                self.assertEqual(getattr(struct, name).offset, offset, "%s.%s" % (c_name, name))
                self.assertEqual(getattr(struct, name).size, field_size, "%s.%s" % (c_name, name))
                self.assertTrue(compatible(ctypes_class(ctype), cls), "%s.%s is %s" % (c_name, name, cls))

    def test_status_codes_are_the_header_ones(self):
        self.assertEqual({s.c_name: int(s) for s in cgc.Status}, self.statuses)


class LoadingTest(unittest.TestCase):
    def test_library_loads_and_is_version_1(self):
        major, minor, patch = cgc.version()
        self.assertEqual(major, 1)
        self.assertGreaterEqual(minor, 0)
        # The table this module calls through is complete and is the library's own functions.
        lib = cgc.api()
        self.assertGreaterEqual(lib.table.contents.struct_size, ctypes.sizeof(cgc.api_t))
        self.assertEqual(len(cgc._PROTOTYPES), 63)
        for name, _, _ in cgc._PROTOTYPES:
            via_table = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            via_dlsym = ctypes.cast(getattr(lib.dll, name), ctypes.c_void_p).value
            self.assertEqual(via_table, via_dlsym, name)

    def test_missing_library_gives_clear_error(self):
        out = run_child(
            "import cgc, json\n"
            "try:\n"
            "    cgc.version(); print(json.dumps({'raised': False}))\n"
            "except cgc.LibraryError as e:\n"
            "    print(json.dumps({'raised': True, 'message': str(e), 'status': e.status}))\n",
            CGC_LIBRARY="/nonexistent/libcgc.so.1")
        self.assertTrue(out["raised"])
        self.assertIsNone(out["status"])
        self.assertIn("/nonexistent/libcgc.so.1", out["message"])
        self.assertIn("CGC_LIBRARY", out["message"])

    def test_import_does_not_load(self):
        # `import cgc` must work without the library; only a call loads it.
        out = run_child("import cgc, json; print(json.dumps({'loaded': cgc._loaded is not None}))",
                        CGC_LIBRARY="/nonexistent/libcgc.so.1")
        self.assertFalse(out["loaded"])


class NoDriverTest(unittest.TestCase):
    def test_device_count_without_driver(self):
        out = run_child(
            "import cgc, json\n"
            "try:\n"
            "    cgc.device_count(); print(json.dumps({'raised': False}))\n"
            "except cgc.NoDriverError as e:\n"
            "    print(json.dumps({'raised': True, 'status': int(e.status), 'message': e.message,\n"
            "                      'is_status': isinstance(e.status, cgc.Status)}))\n",
            CGC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
        self.assertTrue(out["raised"])
        self.assertEqual(out["status"], cgc.Status.NO_DRIVER)
        self.assertTrue(out["is_status"])
        self.assertIn("cgc_device_count", out["message"])
        self.assertIn("CGC_CUDA_DRIVER", out["message"])
        self.assertIn("/nonexistent/libcuda.so.1", out["message"])


class StatusTest(unittest.TestCase):
    def test_every_code_maps_both_ways(self):
        self.assertEqual(len(cgc.Status), 16)
        for code in range(16):
            status = cgc.Status.of(code)
            self.assertIsInstance(status, cgc.Status)
            self.assertEqual(int(status), code)
            self.assertTrue(cgc.status_string(code).startswith(status.c_name), cgc.status_string(code))
            err = cgc.Error(code, "message")
            self.assertEqual(err.status, status)
            self.assertIsInstance(err, cgc.Error)
            if code:
                self.assertIsNot(type(err), cgc.Error)  # its own subclass
        self.assertTrue(cgc.status_string(1).startswith("CGC_ERROR_INVALID_ARGUMENT"))
        self.assertIsInstance(cgc.Error(9, "x"), cgc.CaptureUnjoinedError)
        self.assertIsInstance(cgc.Error(6, "x"), MemoryError)
        self.assertIsInstance(cgc.Error(1, "x"), ValueError)

    def test_unknown_code_is_kept(self):
        self.assertEqual(cgc.Status.of(99), 99)
        self.assertNotIsInstance(cgc.Status.of(99), cgc.Status)
        err = cgc.Error(99, "from a newer library")
        self.assertIs(type(err), cgc.Error)
        self.assertEqual(err.status, 99)
        self.assertIn("99", str(err))
        self.assertIn("UNKNOWN", cgc.status_string(99))


class BadCallTest(unittest.TestCase):
    def test_null_handles_are_refused_by_the_library(self):
        lib = cgc.api()
        self.assertEqual(lib.cgc_graph_launch(None, None), cgc.Status.INVALID_ARGUMENT)
        self.assertIn("cgc_graph_launch", lib.cgc_last_error().decode())
        self.assertEqual(lib.cgc_stream_destroy(None), cgc.Status.INVALID_ARGUMENT)
        self.assertEqual(lib.cgc_capture_begin(None, None), cgc.Status.INVALID_ARGUMENT)

    def test_foreign_pointer_free(self):
        with self.assertRaises(cgc.InvalidArgumentError) as cm:
            cgc.free(0xDEAD00)
        self.assertEqual(cm.exception.status, cgc.Status.INVALID_ARGUMENT)
        self.assertIn("cgc_free", cm.exception.message)
        cgc.free(None)  # NULL is a no-op
        cgc.free(0)

    def test_empty_and_closed_graph_are_refused_by_the_binding(self):
        g = cgc.Graph()
        with self.assertRaises(cgc.InvalidStateError):
            g.replay()
        with self.assertRaises(cgc.InvalidStateError):
            g.info()
        with self.assertRaises(cgc.InvalidStateError):
            g.capture_end()
        self.assertEqual(g.native, 0)
        g.close()
        g.close()  # twice is fine
        with self.assertRaises(cgc.InvalidHandleError) as cm:
            g.info()
        self.assertEqual(cm.exception.status, cgc.Status.INVALID_HANDLE)

    def test_bad_capture_mode(self):
        with self.assertRaises(cgc.InvalidArgumentError):
            cgc.graph(cgc.Graph(), stream=None, mode="sometimes")

    def test_structs_carry_their_size(self):
        self.assertEqual(cgc.capture_options_t().struct_size, ctypes.sizeof(cgc.capture_options_t))
        self.assertEqual(cgc.graph_info_t().struct_size, ctypes.sizeof(cgc.graph_info_t))
        self.assertEqual(cgc.memory_stats_t().struct_size, ctypes.sizeof(cgc.memory_stats_t))


# ---- GPU tests ---------------------------------------------------------------------------------


class Cuda(object):
    """Test-only driver access (the binding itself never calls the driver): host copies, and the
    device-to-device copy of the fork/join test. cgc does not make a context current, so this
    retains device 0's primary context and makes it current on the calling thread."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        u64, vp, sz = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
        protos = {
            "cuInit": [ctypes.c_uint],
            "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
            "cuCtxSetCurrent": [vp],
            "cuMemcpyDtoH_v2": [vp, u64, sz],
            "cuMemcpyDtoDAsync_v2": [u64, u64, sz, vp],
        }
        for name, args in protos.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.lib = lib
        self.check(lib.cuInit(0), "cuInit")
        dev, ctx = ctypes.c_int(0), vp()
        self.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.make_current()

    @staticmethod
    def check(r, what):
        if r != 0:
            raise AssertionError("%s failed: CUresult %d" % (what, r))

    def make_current(self):
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def to_host(self, ptr, n):
        """n float32 from device address ptr, as bytes (for bitwise comparisons)."""
        buf = ctypes.create_string_buffer(n * 4)
        self.check(self.lib.cuMemcpyDtoH_v2(buf, ptr, n * 4), "cuMemcpyDtoH_v2")
        return buf.raw

    def copy_async(self, dst, src, nbytes, stream):
        self.check(self.lib.cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream.native or None),
                   "cuMemcpyDtoDAsync_v2")


def floats(raw):
    a = array.array("f")
    a.frombytes(raw)
    return a


def require_gpu(test):
    try:
        n = cgc.device_count()
    except cgc.Error as e:
        test.skipTest("no GPU: cgc.device_count() failed: %s" % e)
    if n == 0:
        test.skipTest("no GPU: cgc.device_count() is 0")


N = 1 << 16


class GpuForkJoinTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)
        self.cuda = Cuda()

    def test_fork_join_with_shared_pool(self):
        cuda = self.cuda
        ctx = cgc.Context(0)
        origin, side1, side2 = cgc.Stream(ctx), cgc.Stream(ctx), cgc.Stream(ctx)
        fork, join1, join2 = cgc.Event(ctx), cgc.Event(ctx), cgc.Event(ctx)
        gen = cgc.Rng(ctx, seed=1234)
        nbytes = N * 4

        g1 = cgc.Graph()
        with cgc.graph(g1, stream=origin, mode="global"):
            a = cgc.malloc(ctx, nbytes, origin)
            gen.uniform(a, N, origin)
            fork.record(origin)
            side1.wait_event(fork)
            side2.wait_event(fork)
            b = cgc.malloc(ctx, nbytes, side1)
            cuda.copy_async(b, a, nbytes, side1)
            c = cgc.malloc(ctx, nbytes, side2)
            gen.normal(c, N, side2, mean=0.0, std=1.0)
            join1.record(side1)
            join2.record(side2)
            origin.wait_event(join1)
            origin.wait_event(join2)
        pool1 = g1.pool()
        g2 = cgc.Graph()
        with cgc.graph(g2, stream=origin, pool=pool1):
            d = cgc.malloc(ctx, nbytes, origin)
            cuda.copy_async(d, b, nbytes, origin)

        previous = None
        for _ in range(3):
            g1.launch(origin)
            g2.launch(origin)
            origin.synchronize()
            cuda.make_current()
            ra, rb, rc, rd = (cuda.to_host(p, N) for p in (a, b, c, d))
            self.assertEqual(rb, ra)
            self.assertEqual(rd, ra)
            fa = floats(ra)
            self.assertTrue(all(0.0 <= x < 1.0 for x in fa))
            self.assertNotEqual(ra, previous)  # fresh numbers every replay
            previous = ra
            fc = floats(rc)
            mean = sum(fc) / N
            std = math.sqrt(sum((x - mean) ** 2 for x in fc) / N)
            self.assertLess(abs(mean), 0.05)
            self.assertLess(abs(std - 1.0), 0.05)

        info = g1.info()
        # 3 work nodes (uniform, copy, normal): allocations, event records and waits add none.
        self.assertGreaterEqual(info.node_count, 3)
        self.assertEqual(info.replay_count, 3)
        self.assertEqual(g2.info().replay_count, 3)
        pool2 = g2.pool()
        self.assertEqual(pool2, pool1)
        self.assertGreater(pool1.memory_stats(ctx).bytes_reserved, 0)

        for p in (a, b, c, d):  # the graphs' outputs: they outlive the graphs, freed by us
            cgc.free(p)
        g2.close()
        g1.close()
        pool2.close()
        pool1.close()
        for obj in (fork, join1, join2, side1, side2, origin, gen, ctx):
            obj.close()
            self.assertTrue(obj.closed)

    def test_unjoined_fork_fails_capture_end(self):
        ctx = cgc.Context(0)
        origin, side1 = cgc.Stream(ctx), cgc.Stream(ctx)
        fork = cgc.Event(ctx)
        gen = cgc.Rng(ctx, seed=7)
        buf = cgc.malloc(ctx, N * 4, origin)
        copy = cgc.malloc(ctx, N * 4, origin)
        g = cgc.Graph()
        with self.assertRaises(cgc.CaptureUnjoinedError) as cm:
            with cgc.graph(g, stream=origin):
                gen.uniform(buf, N, origin)
                fork.record(origin)
                side1.wait_event(fork)
                self.cuda.copy_async(copy, buf, N * 4, side1)  # never joined back
        err = cm.exception
        self.assertEqual(err.status, cgc.Status.CAPTURE_UNJOINED)
        self.assertIn("%x" % side1.native, err.message.lower())
        self.assertEqual(origin.capture_status()[0], cgc.CaptureStatus.NONE)
        self.assertEqual(side1.capture_status()[0], cgc.CaptureStatus.NONE)
        with self.assertRaises(cgc.InvalidStateError):
            g.info()  # nothing captured
        # The origin can capture again, into the same (still empty) Graph.
        with cgc.graph(g, stream=origin):
            gen.uniform(buf, N, origin)
        self.assertGreaterEqual(g.info().node_count, 1)
        g.replay()
        origin.synchronize()
        g.close()
        cgc.free(buf)
        cgc.free(copy)
        for obj in (fork, side1, origin, gen, ctx):
            obj.close()

    def test_body_exception_ends_the_capture(self):
        ctx = cgc.Context(0)
        with cgc.Stream(ctx) as origin, cgc.Rng(ctx, seed=3) as gen:
            buf = cgc.malloc(ctx, N * 4, origin)
            g = cgc.Graph()
            with self.assertRaises(ZeroDivisionError):
                with cgc.graph(g, stream=origin):
                    gen.uniform(buf, N, origin)
                    self.assertTrue(origin.is_capturing())
                    1 / 0
            self.assertFalse(origin.is_capturing())
            self.assertEqual(origin.capture_status(), (cgc.CaptureStatus.NONE, 0))
            with self.assertRaises(cgc.InvalidStateError):
                g.replay()  # the graph was discarded
            with cgc.graph(g, stream=origin):  # and the stream captures again
                gen.uniform(buf, N, origin)
            g.replay()
            origin.synchronize()
            self.assertEqual(g.info().replay_count, 1)
            g.close()
            cgc.free(buf)
        ctx.close()


class GpuNcclTest(unittest.TestCase):
    """The NCCL wrappers on one GPU: a 1-rank communicator, eager and captured."""

    def setUp(self):
        require_gpu(self)
        try:
            self.nccl = cgc.nccl_version()
        except cgc.Error as e:
            self.skipTest("no NCCL: %s" % e)
        self.cuda = Cuda()

    def test_one_rank_collectives_eager_and_captured(self):
        self.assertGreaterEqual(self.nccl, 20906)  # cgc's floor, 2.9.6
        cuda = self.cuda
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        gen = cgc.Rng(ctx, seed=11)
        comm = cgc.Comm(ctx, 1, cgc.Comm.unique_id(), 0)
        send, recv = cgc.malloc(ctx, N * 4, s), cgc.malloc(ctx, N * 4, s)
        f32 = cgc.DType.FLOAT32

        def check_copied(what):
            s.synchronize()
            cuda.make_current()
            self.assertEqual(cuda.to_host(recv, N), cuda.to_host(send, N), what)

        # Eager: with one rank every collective copies send into recv (recv is first overwritten
        # with other numbers, so a collective that did nothing would be seen).
        for what, run in (
                ("all_reduce", lambda: comm.all_reduce(send, recv, N, f32, cgc.ReduceOp.SUM, s)),
                ("all_gather", lambda: comm.all_gather(send, recv, N, f32, s)),
                ("broadcast", lambda: comm.broadcast(send, recv, N, f32, 0, s))):
            gen.uniform(send, N, s)
            gen.uniform(recv, N, s)
            run()
            check_copied(what)

        g = cgc.Graph()
        with cgc.graph(g, stream=s):
            comm.all_reduce(send, recv, N, f32, cgc.ReduceOp.SUM, s)
        for _ in range(3):
            gen.uniform(send, N, s)  # new inputs, drawn eagerly
            g.launch(s)
            check_copied("captured all_reduce")

        with self.assertRaises(cgc.InvalidStateError):  # the graph holds the communicator
            comm.close()
        self.assertFalse(comm.closed)
        g.close()
        comm.close()
        cgc.free(send)
        cgc.free(recv)
        for obj in (gen, s, ctx):
            obj.close()


if __name__ == "__main__":
    unittest.main()
