/* NCCL, loaded at run time: libnccl.so.2 is dlopen'ed once on first use (CGC_NCCL_LIBRARY=<path>
 * names another file; then the usual install locations are tried). Capturing collectives needs
 * NCCL >= 2.9.6; older or missing NCCL makes every NCCL entry point return
 * CGC_ERROR_NCCL_UNAVAILABLE (SEMANTICS 20). Graph mixing is decided here, before NCCL loads. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/nccl_lib.h"

cgc__nccl_table_t cgc__nccl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void* nccl_library; /* the dlopen handle, kept for the life of the process */
static cgc_status_t load_status = CGC_ERROR_INTERNAL;
static char load_message[1024];

static void* open_nccl(char* tried, size_t tried_size) {
  const char* candidates[] = {
      getenv("CGC_NCCL_LIBRARY"),
      "libnccl.so.2",
      "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
      "/usr/local/cuda/lib/libnccl.so.2",
      "/usr/local/cuda/lib64/libnccl.so.2",
      "/usr/local/nccl/lib/libnccl.so.2",
  };
  return cgc__open_library(candidates, sizeof candidates / sizeof *candidates, tried, tried_size);
}

/* NCCL_GRAPH_MIXING_SUPPORT=0 as NCCL will read it (once, at its first use; set before it loads). */
static bool mixing_off;

/* CGC_NCCL_GRAPH_MIXING=off turns NCCL's graph mixing off for the process, unless the user set
 * NCCL_GRAPH_MIXING_SUPPORT already (theirs wins). Runs once, before libnccl.so.2 is opened; NCCL
 * reads the variable at its first communicator, so a process that used NCCL before cgc keeps what
 * NCCL read then: cgc says so. */
static void decide_graph_mixing(void) {
  const char* asked = getenv("CGC_NCCL_GRAPH_MIXING");
  const char* nccl_setting = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  if (asked != NULL && (strcmp(asked, "off") == 0 || strcmp(asked, "0") == 0) && nccl_setting == NULL) {
    void* already = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (already != NULL) {
      dlclose(already);
      cgc__log("CGC_NCCL_GRAPH_MIXING=off: libnccl.so.2 was loaded before cgc; if it made a communicator "
               "already, it keeps graph mixing on, and cgc orders nothing");
    } else {
      setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 0);
      nccl_setting = "0";
    }
  }
  mixing_off = nccl_setting != NULL && strtol(nccl_setting, NULL, 0) == 0 && nccl_setting[0] != '\0';
}

/* Decided when the library is loaded: setenv while other threads may call getenv is a race
 * (glibc's environment is not thread-safe), and a program's threads usually start after its
 * libraries load. A program that sets CGC_NCCL_GRAPH_MIXING itself later is read at NCCL's first
 * use, as before. */
static pthread_once_t mixing_once = PTHREAD_ONCE_INIT;
__attribute__((constructor)) static void decide_graph_mixing_at_load(void) {
  if (getenv("CGC_NCCL_GRAPH_MIXING") != NULL) pthread_once(&mixing_once, decide_graph_mixing);
}

static void load_nccl(void) {
  char tried[512] = "";
  pthread_once(&mixing_once, decide_graph_mixing);
  void* lib = open_nccl(tried, sizeof tried);
  if (lib == NULL) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message,
             "NCCL (libnccl.so.2) could not be loaded (tried %s); install NCCL >= 2.9.6 or point "
             "CGC_NCCL_LIBRARY at libnccl.so.2",
             tried);
    return;
  }
  nccl_library = lib;
  const char* missing = NULL;
#define RESOLVE(name, ret, params) \
  if ((*(void**)&cgc__nccl.name = dlsym(lib, #name)) == NULL && missing == NULL) missing = #name;
#define RESOLVE_OPTIONAL(name, ret, params) *(void**)&cgc__nccl.name = dlsym(lib, #name);
  CGC_NCCL_ENTRIES(RESOLVE, RESOLVE_OPTIONAL)
#undef RESOLVE
#undef RESOLVE_OPTIONAL
  if (missing != NULL) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message, "the loaded libnccl.so.2 lacks %s: cgc needs NCCL >= 2.9.6", missing);
    return;
  }
  if (cgc__nccl.ncclGetVersion(&cgc__nccl.version) != 0 || cgc__nccl.version < kMinCaptureVersion) {
    load_status = CGC_ERROR_NCCL_UNAVAILABLE;
    snprintf(load_message, sizeof load_message,
             "NCCL version code %d is too old: capturing collectives needs NCCL >= 2.9.6 (code 20906)", cgc__nccl.version);
    return;
  }
  load_status = CGC_SUCCESS;
}

cgc_status_t cgc__nccl_load(const char* func) {
  pthread_once(&load_once, load_nccl);
  if (load_status == CGC_SUCCESS) return CGC_SUCCESS;
  return cgc__fail(load_status, func, "%s", load_message);
}

cgc_status_t cgc__nccl_fail(ncclResult_t r, ncclComm_t comm, const char* func, const char* call) {
  const char* text = cgc__nccl.ncclGetErrorString ? cgc__nccl.ncclGetErrorString(r) : "unknown NCCL error";
  const char* last = cgc__nccl.ncclGetLastError ? cgc__nccl.ncclGetLastError(comm) : NULL;
  return cgc__fail(CGC_ERROR_NCCL, func, "%s failed: ncclResult %d: %s%s%s%s", call, r, text ? text : "?",
                   last && last[0] ? " (" : "", last && last[0] ? last : "", last && last[0] ? ")" : "");
}
cgc_status_t cgc_nccl_version(int* version) {
  CGC_TRY(cgc__nccl_load(__func__));
  CGC_CHECK_ARG(version != NULL, "version is NULL");
  *version = cgc__nccl.version;
  return CGC_SUCCESS;
}

cgc_status_t cgc_comm_unique_id(cgc_comm_id_t* id) {
  CGC_TRY(cgc__nccl_load(__func__));
  CGC_CHECK_ARG(id != NULL, "id is NULL");
  ncclUniqueId nid;
  ncclResult_t r = cgc__nccl.ncclGetUniqueId(&nid);
  if (r != 0) return cgc__nccl_fail(r, NULL, __func__, "ncclGetUniqueId");
  memcpy(id->internal, nid.internal, sizeof nid.internal);
  return CGC_SUCCESS;
}

bool cgc__nccl_mixing_off(void) { return mixing_off; }
