/* Modules and kernels of the caller's own: load an image, find a kernel by name, read and set
 * its attributes, launch it eagerly or into a capture.
 *
 * The code of a module outlives its handle while graphs need it: a kernel node refers to the
 * loaded function, and unloading the module under a graph would make its next replay fail (or
 * worse). The handle holds one reference on the loaded code, and each capture that launched
 * one of its kernels holds another through the use table (the graph takes it over and drops it
 * at reset, after the last replay). Function handles belong to the module handle and die with
 * it; the code they named stays loaded as long as a graph holds it. */
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

/* The loaded code, shared by the handle and the graphs that launch its kernels. */
struct module_code {
  struct cgc__device* dev;
  CUmodule cu;
  atomic_int refs;
  /* The last capture a launch recorded a use of the code in: later launches into that capture
   * skip the registry (capture ids are never reused, so a stale value only costs a lookup). */
  atomic_uint_fast64_t held_by_capture;
};

struct cgc_function_s {
  uint32_t magic;
  struct module_code* code;
  CUfunction cu;
  struct cgc_function_s* next; /* the module's list, guarded by its functions_lock */
  char name[];
};

struct cgc_module_s {
  uint32_t magic;
  struct module_code* code;
  /* Guards `functions`. Held across cuModuleGetFunction and the context push around it, which
   * may load the kernel (an allocation) but take no lock of cgc's: no cgc lock is taken under
   * it, and neither malloc, free nor launch paths take it. */
  pthread_mutex_t functions_lock;
  struct cgc_function_s* functions;
};

_Static_assert((int)CGC_FUNC_MAX_THREADS_PER_BLOCK == (int)CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK &&
                   (int)CGC_FUNC_NUM_REGS == (int)CU_FUNC_ATTRIBUTE_NUM_REGS &&
                   (int)CGC_FUNC_CACHE_MODE_CA == (int)CU_FUNC_ATTRIBUTE_CACHE_MODE_CA &&
                   (int)CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES == (int)CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
                   (int)CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT == (int)CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
               "cgc_function_attribute_t has the driver's CUfunction_attribute values");

static void code_retain(void* object) {
  atomic_fetch_add_explicit(&((struct module_code*)object)->refs, 1, memory_order_relaxed);
}

/* The last reference unloads the code, in Relaxed mode (it may synchronise). */
static void code_release(void* object) {
  struct module_code* code = object;
  if (atomic_fetch_sub_explicit(&code->refs, 1, memory_order_acq_rel) != 1) return;
  cgc__ctx_scope_t scope;
  if (cgc__ctx_enter(code->dev, &scope, "cgc_module_unload") == CGC_SUCCESS) {
    CUresult r;
    CGC_RELAXED(r = CGC_DRV(cuModuleUnload)(code->cu));
    cgc__ctx_leave(&scope);
    if (r != CUDA_SUCCESS) cgc__log("cuModuleUnload failed (CUresult %d): the module's code stays loaded", (int)r);
  }
  free(code);
}

static uint64_t code_capture_done(void* object, bool kept) {
  (void)object;
  (void)kept;
  return 0;
}

static const cgc__use_ops_t code_use_ops = {
    .kind = "module",
    .retain = code_retain,
    .release = code_release,
    .capture_done = code_capture_done,
    .before_launch = NULL,
    .release_after_replays = true, /* a running replay still executes its kernels */
};

cgc_status_t cgc_module_load(cgc_context_t ctx, const void* image, cgc_module_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(image != NULL, "image is NULL");
  cgc_module_t m = calloc(1, sizeof *m);
  struct module_code* code = calloc(1, sizeof *code);
  if (m == NULL || code == NULL) {
    free(m);
    free(code);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__ctx_enter(ctx->dev, &scope, __func__), fail);
  /* PTX is compiled here: keep the compiler's error log for the message. */
  char log[2048] = "";
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, (void*)(uintptr_t)sizeof log};
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuModuleLoadDataEx)(&code->cu, image, 2, options, values));
  cgc__ctx_leave(&scope);
  st = cgc__cu_fail(r, __func__, "cuModuleLoadDataEx");
  if (st != CGC_SUCCESS) {
    if (log[0] != '\0') cgc__append("; the compiler said: %.1500s", log);
    goto fail;
  }
  code->dev = ctx->dev;
  atomic_init(&code->refs, 1); /* the handle's */
  atomic_init(&code->held_by_capture, 0);
  m->magic = CGC_MAGIC_MODULE;
  m->code = code;
  pthread_mutex_init(&m->functions_lock, NULL);
  *out = m;
  return CGC_SUCCESS;

fail:
  free(m);
  free(code);
  return st;
}

cgc_status_t cgc_module_unload(cgc_module_t module) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(module, CGC_MAGIC_MODULE);
  if (cgc__host_function_depth > 0) return cgc__refuse_in_host_function(__func__);
  cgc__mutex_lock(&module->functions_lock, CGC__LOCK_FUNCTIONS);
  struct cgc_function_s* f = module->functions;
  module->functions = NULL;
  cgc__mutex_unlock(&module->functions_lock, CGC__LOCK_FUNCTIONS);
  while (f != NULL) {
    struct cgc_function_s* next = f->next;
    cgc__retire(f);
    f = next;
  }
  code_release(module->code);
  pthread_mutex_destroy(&module->functions_lock);
  cgc__retire(module);
  return CGC_SUCCESS;
}

