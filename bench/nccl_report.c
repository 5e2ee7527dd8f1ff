/* nccl_bench's report: the run's facts before the ranks start, then rank 0's figures per kind as
 * tables (1-op, 100-op host and GPU, the breakdown, the graphs' nodes) and the same figures as
 * JSON (--json). Only the parent prints, once the ranks have ended. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench/nccl_bench.h"

static double ratio(summary_t a, summary_t b) { return a.median > 0 && b.median > 0 ? a.median / b.median : NAN; }

static const char* memory_name(cgc_nccl_memory_t m) {
  return (unsigned)m < kKinds ? kKindName[m] : "?";
}

/* "symmetric", or "symmetric (cgc got registered)" when an older NCCL gave cgc's pool less. */
static void kind_label(char* buf, size_t cap, int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  if ((int)kr->cgc_got == kind) snprintf(buf, cap, "%s", kKindName[kind]);
  else snprintf(buf, cap, "%s (cgc got %s)", kKindName[kind], memory_name(kr->cgc_got));
}

static void print_cell(summary_t s, bool present) {
  if (present) printf(" | %8.2f / %8.2f", s.median, s.p90);
  else printf(" | %19s", "-");
}

static void print_ratio(double v) {
  if (v == v) printf(" | %9.3f", v);
  else printf(" | %9s", "-");
}

/* One of a kind's tables: rows are sizes, cells median / p90 per op, then the ratios of medians,
 * and the checks of `phase` (none when negative). */
static void print_table(int kind, const char* title, int which, int phase) {
  kind_result_t* kr = &sh->kind[kind];
  printf("\n%s, us (median / p90)\n", title);
  printf("%-8s", "size");
  for (int op = 0; op < kOps; op++) printf(" | %19s", kOpLabel[op]);
  printf(" | %9s | %9s | %9s%s\n", "graph c/r", "eager c/r", "gr/eager", phase >= 0 ? " | check" : "");
  for (int s = 0; s < kSizes; s++) {
    size_result_t* sr = &kr->size[s];
    if (!sr->measured) continue;
    const summary_t* row = which == 0 ? sr->one : which == 1 ? sr->hundred : sr->hundred_gpu;
    char b[32];
    bytes_label(b, sizeof b, kSizeBytes[s]);
    printf("%-8s", b);
    for (int op = 0; op < kOps; op++) print_cell(row[op], kr->raw || (op != OP_RAW_EAGER && op != OP_RAW_GRAPH));
    print_ratio(kr->raw ? ratio(row[OP_GRAPH], row[OP_RAW_GRAPH]) : NAN);
    print_ratio(kr->raw ? ratio(row[OP_EAGER], row[OP_RAW_EAGER]) : NAN);
    print_ratio(ratio(row[OP_GRAPH], row[OP_EAGER]));
    int wrong = 0;
    for (int op = 0; phase >= 0 && op < kOps; op++) wrong += atomic_load(&sr->wrong[phase][op]);
    if (phase < 0) printf("\n");
    else if (wrong == 0) printf(" | ok\n");
    else printf(" | WRONG SUM (%d)\n", wrong);
  }
}

static void print_breakdown(int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  bool any = false;
  for (int s = 0; s < kSizes; s++) any = any || kr->size[s].has_breakdown;
  if (!any) return;
  printf("\nbreakdown of one all-reduce, us (median / p90): the launch call alone; the sync call alone; GPU time\n"
         "(events around the launch); launch + polling the stream until done in place of the blocking sync;\n"
         "launch + blocking sync from the 1-op table (median)\n");
  printf("%-8s | %-9s | %19s | %19s | %19s | %19s | %8s\n", "size", "variant", "launch", "sync", "GPU",
         "launch + spin", "blocking");
  for (int s = 0; s < kSizes; s++) {
    const size_result_t* sr = &kr->size[s];
    if (!sr->has_breakdown) continue;
    char b[32];
    bytes_label(b, sizeof b, kSizeBytes[s]);
    for (int op = 0; op < kOps; op++) {
      if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
      const breakdown_t* bd = &sr->breakdown[op];
      printf("%-8s | %-9s", op == 0 ? b : "", kOpLabel[op]);
      print_cell(bd->launch, true);
      print_cell(bd->sync, true);
      print_cell(bd->gpu, true);
      print_cell(bd->spin, true);
      printf(" | %8.2f\n", sr->one[op].median);
    }
  }
}

/* "kernel 1, host 0, event wait 0, event record 1 (2 nodes)": every type present, and the host
 * and event types always, since whether NCCL adds them is the question. */
