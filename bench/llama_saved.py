"""llama_saved: a small Llama-style model's CUDA graphs, one per batch size, captured with cgc
under PyTorch in one process, saved, and restored in a fresh process without PyTorch capturing
anything (1.6: cgc_graphs_save / cgc_graphs_restore, the record of module images).

    python3 bench/llama_saved.py save FILE      capture, replay, save FILE (and FILE.json)
    python3 bench/llama_saved.py restore FILE   in a fresh process: restore, replay, compare

The saving process records the images of the modules PyTorch and cuBLAS load (cgc_module_record,
from before the first kernel), makes cgc PyTorch's allocator, puts the weights and the input
tokens in a pool at fixed addresses (Pool.at), warms up each batch size on a side stream and
captures it with cgc.graph into a second fixed pool (one capture stream for all, so cuBLAS's
workspace is the capture pool's too), replays every graph and keeps a digest of its logits, then
saves the graphs with the weights' pool, verified (which measures what a restore takes on the
device besides the pools). It times warm-up + capture, the anchor.

The restoring process times file -> cgc_graphs_restore (as families: one instantiation for each
graph structure), writes the weights (the same seed) and tokens back at their addresses
(untimed, as loading weights is outside the anchor), times the first launch and then every other
graph's first launch (a family member is built at its first), replays every graph and compares
each output's digest with the saving process's (byte-equal). It compares cgc_saved_info's
prediction (the pools, and the modules and executables the verifying save measured) with the
device memory the restore and every graph's first launch took in the fresh process (which also
pays memory the driver takes once per process: SEMANTICS 42). Needs PyTorch, a GPU and CUPTI (exit status 1 with the reason otherwise)."""
import hashlib
import json
import os
import sys
import time

BATCHES = list(range(1, 36))  # 35 batch sizes
SEQ, VOCAB, DIM, LAYERS, HEADS, FFN = 32, 4096, 512, 4, 8, 1408
WEIGHTS_BASE, WEIGHTS_CAPACITY = 0x620000000000, 1 << 30
GRAPHS_BASE, GRAPHS_CAPACITY = 0x640000000000, 4 << 30


def params_on_cpu(torch):
    """The model's weights, from a fixed seed: the same in both processes."""
    g = torch.Generator().manual_seed(1234)
    def w(*shape, scale=0.02):
        return (torch.randn(*shape, generator=g) * scale).to(torch.float16)
    p = {"emb": w(VOCAB, DIM, scale=1.0), "norm": torch.ones(DIM, dtype=torch.float16), "out": w(VOCAB, DIM)}
    for l in range(LAYERS):
        p.update({f"{l}.attn_norm": torch.ones(DIM, dtype=torch.float16), f"{l}.wq": w(DIM, DIM),
                  f"{l}.wk": w(DIM, DIM), f"{l}.wv": w(DIM, DIM), f"{l}.wo": w(DIM, DIM),
                  f"{l}.ffn_norm": torch.ones(DIM, dtype=torch.float16), f"{l}.w1": w(FFN, DIM),
                  f"{l}.w2": w(DIM, FFN), f"{l}.w3": w(FFN, DIM)})
    return p


def forward(torch, p, tokens):
    F = torch.nn.functional
    def rmsnorm(x, weight):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * weight
    b, t = tokens.shape
    x = F.embedding(tokens, p["emb"])
    for l in range(LAYERS):
        h = rmsnorm(x, p[f"{l}.attn_norm"])
        q, k, v = (F.linear(h, p[f"{l}.w{n}"]).view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, DIM)
        x = x + F.linear(a, p[f"{l}.wo"])
        h = rmsnorm(x, p[f"{l}.ffn_norm"])
        x = x + F.linear(F.silu(F.linear(h, p[f"{l}.w1"])) * F.linear(h, p[f"{l}.w3"]), p[f"{l}.w2"])
    return F.linear(rmsnorm(x, p["norm"]), p["out"])


class DeviceArray(object):
    """Device memory at an address, as PyTorch reads it (__cuda_array_interface__)."""
    def __init__(self, address, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "version": 3, "strides": None}


TYPESTR = {"torch.float16": "<f2", "torch.int64": "<i8", "torch.float32": "<f4"}


def at(torch, address, shape, dtype):
    return torch.as_tensor(DeviceArray(address, shape, TYPESTR[str(dtype)]), device="cuda")


