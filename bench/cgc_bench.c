/* cgc_bench: cgc against the raw CUDA driver, on one GPU, in one run.
 *
 *   bazel run //bench:cgc_bench                     # quick preset: well under a minute
 *   bazel run //bench:cgc_bench -- --full --json /tmp/cgc.json
 *
 * The "raw" side of every comparison calls the driver through the benchmarks' own table
 * (driver.h), resolved at the same versions as cgc's, so the two sides share the driver, the
 * entry points and the process: any difference is cgc's own code. The scenarios are listed in
 * rig.h (BENCH_SCENARIOS), one file each. Every timing is a median and a 90th percentile over
 * many repetitions after warm-up, the two sides interleaved. Host costs are timed with
 * CLOCK_MONOTONIC; GPU durations with CUDA events.
 *
 * Without a GPU (or driver) it prints one line saying so and exits with status 1. Any failed
 * cgc or driver call prints the call and cgc_last_error() and exits with status 2; a wrong
 * replay result is reported as FAIL and makes the exit status 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/rig.h"

/* The scenario list as a table: number, function, what it compares. */
static const struct {
  unsigned number;
  scenario_fn* run;
  const char* what;
} kScenarios[] = {
#define BENCH_SCENARIO_ENTRY(number, name, what) {number, scenario_##name, what},
    BENCH_SCENARIOS(BENCH_SCENARIO_ENTRY)
#undef BENCH_SCENARIO_ENTRY
};
enum { kScenarioCount = sizeof kScenarios / sizeof kScenarios[0] };

static void usage(FILE* f) {
  fprintf(f,
          "usage: cgc_bench [--quick | --full] [--json FILE] [--scenarios LIST]\n"
          "  --quick           the default: every scenario, finishes in well under a minute\n"
          "  --full            more repetitions and sizes (a few minutes)\n"
          "  --json FILE       also write every figure, the device, driver and cgc versions to FILE\n"
          "  --scenarios LIST  run only these, e.g. 1,3,5:\n");
  for (unsigned k = 0; k < kScenarioCount; k++) fprintf(f, "      %u  %s\n", kScenarios[k].number, kScenarios[k].what);
  fprintf(f, "Exit status: 0 done, 1 no GPU, 2 a cgc or driver call failed, 3 a replay gave a wrong result.\n");
}

static bool parse_args(int argc, char** argv, opts_t* o) {
  o->full = false;
  o->json_path = NULL;
  o->scenarios = ((1u << kScenarioCount) - 1) << 1; /* all of them */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      o->full = false;
    } else if (strcmp(argv[i], "--full") == 0) {
      o->full = true;
    } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      o->json_path = argv[++i];
    } else if (strcmp(argv[i], "--scenarios") == 0 && i + 1 < argc) {
      o->scenarios = 0;
      for (char* p = argv[++i]; *p;) {
        char* endp;
        unsigned long k = strtoul(p, &endp, 10);
        if (endp == p || k < 1 || k > kScenarioCount) {
          fprintf(stderr, "cgc_bench: --scenarios takes numbers 1 to %d separated by commas\n", kScenarioCount);
          return false;
        }
        o->scenarios |= 1u << k;
        p = *endp == ',' ? endp + 1 : endp;
        if (*endp != ',' && *endp != '\0') {
          fprintf(stderr, "cgc_bench: --scenarios takes numbers 1 to %d separated by commas\n", kScenarioCount);
          return false;
        }
      }
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "cgc_bench: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return false;
    }
  }
  return true;
}

static void print_summary(const targets_t* t) {
  printf("\n== Targets\n");
  if (t->have_launch)
    printf("launch cost, cgc / raw <= 1.05:            worst %.3f  %s\n", t->launch_worst_ratio,
           t->launch_worst_ratio <= 1.05 ? "met" : "MISSED");
  if (t->have_capture)
    printf("capture + instantiate, cgc / raw <= 1.05:  worst %.3f  %s\n", t->capture_worst_ratio,
           t->capture_worst_ratio <= 1.05 ? "met" : "MISSED");
  if (t->have_mixed)
    printf("mixed graph capture, cgc / raw <= 1.05:   worst %.3f  %s\n", t->mixed_worst_ratio,
           t->mixed_worst_ratio <= 1.05 ? "met" : "MISSED");
  if (t->have_update)
    printf("capture + update / capture + inst <= 0.5:  worst %.3f (1000 nodes and up)  %s\n", t->update_worst_ratio,
           t->update_worst_ratio <= 0.5 ? "met" : "MISSED");
  if (t->have_update_step)
    printf("update step / instantiation step <= 0.1:   worst %.3f  %s\n", t->update_step_worst_ratio,
           t->update_step_worst_ratio <= 0.1 ? "met" : "MISSED");
  if (t->have_loop)
    printf("device loop (body sets its condition) at K = 64, host <= 0.1x, GPU <= 1x: host %.3f, GPU %.3f  %s\n", t->loop_host_ratio,
           t->loop_gpu_ratio, t->loop_host_ratio <= 0.1 && t->loop_gpu_ratio <= 1.0 ? "met" : "MISSED");
  if (t->have_alloc)
    printf("allocator pair on a hit < 100 ns:           worst %.1f ns  %s\n", t->alloc_worst_ns,
           t->alloc_worst_ns < 100 ? "met" : "MISSED");
  if (t->have_memory)
    printf("35 graphs largest first / largest <= 1.05: %.3f  %s  (outputs freed after capture: %.3f)\n",
           t->memory_ratio, t->memory_ratio <= 1.05 ? "met" : "MISSED", t->memory_ratio_released);
}

