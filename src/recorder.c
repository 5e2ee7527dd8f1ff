/* The record of module images (1.6, cgc_module_record): while it is on, every module the driver
 * loads in this process (cuBLAS's, cuDNN's, Triton's, the application's, lazily loaded ones at
 * their first kernel) has its image copied and kept, so that a save can carry the image of a
 * kernel cgc did not load (module.c finds it by name and build, SEMANTICS 38).
 *
 * The images come from CUPTI's resource callback for loaded modules. libcupti is loaded at run
 * time, on the first cgc_module_record(1): CGC_CUPTI_LIBRARY names it, else the usual names and
 * install locations are tried. CUPTI takes one subscriber per process: a profiler that subscribed
 * first (Nsight Systems, the PyTorch profiler, compute-sanitizer) makes the record refused, and the
 * record, while on, makes theirs refused. The few CUPTI declarations cgc uses are written here as
 * CUPTI's headers define them (a stable C interface), so that building needs no CUPTI headers.
 *
 * Locks: `record_lock` (cold) serialises cgc_module_record; the callback runs on whichever thread
 * loads a module, inside the driver, possibly while that thread holds cgc's locks, so it makes no
 * driver call and takes only module.c's leaf lock for recorded images. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

/* ---- CUPTI's interface, as far as cgc uses it ---- */
typedef int cupti_result_t;            /* CUptiResult: CUPTI_SUCCESS 0 */
typedef void* cupti_subscriber_t;      /* CUpti_SubscriberHandle */
typedef uint32_t cupti_callback_id_t;  /* CUpti_CallbackId */
enum {
  kCuptiSuccess = 0,
  kCuptiMultipleSubscribers = 39,   /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
  kCuptiDomainResource = 3,         /* CUPTI_CB_DOMAIN_RESOURCE */
  kCuptiModuleLoaded = 6,           /* CUPTI_CBID_RESOURCE_MODULE_LOADED */
};
typedef struct cupti_resource_data { /* CUpti_ResourceData */
  CUcontext context;
  union {
    CUstream stream;
  } resource_handle;
  void* resource_descriptor;
} cupti_resource_data_t;
typedef struct cupti_module_data { /* CUpti_ModuleResourceData */
  uint32_t module_id;
  size_t cubin_size;
  const char* cubin;
} cupti_module_data_t;
typedef void (*cupti_callback_t)(void* userdata, int domain, cupti_callback_id_t id, const void* data);

static struct {
  cupti_result_t (*subscribe)(cupti_subscriber_t* subscriber, cupti_callback_t callback, void* userdata);
  cupti_result_t (*unsubscribe)(cupti_subscriber_t subscriber);
  cupti_result_t (*enable_callback)(uint32_t enable, cupti_subscriber_t subscriber, int domain,
                                    cupti_callback_id_t id);
  cupti_result_t (*result_string)(cupti_result_t result, const char** text);
} cupti;

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static void* cupti_library;          /* (record_lock) kept for the life of the process once opened */
static cupti_subscriber_t subscriber; /* (record_lock) non-NULL while recording */

static void* open_cupti(char* tried, size_t tried_size) {
  const char* candidates[] = {
      getenv("CGC_CUPTI_LIBRARY"),
      "libcupti.so.13",
      "libcupti.so.12",
      "libcupti.so",
      "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
      "/usr/local/cuda/lib64/libcupti.so",
      "/usr/local/cuda/lib/libcupti.so",
  };
  return cgc__open_library(candidates, sizeof candidates / sizeof *candidates, tried, tried_size);
}

/* libcupti opened and its entry points found (record_lock held). */
static cgc_status_t load_cupti(const char* func) {
  if (cupti_library != NULL) return CGC_SUCCESS;
  char tried[768] = "";
  void* lib = open_cupti(tried, sizeof tried);
  if (lib == NULL)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                     "CUPTI, which records the images of modules others load, could not be opened (tried %s): "
                     "install it with the CUDA toolkit or set CGC_CUPTI_LIBRARY to its path",
                     tried);
  *(void**)&cupti.subscribe = dlsym(lib, "cuptiSubscribe");
  *(void**)&cupti.unsubscribe = dlsym(lib, "cuptiUnsubscribe");
  *(void**)&cupti.enable_callback = dlsym(lib, "cuptiEnableCallback");
  *(void**)&cupti.result_string = dlsym(lib, "cuptiGetResultString");
  if (cupti.subscribe == NULL || cupti.unsubscribe == NULL || cupti.enable_callback == NULL ||
      cupti.result_string == NULL) {
    dlclose(lib);
    memset(&cupti, 0, sizeof cupti);
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "the CUPTI library found lacks cuptiSubscribe or its kin");
  }
  cupti_library = lib;
  return CGC_SUCCESS;
}

static cgc_status_t cupti_fail(cupti_result_t r, const char* func, const char* call) {
  const char* text = NULL;
  if (cupti.result_string(r, &text) != kCuptiSuccess || text == NULL) text = "unknown";
  return cgc__fail(r == kCuptiMultipleSubscribers ? CGC_ERROR_INVALID_STATE : CGC_ERROR_NOT_SUPPORTED, func,
                   "%s failed: CUPTI error %d (%s)%s", call, r, text,
                   r == kCuptiMultipleSubscribers
                       ? ": another CUPTI client (a profiler or sanitizer) is subscribed in this process; CUPTI takes "
                         "one at a time"
                       : "");
}

/* A module loaded: its image kept (no driver call here: the loading thread is inside the driver). */
static void on_module_loaded(void* userdata, int domain, cupti_callback_id_t id, const void* data) {
  (void)userdata;
  if (domain != kCuptiDomainResource || id != kCuptiModuleLoaded || data == NULL) return;
  const cupti_resource_data_t* resource = data;
  const cupti_module_data_t* module = resource->resource_descriptor;
  if (module == NULL || module->cubin == NULL || module->cubin_size == 0) return;
  cgc__module_record_image(module->cubin, module->cubin_size);
}

cgc_status_t cgc_module_record(int on, size_t* images, size_t* bytes) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  if (images != NULL) *images = 0;
  if (bytes != NULL) *bytes = 0;
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&record_lock, CGC__LOCK_RECORD);
  if (on && subscriber == NULL) {
    st = load_cupti(__func__);
    cupti_subscriber_t fresh = NULL;
    cupti_result_t r = kCuptiSuccess;
    if (st == CGC_SUCCESS && (r = cupti.subscribe(&fresh, on_module_loaded, NULL)) != kCuptiSuccess)
      st = cupti_fail(r, __func__, "cuptiSubscribe");
    if (st == CGC_SUCCESS &&
        (r = cupti.enable_callback(1, fresh, kCuptiDomainResource, kCuptiModuleLoaded)) != kCuptiSuccess) {
      st = cupti_fail(r, __func__, "cuptiEnableCallback");
      cupti.unsubscribe(fresh);
    }
    if (st == CGC_SUCCESS) subscriber = fresh;
  } else if (!on && subscriber != NULL) {
    cupti_result_t r = cupti.unsubscribe(subscriber);
    if (r != kCuptiSuccess) st = cupti_fail(r, __func__, "cuptiUnsubscribe");
    else subscriber = NULL;
  }
  cgc__mutex_unlock(&record_lock, CGC__LOCK_RECORD);
  uint64_t n = 0, size = 0;
  cgc__module_recorded(&n, &size);
  if (images != NULL) *images = (size_t)n;
  if (bytes != NULL) *bytes = (size_t)size;
  return st;
}
