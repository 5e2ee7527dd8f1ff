/* saved_graphs: graphs that start instantly (1.6). One process captures a set of graphs into a
 * pool at fixed addresses and saves them; a fresh process restores them and replays them.
 *
 *   saved_graphs save FILE [--graphs N] [--nodes K] [--verify]
 *       captures N graphs (default 256) of K kernel nodes (default 1000) in 8 topologies, timing
 *       capture + instantiation (the anchor), replays each once and writes its output's checksum
 *       to FILE.ref, then times cgc_graphs_save into FILE. With --verify it then times a
 *       verifying save of the same graphs (CGC_SAVE_VERIFY), which must write the same bytes but
 *       for the header's measures of what a restore takes on the device; FILE gets those.
 *   saved_graphs restore FILE [--families] [--threads T]
 *       in a fresh process: times mapping the file + cgc_graphs_restore + the first launch's completion,
 *       then replays every graph and compares its output with FILE.ref (byte-equal, by checksum),
 *       and compares the device memory the restore and every graph's first launch took
 *       (cuMemGetInfo) with what cgc_saved_info predicted (pools, and with a verified file the
 *       modules and executables).
 *       With --families the restore makes families (CGC_RESTORE_FAMILIES): it says how many
 *       executables it made, and times the host side of launching every graph once (each launch
 *       of a member its family's executable does not hold switches it) and of launching one
 *       graph again (no switch), against cuGraphLaunch of the executable it ran. --threads sets
 *       cgc_restore_options_t.threads (0, the default: cgc chooses; 1: the calling thread alone).
 *
 * The kernels come from two modules: the benchmark's fatbin loaded with cgc_module_load (its
 * image goes into the file) and the same fatbin loaded through the driver and added by key with
 * cgc_module_add_image (the file names the key). A topology is which module each node's kernel
 * comes from; graphs of one topology differ in grid size (a batch of 1 to 32) and arguments. Each
 * graph's output is a block left allocated in the pool, so its address is the same in both
 * processes. Exit status 3 when an output differs. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/harness.h"

extern const unsigned char cgc_bench_kernels_fatbin[];
extern const size_t cgc_bench_kernels_fatbin_size;

static const uintptr_t kBase = 0x710000000000ull;
static const size_t kCapacity = (size_t)1 << 30;
static const char* kKey = "saved_graphs bench kernels";

typedef struct ref_entry {
  uint64_t out, bytes, checksum;
} ref_entry_t;

static uint64_t fnv(const unsigned char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static double ms_since(int64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static uint64_t checksum_of(uint64_t out, size_t bytes) {
  unsigned char* host = xmalloc(bytes);
  CU(cuMemcpyDtoH(host, (CUdeviceptr)out, bytes));
  uint64_t h = fnv(host, bytes);
  free(host);
  return h;
}

static int save(const char* path, int n_graphs, int n_nodes, bool verify) {
  cgc_context_t ctx;
  cgc_stream_t stream;
  CGC(cgc_context_create(0, &ctx));
  CGC(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &stream));
  CUstream native = (CUstream)cgc_stream_native(stream);
  cgc_module_t module;
  cgc_function_t lcg_cgc;
  CGC(cgc_module_load(ctx, cgc_bench_kernels_fatbin, &module));
  CGC(cgc_module_get_function(module, "cgc_bench_lcg", &lcg_cgc));
  CUmodule own;
  CUfunction lcg_own;
  CU(cuModuleLoadData(&own, cgc_bench_kernels_fatbin));
  CU(cuModuleGetFunction(&lcg_own, own, "cgc_bench_lcg"));
  CGC(cgc_module_add_image(ctx, kKey, cgc_bench_kernels_fatbin, cgc_bench_kernels_fatbin_size));
  cgc_pool_t pool;
  CGC(cgc_pool_create_at(ctx, (void*)kBase, kCapacity, &pool));
  cgc_graph_t* graphs = xmalloc(n_graphs * sizeof *graphs);
  ref_entry_t* ref = xmalloc(n_graphs * sizeof *ref);
  cgc_capture_options_t options = {.struct_size = sizeof options, .pool = pool};
  int64_t t0 = now_ns();
  for (int g = 0; g < n_graphs; g++) {
    int topology = g % 8;
    unsigned n = 256u * (1u + (unsigned)(g / 8) % 32u);
    CGC(cgc_capture_begin(stream, &options));
    void* buf;
    CGC(cgc_malloc(ctx, n * 4, stream, &buf));
    CGC(cgc_memset_d32_async(buf, (uint32_t)g, n, stream));
    for (int i = 0; i < n_nodes; i++) {
      unsigned steps = 1u + (unsigned)(i % 3);
      void* args[] = {&buf, &n, &steps};
      if ((i * 7 + topology) % 8 < 3)
        CU_OK(drv.cuLaunchKernel(lcg_own, (n + 255) / 256, 1, 1, 256, 1, 1, 0, native, args, NULL));
      else
        CGC(cgc_launch_kernel(lcg_cgc, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args));
    }
    CGC(cgc_capture_end(stream, &graphs[g]));
    ref[g].out = (uint64_t)(uintptr_t)buf;
    ref[g].bytes = n * 4;
  }
  double capture_ms = ms_since(t0);
  for (int g = 0; g < n_graphs; g++) CGC(cgc_graph_launch(graphs[g], stream));
  CGC(cgc_stream_synchronize(stream));
  for (int g = 0; g < n_graphs; g++) ref[g].checksum = checksum_of(ref[g].out, ref[g].bytes);
  t0 = now_ns();
  size_t size = 0;
  CGC(cgc_graphs_save(graphs, n_graphs, NULL, NULL, 0, &size));
  unsigned char* bytes = xmalloc(size);
  CGC(cgc_graphs_save(graphs, n_graphs, NULL, bytes, size, &size));
  double save_ms = ms_since(t0);
  char ref_path[4096];
  snprintf(ref_path, sizeof ref_path, "%s.ref", path);
  FILE* f = fopen(ref_path, "wb");
  if (f == NULL || fwrite(&capture_ms, sizeof capture_ms, 1, f) != 1 ||
      fwrite(ref, sizeof *ref, n_graphs, f) != (size_t)n_graphs || fclose(f) != 0)
    fail_with("cannot write %s", ref_path);
  printf("saved_graphs save: %d graphs of %d kernel nodes in 8 topologies, 2 modules\n", n_graphs, n_nodes);
  printf("  capture + instantiate: %.1f ms (%.2f ms a graph)\n", capture_ms, capture_ms / n_graphs);
  printf("  save (two calls: size, then bytes): %.1f ms; file %.1f MiB\n", save_ms, (double)size / MIB);
  if (verify) {
    cgc_save_options_t options = {.struct_size = sizeof options, .flags = CGC_SAVE_VERIFY};
    unsigned char* again = xmalloc(size);
    size_t again_size = 0;
    t0 = now_ns();
    CGC(cgc_graphs_save(graphs, n_graphs, &options, again, size, &again_size));
    double verify_ms = ms_since(t0);
    /* The same bytes but for the header's two measures a verifying save adds: whatever differs
     * lies within 16 bytes, and the header reads the same without them. */
    cgc_saved_info_t plain = {.struct_size = sizeof plain}, measured = {.struct_size = sizeof measured};
    CGC(cgc_saved_info(bytes, size, &plain));
    CGC(cgc_saved_info(again, again_size, &measured));
    cgc_saved_info_t unmeasured = measured;
    unmeasured.restore_bytes = unmeasured.family_restore_bytes = 0;
    size_t first = 0;
    while (again_size == size && first < size && again[first] == bytes[first]) first++;
    size_t past = first + 16 < size ? first + 16 : size;
    bool same = again_size == size && memcmp(again + past, bytes + past, size - past) == 0 &&
                memcmp(&unmeasured, &plain, sizeof plain) == 0;
    bench_failed_checks += !same;
    printf("  verifying save (every graph rebuilt from the bytes and replayed beside itself): %.1f ms, %s bytes; a "
           "restore takes %.1f MiB besides the pools (%.1f MiB as families)\n",
           verify_ms, same ? "the same" : "OTHER", (double)measured.restore_bytes / MIB,
           (double)measured.family_restore_bytes / MIB);
    free(bytes);
    bytes = again;
  }
  f = fopen(path, "wb");
  if (f == NULL || fwrite(bytes, 1, size, f) != size || fclose(f) != 0) fail_with("cannot write %s", path);
  for (int g = 0; g < n_graphs; g++) CGC(cgc_graph_destroy(graphs[g]));
  for (int g = 0; g < n_graphs; g++) CGC(cgc_free((void*)(uintptr_t)ref[g].out));
  CGC(cgc_pool_release(pool));
  CGC(cgc_module_unload(module));
  free(bytes);
  free(graphs);
  free(ref);
  return 0;
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) fail_with("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = xmalloc(n > 0 ? (size_t)n : 1);
  if (n < 0 || fread(data, 1, (size_t)n, f) != (size_t)n) fail_with("cannot read %s", path);
  fclose(f);
  *size = (size_t)n;
  return data;
}