int main(int argc, char** argv) {
  bench_tool = "cgc_bench";
  opts_t o;
  if (!parse_args(argc, argv, &o)) return 2;

  /* Without a GPU or driver, say so and stop: first as cgc sees it, then our own table. */
  int devices = 0;
  cgc_status_t st = cgc_device_count(&devices);
  if (st != CGC_SUCCESS || devices <= 0) {
    const char* why = cgc_last_error();
    printf("cgc_bench: no GPU, nothing to measure (cgc_device_count: %s%s%s)\n", cgc_status_string(st),
           why[0] ? " -- " : "", why);
    return 1;
  }
  char why[512];
  if (!bench_driver_load(why, sizeof why)) {
    printf("cgc_bench: no GPU, nothing to measure (%s)\n", why);
    return 1;
  }

  int64_t t_start = now_ns();
  rig_t r;
  memset(&r, 0, sizeof r);
  CGC(cgc_context_create(0, &r.ctx));
  CU(cuDeviceGet(&r.dev, 0));
  CU(cuDeviceGetName(r.device_name, (int)sizeof r.device_name, r.dev));
  /* Our own launches and raw driver calls need the device's primary context current, the one
   * cgc uses: retain it and make it current on this thread (cgc then never switches). */
  CU(cuDevicePrimaryCtxRetain(&r.primary, r.dev));
  CU(cuCtxPushCurrent(r.primary));
  CU(cuModuleLoadData(&r.module, cgc_bench_kernels_fatbin));
  CU(cuModuleGetFunction(&r.k_lcg, r.module, "cgc_bench_lcg"));
  CU(cuModuleGetFunction(&r.k_layer, r.module, "cgc_bench_layer"));
  CGC(cgc_stream_create(r.ctx, CGC_STREAM_NON_BLOCKING, 0, &r.s));
  r.cs = (CUstream)cgc_stream_native(r.s);

  uint32_t v = cgc_version();
  char version[32];
  snprintf(version, sizeof version, "%u.%u.%u", v >> 16, (v >> 8) & 0xffu, v & 0xffu);
  printf("cgc_bench (%s preset): %s, driver %d.%d (%d), cgc %s%s\n", o.full ? "full" : "quick", r.device_name,
         drv.version / 1000, (drv.version % 1000) / 10, drv.version, version,
         v == CGC_VERSION ? "" : " (WARNING: the header's CGC_VERSION differs)");
  printf("medians and 90th percentiles over repetitions after warm-up; cgc and raw runs interleaved\n");
  fflush(stdout);

  json_t j;
  json_begin(&j);
  jstr(&j, "tool", "cgc_bench");
  jstr(&j, "preset", o.full ? "full" : "quick");
  jstr(&j, "device", r.device_name);
  jint(&j, "driver_version", drv.version);
  jstr(&j, "cgc_version", version);
  jint(&j, "cgc_version_code", v);

  targets_t t;
  memset(&t, 0, sizeof t);
  for (unsigned k = 0; k < kScenarioCount; k++) {
    if (!(o.scenarios & (1u << kScenarios[k].number))) continue;
    int64_t t0 = now_ns();
    kScenarios[k].run(&r, &o, &j, &t);
    printf("(scenario %u took %.1f s)\n", kScenarios[k].number, (double)(now_ns() - t0) / 1e9);
    fflush(stdout);
  }
  print_summary(&t);

  double seconds = (double)(now_ns() - t_start) / 1e9;
  jint(&j, "failed_checks", bench_failed_checks);
  jnum(&j, "seconds", seconds);
  if (!json_finish(&j, o.json_path)) {
    fprintf(stderr, "cgc_bench: cannot write %s\n", o.json_path);
    return 2;
  }
  if (o.json_path != NULL) printf("figures written to %s\n", o.json_path);

  CGC(cgc_stream_destroy(r.s));
  CU(cuModuleUnload(r.module));
  CGC(cgc_context_destroy(r.ctx));
  CUcontext popped;
  CU(cuCtxPopCurrent(&popped));
  CU(cuDevicePrimaryCtxRelease(r.dev));

  printf("done in %.1f s%s\n", seconds, bench_failed_checks ? "; SOME REPLAY RESULTS WERE WRONG" : "");
  return bench_failed_checks ? 3 : 0;
}