cgc_status_t cgc_module_get_function(cgc_module_t module, const char* name, cgc_function_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(module, CGC_MAGIC_MODULE);
  CGC_CHECK_ARG(name != NULL && name[0] != '\0', "name is NULL or empty");
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&module->functions_lock, CGC__LOCK_FUNCTIONS);
  struct cgc_function_s* f = module->functions;
  while (f != NULL && strcmp(f->name, name) != 0) f = f->next;
  cgc__ctx_scope_t scope = {false};
  if (f == NULL) {
    CGC_TRY_GOTO(st, cgc__ctx_enter(module->code->dev, &scope, __func__), out);
    CUfunction cu = NULL;
    /* With lazy loading (the driver's default since CUDA 12.2) this loads the kernel, which
     * allocates device memory: Relaxed mode, so that no Global capture on any thread breaks. */
    CUresult r;
    CGC_RELAXED(r = CGC_DRV(cuModuleGetFunction)(&cu, module->code->cu, name));
    if (r == CUDA_ERROR_NOT_FOUND) {
      st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "the module has no kernel named '%s' (C++ kernels need extern \"C\" or their mangled name)", name);
    } else if (r != CUDA_SUCCESS) {
      st = cgc__cu_fail(r, __func__, "cuModuleGetFunction");
    } else {
      size_t len = strlen(name);
      f = calloc(1, sizeof *f + len + 1);
      if (f == NULL) {
        st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
      } else {
        memcpy(f->name, name, len + 1);
        f->magic = CGC_MAGIC_FUNCTION;
        f->code = module->code;
        f->cu = cu;
        f->next = module->functions;
        module->functions = f;
      }
    }
  }
out:
  cgc__ctx_leave(&scope);
  cgc__mutex_unlock(&module->functions_lock, CGC__LOCK_FUNCTIONS);
  if (st == CGC_SUCCESS) *out = f;
  return st;
}

cgc_status_t cgc_function_get_attribute(cgc_function_t function, cgc_function_attribute_t attribute, int* value) {
  CGC_CHECK_ARG(value != NULL, "value is NULL");
  *value = 0;
  CGC_CHECK_HANDLE(function, CGC_MAGIC_FUNCTION);
  CGC_CHECK_ARG(attribute >= CGC_FUNC_MAX_THREADS_PER_BLOCK && attribute <= CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT,
                "attribute %d is not a cgc_function_attribute_t", (int)attribute);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(function->code->dev, &scope, __func__));
  cgc_status_t st;
  /* Relaxed mode: this may load the kernel, as above. */
  CGC_RELAXED(st = CGC_CU(__func__, cuFuncGetAttribute(value, (CUfunction_attribute)attribute, function->cu)));
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_function_set_attribute(cgc_function_t function, cgc_function_attribute_t attribute, int value) {
  CGC_CHECK_HANDLE(function, CGC_MAGIC_FUNCTION);
  CGC_CHECK_ARG(attribute == CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES || attribute == CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT,
                "attribute %d cannot be set (only CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES and "
                "CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT can)",
                (int)attribute);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(function->code->dev, &scope, __func__));
  cgc_status_t st;
  /* Relaxed mode: this may load the kernel, as above. */
  CGC_RELAXED(st = CGC_CU(__func__, cuFuncSetAttribute(function->cu, (CUfunction_attribute)attribute, value)));
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) cgc__append(" (value %d)", value);
  return st;
}

cgc_status_t cgc_launch_kernel(cgc_function_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                               uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                               cgc_stream_t stream, void** args) {
  CGC_CHECK_HANDLE(function, CGC_MAGIC_FUNCTION);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_ARG(grid_x != 0 && grid_y != 0 && grid_z != 0, "the grid (%u, %u, %u) has a zero dimension", grid_x, grid_y,
                grid_z);
  CGC_CHECK_ARG(block_x != 0 && block_y != 0 && block_z != 0, "the block (%u, %u, %u) has a zero dimension", block_x,
                block_y, block_z);
  if (function->code->dev != stream->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "the function's module is loaded on device %d, stream %p is on device %d",
                     function->code->dev->ordinal, (void*)stream->cu, stream->dev->ordinal);
  cgc__stream_ref_t ref;
  cgc__ctx_scope_t scope;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__enqueue_begin(stream, CGC__ASK_WHILE_CAPTURES, &ref, &scope, __func__), out);
  /* Captured into a cgc capture: its graph keeps the module's code loaded. (In a capture begun
   * with the driver alone the caller keeps the module loaded as long as that graph lives.) */
  struct module_code* code = function->code;
  if (ref.capturing && !ref.invalidated &&
      atomic_load_explicit(&code->held_by_capture, memory_order_relaxed) != ref.capture_id &&
      cgc__registry_is_cgc_capture(ref.capture_id)) {
    CGC_TRY_GOTO(st, cgc__registry_add_use(ref.capture_id, &code_use_ops, code, __func__), out);
    atomic_store_explicit(&code->held_by_capture, ref.capture_id, memory_order_relaxed);
  }
  st = CGC_CU(__func__, cuLaunchKernel(function->cu, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                                       ref.cu, args, NULL));
  if (st != CGC_SUCCESS)
    cgc__append(" (kernel '%s', grid %u x %u x %u, block %u x %u x %u, %u bytes of shared memory)", function->name,
                grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes);
out:
  cgc__ctx_leave(&scope);
  return st;
}