/* The saved file mapped (as a server would map it: its pages come from the page cache as they
 * are read, not copied first). */
static void* map_file(const char* path, size_t* size) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) fail_with("cannot open %s", path);
  void* data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (data == MAP_FAILED) fail_with("cannot map %s", path);
  close(fd);
  *size = (size_t)st.st_size;
  return data;
}

static int restore(const char* path, bool families, unsigned threads) {
  int64_t t_start = now_ns();
  cgc_context_t ctx;
  cgc_stream_t stream;
  CGC(cgc_context_create(0, &ctx));
  CGC(cgc_stream_create(ctx, CGC_STREAM_NON_BLOCKING, 0, &stream));
  CGC(cgc_module_add_image(ctx, kKey, cgc_bench_kernels_fatbin, cgc_bench_kernels_fatbin_size));
  double setup_ms = ms_since(t_start);
  size_t free_before = 0, free_after = 0, device_total = 0;
  CU(cuMemGetInfo(&free_before, &device_total));
  int64_t t0 = now_ns();
  size_t size = 0;
  void* data = map_file(path, &size);
  cgc_saved_info_t info = {.struct_size = sizeof info};
  CGC(cgc_saved_info(data, size, &info));
  cgc_graph_t* graphs = xmalloc(info.n_graphs * sizeof *graphs);
  cgc_pool_t* pools = xmalloc(info.n_pools * sizeof *pools);
  cgc_restore_options_t options = {
      .struct_size = sizeof options, .flags = families ? CGC_RESTORE_FAMILIES : 0, .threads = threads};
  CGC(cgc_graphs_restore(ctx, data, size, &options, graphs, info.n_graphs, pools, info.n_pools));
  double restore_ms = ms_since(t0);
  CGC(cgc_graph_launch(graphs[0], stream));
  CGC(cgc_stream_synchronize(stream));
  double first_launch_ms = ms_since(t0);
  size_t ref_size = 0;
  char ref_path[4096];
  snprintf(ref_path, sizeof ref_path, "%s.ref", path);
  unsigned char* ref_bytes = read_file(ref_path, &ref_size);
  double capture_ms;
  memcpy(&capture_ms, ref_bytes, sizeof capture_ms);
  const ref_entry_t* ref = (const ref_entry_t*)(ref_bytes + sizeof capture_ms);
  if (ref_size != sizeof capture_ms + info.n_graphs * sizeof *ref) fail_with("%s does not match %s", ref_path, path);
  /* Every output is zeroed first, so only the restored graph's replay can make it right. */
  for (size_t g = 1; g < info.n_graphs; g++) CGC(cgc_memset_d32_async((void*)(uintptr_t)ref[g].out, 0, ref[g].bytes / 4, stream));
  int64_t t_launch = now_ns();
  for (size_t g = 1; g < info.n_graphs; g++) CGC(cgc_graph_launch(graphs[g], stream));
  double launches_ms = ms_since(t_launch);
  CGC(cgc_stream_synchronize(stream));
  CU(cuMemGetInfo(&free_after, &device_total));
  /* The graph launched last, again: each launch timed alone, the stream drained before it. */
  double* again = new_samples(100);
  for (int i = 0; i < 100; i++) {
    int64_t t_again = now_ns();
    CGC(cgc_graph_launch(graphs[info.n_graphs - 1], stream));
    again[i] = (double)(now_ns() - t_again) / 1e3;
    CGC(cgc_stream_synchronize(stream));
  }
  double again_us = summarize(again, 100).median;
  CUgraphExec ran = (CUgraphExec)cgc_graph_native_exec(graphs[info.n_graphs - 1]);
  for (int i = 0; i < 100; i++) {
    int64_t t_raw = now_ns();
    CU(cuGraphLaunch(ran, (CUstream)cgc_stream_native(stream)));
    again[i] = (double)(now_ns() - t_raw) / 1e3;
    CGC(cgc_stream_synchronize(stream));
  }
  double raw_us = summarize(again, 100).median;
  free(again);
  size_t executables = 0;
  for (size_t g = 0; g < info.n_graphs; g++) {
    bool seen = false;
    for (size_t h = 0; h < g && !seen; h++) seen = cgc_graph_native_exec(graphs[h]) == cgc_graph_native_exec(graphs[g]);
    executables += !seen;
  }
  int wrong = 0;
  for (size_t g = 0; g < info.n_graphs; g++) wrong += checksum_of(ref[g].out, ref[g].bytes) != ref[g].checksum;
  bench_failed_checks += wrong;
  printf("saved_graphs restore%s (threads option %u): %zu graphs, %zu nodes, %.1f MiB file (%.2f MiB of embedded "
         "images), pools %.1f MiB\n",
         families ? " --families" : "", threads, info.n_graphs, info.n_nodes, (double)size / MIB, (double)info.image_bytes / MIB, (double)info.pool_bytes / MIB);
  printf("  context + stream + added image (not counted): %.1f ms\n", setup_ms);
  printf("  read + restore: %.1f ms (%.3f ms a graph)\n", restore_ms, restore_ms / info.n_graphs);
  printf("  read + restore + first launch done: %.1f ms\n", first_launch_ms);
  printf("  the saving process's capture + instantiate: %.1f ms; restore to first launch / that: %.2f\n", capture_ms,
         first_launch_ms / capture_ms);
  printf("  outputs byte-equal to the saving process's: %zu of %zu\n", info.n_graphs - (size_t)wrong, info.n_graphs);
  printf("  executables: %zu%s; launching the other %zu graphs once: %.1f ms on the host (%.3f ms a launch); one "
         "graph launched again: %.1f us a launch, cuGraphLaunch of the executable it ran: %.1f us (medians)\n",
         executables, families ? " (families)" : "", info.n_graphs - 1, launches_ms,
         launches_ms / (double)(info.n_graphs > 1 ? info.n_graphs - 1 : 1), again_us, raw_us);
  size_t predicted = info.pool_bytes + (families ? info.family_restore_bytes : info.restore_bytes);
  double took_mib = ((double)free_before - (double)free_after) / MIB;
  printf("  device memory: saved_info predicted %.1f MiB (pools %.1f%s), the restore and every graph's first launch "
         "took %.1f MiB (cuMemGetInfo): %+.1f MiB\n",
         (double)predicted / MIB, (double)info.pool_bytes / MIB,
         info.restore_bytes ? (families ? " + modules and executables as families" : " + modules and executables")
                            : "; unverified: pools only",
         took_mib, took_mib - (double)predicted / MIB);
  for (size_t g = 0; g < info.n_graphs; g++) CGC(cgc_graph_destroy(graphs[g]));
  for (size_t g = 0; g < info.n_graphs; g++) CGC(cgc_free((void*)(uintptr_t)ref[g].out));
  for (size_t p = 0; p < info.n_pools; p++) CGC(cgc_pool_release(pools[p]));
  free(graphs);
  free(pools);
  munmap(data, size);
  free(ref_bytes);
  return bench_failed_checks ? 3 : 0;
}