def digest(torch, tensor):
    return hashlib.sha256(tensor.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def save(path):
    import torch
    import cgc
    record = cgc.module_record(True)  # before PyTorch's first kernel: its modules and cuBLAS's load lazily
    cgc.use_as_torch_allocator()
    ctx = cgc._context_for(0)
    stream = cgc.Stream(ctx)
    weights_pool = cgc.Pool.at(ctx, WEIGHTS_BASE, WEIGHTS_CAPACITY)
    graphs_pool = cgc.Pool.at(ctx, GRAPHS_BASE, GRAPHS_CAPACITY)
    cpu = params_on_cpu(torch)
    p, weights = {}, []
    for name, value in cpu.items():
        address = weights_pool.malloc(value.numel() * value.element_size(), stream)
        weights.append((name, address, list(value.shape)))
        p[name] = at(torch, address, value.shape, value.dtype)
    tokens_cpu = torch.randint(0, VOCAB, (max(BATCHES), SEQ), generator=torch.Generator().manual_seed(99))
    tokens_address = weights_pool.malloc(tokens_cpu.numel() * 8, stream)
    stream.synchronize()
    for name, value in cpu.items():
        p[name].copy_(value)
    tokens = at(torch, tokens_address, tokens_cpu.shape, torch.int64)
    tokens.copy_(tokens_cpu)
    torch.cuda.synchronize()

    side, capture_stream = torch.cuda.Stream(), torch.cuda.Stream()
    graphs, outputs = [], []
    t0 = time.perf_counter()
    with torch.no_grad():
        for b in BATCHES:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    forward(torch, p, tokens[:b])
            torch.cuda.current_stream().wait_stream(side)
            g = cgc.Graph()
            with cgc.graph(g, pool=graphs_pool, stream=capture_stream):
                out = forward(torch, p, tokens[:b])
            graphs.append(g)
            outputs.append(out)
    torch.cuda.synchronize()
    anchor = time.perf_counter() - t0
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    digests = [digest(torch, o) for o in outputs]
    t0 = time.perf_counter()
    # Verified: each graph rebuilt from the bytes and replayed beside itself, which also measures
    # what a restore takes on the device besides the pools (saved_info's restore_bytes).
    saved = cgc.save_graphs(graphs, pools=[weights_pool], path=path, verify=True)
    save_s = time.perf_counter() - t0
    record = cgc.module_record(False)
    info = cgc.saved_info(saved)
    meta = {"anchor_s": anchor, "save_s": save_s, "weights": weights, "tokens": tokens_address,
            "outputs": [[o.data_ptr(), list(o.shape), d] for o, d in zip(outputs, digests)]}
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    print(f"llama_saved save: {len(graphs)} graphs (batch {BATCHES[0]}-{BATCHES[-1]}, {LAYERS} layers, dim {DIM}),"
          f" {info.n_nodes} nodes, {len(saved) / 2**20:.1f} MiB ({info.image_bytes / 2**20:.1f} MiB of recorded and "
          f"embedded images; the record held {record.images} images, {record.bytes / 2**20:.1f} MiB)")
    print(f"  warm-up + capture (the anchor): {anchor * 1e3:.0f} ms; save {save_s * 1e3:.0f} ms")
    return 0


def restore(path):
    import torch
    import cgc
    with open(path + ".json") as f:
        meta = json.load(f)
    torch.cuda.init()
    ctx = cgc._context_for(0)
    stream = cgc.Stream(ctx)
    free_before, _ = torch.cuda.mem_get_info()
    t0 = time.perf_counter()
    info = cgc.saved_info(path)
    graphs, pools = ctx.restore_graphs(path, families=True)
    restore_s = time.perf_counter() - t0
    # The weights and tokens back at their addresses (contents are never saved), untimed: loading
    # weights is outside the anchor too.
    cpu = params_on_cpu(torch)
    for name, address, shape in meta["weights"]:
        at(torch, address, shape, torch.float16).copy_(cpu[name])
    tokens_cpu = torch.randint(0, VOCAB, (max(BATCHES), SEQ), generator=torch.Generator().manual_seed(99))
    at(torch, meta["tokens"], tokens_cpu.shape, torch.int64).copy_(tokens_cpu)
    torch.cuda.synchronize()
    # The first launch, then every other graph's first (a family member is built and switched to
    # at its first launch: part of what the restore hands over).
    t0 = time.perf_counter()
    graphs[0].launch(stream)
    stream.synchronize()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for g in graphs[1:]:
        g.launch(stream)
    stream.synchronize()
    others_s = time.perf_counter() - t0
    free_after, _ = torch.cuda.mem_get_info()
    for g in graphs:
        g.launch(stream)
    stream.synchronize()
    equal = sum(digest(torch, at(torch, address, shape, torch.float16)) == want for address, shape, want in meta["outputs"])
    executables = len({g.native_exec for g in graphs})
    print(f"llama_saved restore: {len(graphs)} graphs, {info.n_nodes} nodes")
    ready_s, all_s = restore_s + first_s, restore_s + first_s + others_s
    print(f"  file -> restore (families) {restore_s * 1e3:.0f} ms, + first launch done {ready_s * 1e3:.0f} ms, + every"
          f" other graph's first launch done {all_s * 1e3:.0f} ms; the saving process's warm-up + capture of all:"
          f" {meta['anchor_s'] * 1e3:.0f} ms; {meta['anchor_s'] / ready_s:.1f}x faster to the first launch,"
          f" {meta['anchor_s'] / all_s:.1f}x to every graph's")
    print(f"  outputs byte-equal to the saving process's: {equal} of {len(graphs)}"
          + f"; executables: {executables}")
    predicted = info.pool_bytes + info.family_restore_bytes
    took = free_before - free_after
    print(f"  device memory: saved_info predicted {predicted / 2**20:.1f} MiB (pools {info.pool_bytes / 2**20:.1f} MiB"
          f" + modules and executables as families {info.family_restore_bytes / 2**20:.1f} MiB); the restore and"
          f" every graph's first launch took {took / 2**20:.1f} MiB (mem_get_info): {(took - predicted) / 2**20:+.1f}"
          f" MiB (a fresh process: SEMANTICS 42)")
    return 0 if equal == len(graphs) else 3


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "restore"):
        print(__doc__)
        sys.exit(2)
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("llama_saved: no PyTorch: %s" % e)
        sys.exit(1)
    if not torch.cuda.is_available():
        print("llama_saved: no GPU")
        sys.exit(1)
    sys.exit(save(sys.argv[2]) if sys.argv[1] == "save" else restore(sys.argv[2]))
