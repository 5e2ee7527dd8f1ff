#!/usr/bin/env python3
"""PyTorch with cgc: cgc is torch's allocator, an MLP's forward pass is captured with cgc.graph
on torch's current stream, and the graph is replayed on new inputs copied into its static input.
Prints the largest difference from eager PyTorch. Exits with status 1 without PyTorch or a GPU.
"""
import os
import sys

try:
    import cgc
except ImportError:  # run from the repository: use the binding beside it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
    import cgc


def main():
    try:
        import torch
    except ImportError as e:
        print("cgc torch example: no PyTorch here (%s)" % e)
        return 1
    if not torch.cuda.is_available():
        print("cgc torch example: no GPU visible to PyTorch")
        return 1
    cgc.use_as_torch_allocator()  # before torch's first CUDA work

    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                torch.nn.GELU(), torch.nn.Linear(1024, 512)).cuda().eval()
    static_in = torch.randn(64, 512, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = cgc.Graph()
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):  # warm up eagerly: cuBLAS sets itself up outside the capture
            model(static_in)
        with cgc.graph(graph, stream=stream):  # as torch.cuda.graph: tensors from the graph's pool
            static_out = model(static_in)

    worst = 0.0
    for _ in range(3):
        x = torch.randn(64, 512, device="cuda")
        static_in.copy_(x)  # on the default stream: the replay's stream waits for it
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            graph.replay()
        stream.synchronize()
        with torch.no_grad():
            worst = max(worst, (static_out - model(x)).abs().max().item())
    info = graph.info()
    print("captured %d nodes, replayed %d times, graph pool %d bytes" % (info.node_count, info.replay_count,
                                                                       info.pool_bytes_reserved))
    print("max abs diff vs eager: %.3g" % worst)
    graph.close()
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