static void census_text(const census_t* c, char* buf, size_t cap) {
  size_t len = 0;
  int total = 0;
  buf[0] = '\0';
  for (int t = 0; t <= kNodeTypes; t++) {
    total += c->nodes[t];
    bool always = t == CU_GRAPH_NODE_TYPE_HOST || t == CU_GRAPH_NODE_TYPE_WAIT_EVENT ||
                  t == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    if (c->nodes[t] == 0 && !always) continue;
    int w = snprintf(buf + len, cap - len, "%s%s %d", len ? ", " : "", kNodeTypeName[t], c->nodes[t]);
    if (w < 0 || (size_t)w >= cap - len) return;
    len += (size_t)w;
  }
  snprintf(buf + len, cap - len, " (%d node%s)", total, total == 1 ? "" : "s");
}

static bool same_census(const census_t* a, const census_t* b) {
  return memcmp(a->nodes, b->nodes, sizeof a->nodes) == 0;
}

/* Each graph's census at the first size, and at any later size where it differs. */
static void print_census(int kind) {
  const kind_result_t* kr = &sh->kind[kind];
  printf("\ngraph nodes by type (cgc's graphs hold, besides NCCL's nodes, one event record node of cgc's\n"
         "own: its completion record):\n");
  for (int g = 0; g < kGraphs; g++) {
    const census_t* shown = NULL;
    for (int s = 0; s < kSizes; s++) {
      const census_t* c = &kr->size[s].census[g];
      if (!kr->size[s].measured || !c->taken || (shown != NULL && same_census(shown, c))) continue;
      char text[400], b[32];
      census_text(c, text, sizeof text);
      bytes_label(b, sizeof b, kSizeBytes[s]);
      printf("  %-13s %-4s %-7s %s\n", shown == NULL ? kGraphLabel[g] : "", shown == NULL ? "at" : "from", b, text);
      shown = c;
    }
  }
}

void print_header(void) {
  uint32_t v = sh->cgc_version;
  int nv = sh->nccl_version;
  size_t largest = kSizeBytes[0];
  for (int s = 0; s < kSizes; s++)
    if (size_wanted(s)) largest = kSizeBytes[s];
  printf("all_reduce (float32 sum) on %d x %s as %s; NCCL %d.%d.%d, driver %d.%d, cgc %u.%u.%u; NVLS off "
         "(NCCL_NVLS_ENABLE=0), NCCL_GRAPH_MIXING_SUPPORT=%s\n",
         cfg.ranks, sh->device_name, cfg.processes ? "processes" : "threads", nv / 10000, nv % 10000 / 100, nv % 100,
         sh->driver_version / 1000, sh->driver_version % 1000 / 10, v >> 16, (v >> 8) & 0xffu, v & 0xffu,
         sh->mixing);
  printf("timed rounds per size: 1-op %d to %d after %d warm-up, 100-op %d to %d after %d warm-up; rank 0's medians "
         "and p90; cgc and raw alternate\n",
         iters_one(kSizeBytes[0]), iters_one(largest), kWarmupOne, iters_hundred(kSizeBytes[0]), iters_hundred(largest),
         kWarmupHundred);
  fflush(stdout);
}

void print_results(void) {
  for (int kind = 0; kind < kKinds; kind++) {
    const kind_result_t* kr = &sh->kind[kind];
    if (!kr->measured) continue;
    char label[64];
    kind_label(label, sizeof label, kind);
    printf("\n== %s buffers (%s)\n", label, kKindHow[kind]);
    if ((int)kr->cgc_got != kind)
      printf("note: this NCCL gave cgc's pool %s memory where %s was asked\n", memory_name(kr->cgc_got),
             kKindName[kind]);
    if (!kr->raw) printf("note: %s\n", kr->raw_note);
    print_table(kind, "1 all-reduce: launch + stream sync (host)", 0, PHASE_ONE);
    print_table(kind, "100 all-reduces, then one sync: per all-reduce (host)", 1, PHASE_HUNDRED);
    print_table(kind, "100 all-reduces: per all-reduce from events around the launch (GPU)", 2, -1);
    print_breakdown(kind);
    print_census(kind);
  }
}

static void json_summary(json_t* j, const char* op, const char* variant, summary_t s) {
  char key[80];
  snprintf(key, sizeof key, "%s_%s_median", op, variant);
  jnum(j, key, s.median);
  snprintf(key, sizeof key, "%s_%s_p90", op, variant);
  jnum(j, key, s.p90);
}