int main(int argc, char** argv) {
  bench_tool = "saved_graphs";
  int n_graphs = 256, n_nodes = 1000;
  if (argc < 3 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "restore") != 0)) {
    fprintf(stderr, "usage: saved_graphs save FILE [--graphs N] [--nodes K] [--verify] | saved_graphs restore FILE "
                    "[--families] [--threads T]\n");
    return 2;
  }
  bool families = false, verify = false;
  unsigned threads = 0;
  for (int i = 3; i < argc; i++) {
    if (strcmp(argv[i], "--families") == 0) families = true;
    else if (strcmp(argv[i], "--verify") == 0) verify = true;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = (unsigned)atoi(argv[++i]);
    else if (strcmp(argv[i], "--graphs") == 0 && i + 1 < argc) n_graphs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) n_nodes = atoi(argv[++i]);
    else {
      fprintf(stderr, "saved_graphs: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (n_graphs < 1 || n_nodes < 1) {
    fprintf(stderr, "saved_graphs: --graphs and --nodes take positive counts\n");
    return 2;
  }
  CUdevice dev;
  CUcontext primary;
  if (!bench_enter_device("saved_graphs", &dev, &primary)) return 1;
  return strcmp(argv[1], "save") == 0 ? save(argv[2], n_graphs, n_nodes, verify) : restore(argv[2], families, threads);
}
