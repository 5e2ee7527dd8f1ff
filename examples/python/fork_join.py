#!/usr/bin/env python3
"""A fork/join capture with cgc, replayed: the Python twin of examples/fork_join.c, using only cgc.

origin draws uniform numbers into x and forks two side streams (side1 draws normal numbers into
y, side2 uniform ones into z); both join back. A second graph, sharing the first one's pool,
draws normal numbers into w. Both are replayed a few times; every replay draws fresh numbers.
Without a GPU it prints the library's message and exits with status 1.
"""
import os
import sys

try:
    import cgc
except ImportError:  # run from the repository: use the binding beside it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
    import cgc

N = 1 << 20


def main():
    try:
        if cgc.device_count() == 0:
            raise cgc.NoDeviceError(cgc.Status.NO_DEVICE, "no GPU")
    except cgc.Error as e:
        print("cgc fork/join example: no GPU here\n  %s" % e)
        return 1
    ctx = cgc.Context(0)
    origin, side1, side2 = cgc.Stream(ctx), cgc.Stream(ctx), cgc.Stream(ctx)
    fork, join1, join2 = cgc.Event(ctx), cgc.Event(ctx), cgc.Event(ctx)
    gen = cgc.Rng(ctx, seed=42)

    first = cgc.Graph()
    with cgc.graph(first, stream=origin):  # Global mode, a new private pool
        x = cgc.malloc(ctx, N * 4, origin)
        gen.uniform(x, N, origin)
        fork.record(origin)
        side1.wait_event(fork)
        side2.wait_event(fork)
        y = cgc.malloc(ctx, N * 4, side1)
        gen.normal(y, N, side1)
        z = cgc.malloc(ctx, N * 4, side2)
        gen.uniform(z, N, side2)
        join1.record(side1)
        join2.record(side2)
        origin.wait_event(join1)
        origin.wait_event(join2)

    pool = first.pool()
    second = cgc.Graph()
    with cgc.graph(second, stream=origin, pool=pool):  # shares the first graph's pool
        w = cgc.malloc(ctx, N * 4, origin)
        gen.normal(w, N, origin)

    for _ in range(3):  # graphs sharing a pool replay in capture order
        first.replay()
        second.replay()
    origin.synchronize()

    for name, g in (("first", first), ("second", second)):
        info = g.info()
        print("%s graph: %d nodes, replayed %d times" % (name, info.node_count, info.replay_count))
    print("shared pool: %d bytes reserved" % pool.memory_stats(ctx).bytes_reserved)
    print("pool shared: %s" % ("yes" if second.pool() == pool else "no"))

    for p in (x, y, z, w):  # the graphs' outputs outlive them; free them ourselves
        cgc.free(p)
    for obj in (second, first, pool, fork, join1, join2, side1, side2, origin, gen, ctx):
        obj.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