/* The same figures as the tables, one object per kind and size; returns the failed checks. */
int write_json(void) {
  int failed = 0;
  json_t j;
  json_begin(&j);
  jstr(&j, "tool", "nccl_bench");
  jstr(&j, "device", sh->device_name);
  jint(&j, "ranks", cfg.ranks);
  jstr(&j, "mode", cfg.processes ? "processes" : "threads");
  jint(&j, "nccl_version", sh->nccl_version);
  jint(&j, "driver_version", sh->driver_version);
  jint(&j, "cgc_version_code", sh->cgc_version);
  jstr(&j, "nccl_nvls_enable", "0");
  jstr(&j, "nccl_graph_mixing_support", sh->mixing);
  jstr(&j, "unit", "us; _1: launch + sync of one all-reduce (host); _100: per all-reduce of 100 then one sync "
                   "(host); _100_gpu: per all-reduce from events around the launch");
  jint(&j, "warmup_1", kWarmupOne);
  jint(&j, "warmup_100", kWarmupHundred);
  jopen(&j, "results", '[');
  for (int kind = 0; kind < kKinds; kind++) {
    const kind_result_t* kr = &sh->kind[kind];
    for (int s = 0; s < kSizes; s++) {
      size_result_t* sr = &sh->kind[kind].size[s];
      if (!kr->measured || !sr->measured) continue;
      jopen(&j, NULL, '{');
      jstr(&j, "kind", kKindName[kind]);
      jstr(&j, "cgc_memory", memory_name(kr->cgc_got));
      jbool(&j, "raw_side", kr->raw);
      if (!kr->raw) jstr(&j, "raw_note", kr->raw_note);
      jint(&j, "bytes", (long long)kSizeBytes[s]);
      jint(&j, "iterations_1", sr->iters_one);
      jint(&j, "iterations_100", sr->iters_hundred);
      for (int op = 0; op < kOps; op++) {
        if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
        json_summary(&j, kOpKey[op], "1", sr->one[op]);
        json_summary(&j, kOpKey[op], "100", sr->hundred[op]);
        json_summary(&j, kOpKey[op], "100_gpu", sr->hundred_gpu[op]);
      }
      jnum(&j, "graph_over_eager_1", ratio(sr->one[OP_GRAPH], sr->one[OP_EAGER]));
      jnum(&j, "graph_over_eager_100", ratio(sr->hundred[OP_GRAPH], sr->hundred[OP_EAGER]));
      if (kr->raw) {
        jnum(&j, "cgc_over_raw_graph_1", ratio(sr->one[OP_GRAPH], sr->one[OP_RAW_GRAPH]));
        jnum(&j, "cgc_over_raw_eager_1", ratio(sr->one[OP_EAGER], sr->one[OP_RAW_EAGER]));
        jnum(&j, "cgc_over_raw_graph_100", ratio(sr->hundred[OP_GRAPH], sr->hundred[OP_RAW_GRAPH]));
        jnum(&j, "cgc_over_raw_graph_100_gpu", ratio(sr->hundred_gpu[OP_GRAPH], sr->hundred_gpu[OP_RAW_GRAPH]));
      }
      jopen(&j, "failed_checks", '{');
      for (int phase = 0; phase < kPhases; phase++) {
        int wrong = 0;
        for (int op = 0; op < kOps; op++) wrong += atomic_load(&sr->wrong[phase][op]);
        jint(&j, kPhaseName[phase], wrong);
        failed += wrong;
      }
      jclose(&j, '}');
      if (sr->has_breakdown) {
        jopen(&j, "breakdown", '{');
        for (int op = 0; op < kOps; op++) {
          if (!kr->raw && (op == OP_RAW_EAGER || op == OP_RAW_GRAPH)) continue;
          const breakdown_t* b = &sr->breakdown[op];
          jopen(&j, kOpKey[op], '{');
          json_summary(&j, "launch", "call", b->launch);
          json_summary(&j, "sync", "call", b->sync);
          json_summary(&j, "gpu", "events", b->gpu);
          json_summary(&j, "launch", "spin", b->spin);
          jclose(&j, '}');
        }
        jclose(&j, '}');
      }
      jopen(&j, "nodes", '{');
      for (int g = 0; g < kGraphs; g++) {
        const census_t* c = &sr->census[g];
        if (!c->taken) continue;
        jopen(&j, kGraphKey[g], '{');
        for (int t = 0; t <= kNodeTypes; t++)
          if (c->nodes[t] != 0) jint(&j, kNodeTypeName[t], c->nodes[t]);
        jclose(&j, '}');
      }
      jclose(&j, '}');
      jclose(&j, '}');
    }
  }
  jclose(&j, ']');
  jint(&j, "failed_checks", failed);
  if (!json_finish(&j, cfg.json_path)) fail_with("cannot write %s", cfg.json_path);
  return failed;
}
