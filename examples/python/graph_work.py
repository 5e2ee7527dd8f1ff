#!/usr/bin/env python3
"""The work a graph is made of, in Python: the twin of examples/c/graph_work.c, using only cgc.

Loads the examples' own kernel (examples/kernels/scale_add.ptx), copies the input in, and
captures one graph on two streams with a fork/join:
  origin: set flag = 0, copy the per-replay parameters in from page-locked host memory, fork ->
  side:   kernel out = in * params[0] + params[1], write flag = 1 (a stream memory operation),
          join ->
  origin: wait until flag == 1, copy out to page-locked host memory, host function (counts
          replays).
Then replays it three times with new parameters written into host memory between replays (no
recapture), checking every output on the host, and prints the graph's nodes by kind.

    python3 examples/python/graph_work.py [path/to/scale_add.ptx]

Without an argument the PTX is ../kernels/scale_add.ptx from this file (the repository's layout),
else scale_add.ptx beside it (the GPU bundle's tools/). Without a GPU it says why and exits 1.
"""
import contextlib
import ctypes
import os
import sys

try:
    import cgc
except ImportError:  # run from the repository: use the binding beside it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
    import cgc

COUNT, REPLAYS, BLOCK = 4096, 3, 256
FLOAT = ctypes.sizeof(ctypes.c_float)


def ptx_path(argv):
    """The kernel's PTX: the command line's, else the first of the usual places that has it."""
    if len(argv) > 1:
        return argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "..", "kernels", "scale_add.ptx"), os.path.join(here, "scale_add.ptx")]
    return next((path for path in candidates if os.path.isfile(path)), candidates[0])


def main(argv):
    try:
        if cgc.device_count() == 0:
            raise cgc.NoDeviceError(cgc.Status.NO_DEVICE, "no GPU")
    except cgc.Error as e:
        print("cgc graph-work example: no GPU here\n  %s" % e)
        return 1
    path = ptx_path(argv)
    try:
        with open(path, "rb") as f:
            ptx = f.read()
    except OSError as e:
        print("cannot read the kernel's PTX at '%s': %s" % (path, e), file=sys.stderr)
        return 1

    # Everything is closed in the reverse order of its creation, also when a call fails: the graph
    # before the host memory it copies to and from, device memory before its streams.
    with contextlib.ExitStack() as resources:
        ctx = resources.enter_context(cgc.Context(0))
        origin = resources.enter_context(cgc.Stream(ctx))
        side = resources.enter_context(cgc.Stream(ctx))
        fork = resources.enter_context(cgc.Event(ctx))
        join = resources.enter_context(cgc.Event(ctx))
        module = resources.enter_context(cgc.Module(ctx, ptx))  # the driver compiles it for this GPU
        scale_add = module.function("scale_add")

        # Page-locked host memory: what a captured copy reads or writes at every replay.
        host_in = resources.enter_context(cgc.HostBuffer(ctx, COUNT * FLOAT))
        host_out = resources.enter_context(cgc.HostBuffer(ctx, COUNT * FLOAT))
        host_params = resources.enter_context(cgc.HostBuffer(ctx, 2 * FLOAT))
        inputs, outputs = host_in.as_array(ctypes.c_float), host_out.as_array(ctypes.c_float)
        params = host_params.as_array(ctypes.c_float)
        for i in range(COUNT):
            inputs[i] = (i % 97) * 0.25

        def device_memory(nbytes):
            p = cgc.malloc(ctx, nbytes, origin)
            resources.callback(cgc.free, p)
            return p
        d_in, d_out = device_memory(COUNT * FLOAT), device_memory(COUNT * FLOAT)
        d_params, flag = device_memory(2 * FLOAT), device_memory(ctypes.sizeof(ctypes.c_uint32))
        origin.memcpy_htod(d_in, host_in)
        origin.synchronize()
        for p in (d_in, d_out, d_params, flag):  # used on the side stream too
            cgc.record_stream(p, side)

        replays_seen = []

        def count_replay():  # the graph's host function: runs at every replay, on a driver thread
            replays_seen.append(len(replays_seen) + 1)

        # The kernel's parameters as their C types: scale_add(float* out, const float* in,
        # const float* params, unsigned n).
        args = [ctypes.c_void_p(d_out), ctypes.c_void_p(d_in), ctypes.c_void_p(d_params), ctypes.c_uint32(COUNT)]
        graph = resources.enter_context(cgc.Graph())
        with cgc.graph(graph, stream=origin):
            origin.memset_d32(flag, 0, 1)
            origin.memcpy_htod(d_params, host_params)
            fork.record(origin)
            side.wait_event(fork)  # fork: the side stream joins the capture
            scale_add.launch((COUNT + BLOCK - 1) // BLOCK, BLOCK, args, side)
            side.write_value32(flag, 1)
            join.record(side)
            origin.wait_event(join)  # join
            origin.wait_value32(flag, 1, cgc.WAIT_EQ)
            origin.memcpy_dtoh(host_out, d_out)
            origin.launch_host_func(count_replay)

        failures = 0
        for r in range(1, REPLAYS + 1):
            params[0], params[1] = float(r), 10.0 * r  # written on the host, copied in by the graph
            graph.replay()
            origin.synchronize()
            for i in range(COUNT):
                want = inputs[i] * r + 10.0 * r
                if abs(outputs[i] - want) > 1e-4 * abs(want) + 1e-6:
                    if failures < 5:
                        print("replay %d: out[%d] = %g, want %g" % (r, i, outputs[i], want), file=sys.stderr)
                    failures += 1
            print("replay %d: scale %g, shift %g: out[1] = %g, host function ran %d time(s)"
                  % (r, params[0], params[1], outputs[1], len(replays_seen)))
        info = graph.info()
        print("graph: %d nodes: %d kernel, %d copies, %d set, %d host, %d memory operations, %d event"
              % (info.node_count, info.kernel_nodes, info.memcpy_nodes, info.memset_nodes, info.host_nodes,
                 info.mem_op_nodes, info.event_record_nodes + info.event_wait_nodes))
        if len(replays_seen) != REPLAYS:
            print("the host function ran %d times, want %d" % (len(replays_seen), REPLAYS), file=sys.stderr)
            failures += 1
    print("ok: every replay saw its own parameters" if failures == 0 else "FAILED")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
