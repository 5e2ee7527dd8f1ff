/* Modules and kernels of the caller's own: load an image, find a kernel by name, read and set
 * its attributes, launch it eagerly or into a capture.
 *
 * The code of a module outlives its handle while graphs need it: a kernel node refers to the
 * loaded function, and unloading the module under a graph would make its next replay fail (or
 * worse). The handle holds one reference on the loaded code, and each capture that launched
 * one of its kernels holds another through the use table (the graph takes it over and drops it
 * at reset, after the last replay). Function handles belong to the module handle and die with
 * it; the code they named stays loaded as long as a graph holds it.
 *
 * Since 1.6 the code also keeps a copy of its image, and images can be added by key, so that a
 * saved graph (save.c) names each kernel by module and name and a restore (restore.c) loads the
 * same code again. */
#include <stdio.h>
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
  /* A copy of the image it was loaded from, for saved graphs; NULL when its length could not be
   * told (an image of a kind image_size does not know). Written once, before the code is shared. */
  void* image;
  size_t image_size;
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
  free(code->image);
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

/* ---- images ---- */

static uint64_t read_u64(const unsigned char* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
static uint32_t read_u32(const unsigned char* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
static uint16_t read_u16(const unsigned char* p) {
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* The length of an image the driver has just loaded (so its headers are sound), told from its
 * headers, as cuModuleLoadData tells it: a fatbin's header gives its size; a 64-bit ELF cubin
 * ends with the last of its headers and sections; PTX is text up to its NUL. 0 for a kind not
 * known here (a fatbin wrapper, a 32-bit ELF). */
static size_t image_size(const void* image) {
  const unsigned char* p = image;
  if (read_u32(p) == 0xBA55ED50u) /* fatbin: magic, version (16 bits), header size (16), fat size (64) */
    return (size_t)read_u16(p + 6) + (size_t)read_u64(p + 8);
  if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    if (p[4] != 2) return 0; /* 32-bit ELF: not a CUDA cubin of today */
    uint64_t phoff = read_u64(p + 32), shoff = read_u64(p + 40);
    uint16_t phentsize = read_u16(p + 54), phnum = read_u16(p + 56), shentsize = read_u16(p + 58),
             shnum = read_u16(p + 60);
    uint64_t end = 64;
    if (phoff + (uint64_t)phnum * phentsize > end) end = phoff + (uint64_t)phnum * phentsize;
    if (shoff + (uint64_t)shnum * shentsize > end) end = shoff + (uint64_t)shnum * shentsize;
    for (uint16_t i = 0; i < shnum; i++) {
      const unsigned char* sh = p + shoff + (uint64_t)i * shentsize;
      if (read_u32(sh + 4) == 8) continue; /* SHT_NOBITS: no bytes in the file */
      uint64_t section_end = read_u64(sh + 24) + read_u64(sh + 32);
      if (section_end > end) end = section_end;
    }
    return (size_t)end;
  }
  /* PTX: text from its first byte. */
  if (p[0] == '/' || p[0] == '.' || p[0] == '\n' || p[0] == '\t' || p[0] == ' ' || p[0] == '\r' ||
      (p[0] >= 'a' && p[0] <= 'z'))
    return strlen((const char*)p) + 1;
  return 0;
}

/* image_size for bytes not yet checked by the driver (a saved file's): the length the image's
 * headers give, read only within `size` bytes (which a zero follows); 0 when they do not fit. */
static size_t image_size_within(const unsigned char* p, size_t size) {
  if (size >= 16 && read_u32(p) == 0xBA55ED50u) {
    uint64_t total = (uint64_t)read_u16(p + 6) + read_u64(p + 8);
    return total <= size ? (size_t)total : 0;
  }
  if (size >= 64 && p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    uint64_t shoff = read_u64(p + 40), shentsize = read_u16(p + 58), shnum = read_u16(p + 60);
    if (p[4] != 2 || shentsize < 40 || shoff > size || shnum * shentsize > size - shoff) return 0;
    return image_size(p) <= size ? image_size(p) : 0;
  }
  return strlen((const char*)p) + 1 <= size + 1 ? strlen((const char*)p) + 1 : 0;
}

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
  /* Kept for saved graphs: without it a graph of this module's kernels cannot be saved, which
   * cgc_graphs_save says; the module works the same. */
  code->image_size = image_size(image);
  if (code->image_size > 0 && (code->image = malloc(code->image_size)) != NULL)
    memcpy(code->image, image, code->image_size);
  else
    code->image_size = 0;
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

/* ---- what saved graphs need of modules (1.6) ---- */

/* An image added by key (cgc_module_add_image), for the life of the process, and the module
 * loaded from it on each device where a save looked for a kernel in it. */
struct added_image {
  char key[256]; /* empty for a recorded image */
  void* image;
  size_t size;
  uint64_t hash; /* recorded images: image_hash */
  struct loaded_on {
    struct cgc__device* dev;
    CUmodule cu;
    struct loaded_on* next;
  }* loaded;
  struct added_image* next;
};
/* Guards `added_images` and their `loaded` lists. Held across cuModuleLoadData and
 * cuModuleGetFunction (a save's lookups, an addition's first load), which allocate and, with lazy
 * loading, may wait for the device: a cold lock, which no malloc, free, event record or launch
 * path takes, and under which no other cgc lock is taken. */
static pthread_mutex_t images_lock = PTHREAD_MUTEX_INITIALIZER;
static struct added_image* added_images;

/* Images the record kept (recorder.c, cgc_module_record), newest first, with an empty key: a save
 * embeds a kernel's image found here, as it embeds cgc_module_load's. A node is published whole
 * (release) and never changed or freed after, but for its `loaded` list (images_lock), so a save
 * walks the list without this lock. `recorded_lock` serialises the additions, which the driver's
 * module loads make on any thread: a leaf lock, no driver call under it. */
static pthread_mutex_t recorded_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct added_image*) recorded_images;
static uint64_t recorded_count, recorded_bytes; /* (recorded_lock) */

static uint64_t image_hash(const void* image, size_t size) {
  const unsigned char* p = image;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; i += 64) h = (h ^ p[i]) * 0x100000001b3ull; /* a sample: equal images hash equal */
  return h ^ size;
}

static struct added_image* find_added(const char* key) {
  struct added_image* i = added_images;
  while (i != NULL && strcmp(i->key, key) != 0) i = i->next;
  return i;
}

/* The module of `image` on `dev`, loaded on first need (images_lock held, context current). */
static cgc_status_t added_module_on(struct added_image* image, struct cgc__device* dev, CUmodule* out,
                                    const char* func) {
  for (struct loaded_on* l = image->loaded; l != NULL; l = l->next)
    if (l->dev == dev) {
      *out = l->cu;
      return CGC_SUCCESS;
    }
  struct loaded_on* l = calloc(1, sizeof *l);
  if (l == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  cgc_status_t st;
  CGC_RELAXED(st = CGC_CU(func, cuModuleLoadData(&l->cu, image->image)));
  if (st != CGC_SUCCESS) {
    if (image->key[0] != '\0') cgc__append(" (the image added under key '%s')", image->key);
    else cgc__append(" (a recorded image of %zu bytes)", image->size);
    free(l);
    return st;
  }
  l->dev = dev;
  l->next = image->loaded;
  image->loaded = l;
  *out = l->cu;
  return CGC_SUCCESS;
}

void cgc__module_record_image(const void* image, size_t size) {
  uint64_t hash = image_hash(image, size);
  cgc__mutex_lock(&recorded_lock, CGC__LOCK_RECORDED);
  bool known = false;
  for (struct added_image* i = atomic_load(&recorded_images); i != NULL && !known; i = i->next)
    known = i->hash == hash && i->size == size && memcmp(i->image, image, size) == 0;
  struct added_image* fresh = known ? NULL : calloc(1, sizeof *fresh);
  void* copy = fresh != NULL ? malloc(size + 1) : NULL;
  if (copy != NULL) {
    memcpy(copy, image, size);
    ((unsigned char*)copy)[size] = 0;
    fresh->image = copy;
    fresh->size = size;
    fresh->hash = hash;
    fresh->next = atomic_load(&recorded_images);
    atomic_store_explicit(&recorded_images, fresh, memory_order_release);
    recorded_count++;
    recorded_bytes += size;
  } else {
    free(fresh); /* already kept, or out of memory: this image is not recorded */
  }
  cgc__mutex_unlock(&recorded_lock, CGC__LOCK_RECORDED);
}

void cgc__module_recorded(uint64_t* images, uint64_t* bytes) {
  cgc__mutex_lock(&recorded_lock, CGC__LOCK_RECORDED);
  *images = recorded_count;
  *bytes = recorded_bytes;
  cgc__mutex_unlock(&recorded_lock, CGC__LOCK_RECORDED);
}

cgc_status_t cgc_module_add_image(cgc_context_t ctx, const char* key, const void* image, size_t size) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(key != NULL && key[0] != '\0', "key is NULL or empty");
  CGC_CHECK_ARG(strlen(key) < sizeof ((struct added_image*)0)->key, "key is %zu bytes long (at most %zu)",
                strlen(key), sizeof ((struct added_image*)0)->key - 1);
  CGC_CHECK_ARG(image != NULL && size > 0, "image is NULL or size is 0");
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(ctx->dev, &scope, __func__));
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&images_lock, CGC__LOCK_IMAGES);
  struct added_image* known = find_added(key);
  struct added_image* fresh = NULL;
  if (known != NULL) {
    if (known->size != size || memcmp(known->image, image, size) != 0)
      st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "key '%s' names another image already (%zu bytes; this one has %zu): choose another key", key,
                     known->size, size);
    goto out;
  }
  fresh = calloc(1, sizeof *fresh);
  /* One byte more, zeroed: a PTX image given without its NUL still ends as text. */
  void* copy = fresh != NULL ? calloc(1, size + 1) : NULL;
  if (copy == NULL) {
    free(fresh);
    fresh = NULL;
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto out;
  }
  memcpy(copy, image, size);
  memcpy(fresh->key, key, strlen(key) + 1);
  fresh->image = copy;
  fresh->size = size;
  /* Loaded once now, so that an image the driver cannot load is refused here, not at a save. */
  CUmodule unused;
  st = added_module_on(fresh, ctx->dev, &unused, __func__);
  if (st != CGC_SUCCESS) {
    free(copy);
    free(fresh);
    goto out;
  }
  fresh->next = added_images;
  added_images = fresh;
out:
  cgc__mutex_unlock(&images_lock, CGC__LOCK_IMAGES);
  cgc__ctx_leave(&scope);
  return st;
}

const void* cgc__module_added_image(const char* key, size_t* size) {
  cgc__mutex_lock(&images_lock, CGC__LOCK_IMAGES);
  struct added_image* i = find_added(key);
  cgc__mutex_unlock(&images_lock, CGC__LOCK_IMAGES);
  *size = i != NULL ? i->size : 0;
  return i != NULL ? i->image : NULL; /* never freed */
}

/* The attributes that tell two builds of a kernel apart, compared at a save (an added image's
 * kernel of the same name) and at a restore. */
#define CGC_KERNEL_IDENTITY(X)                          \
  X(registers, CU_FUNC_ATTRIBUTE_NUM_REGS)              \
  X(static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) \
  X(constant, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)       \
  X(local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)          \
  X(binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION)   \
  X(max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)

cgc_status_t cgc__kernel_identity(CUfunction fn, cgc__kernel_identity_t* out, const char* func) {
#define READ_ATTRIBUTE(field, attribute) \
  CGC_RELAXED(st = st != CGC_SUCCESS ? st : CGC_CU(func, cuFuncGetAttribute(&out->field, attribute, fn)));
  cgc_status_t st = CGC_SUCCESS;
  CGC_KERNEL_IDENTITY(READ_ATTRIBUTE)
#undef READ_ATTRIBUTE
  return st;
}

bool cgc__kernel_identity_differs(const cgc__kernel_identity_t* a, const cgc__kernel_identity_t* b, char* what,
                                  size_t what_size) {
#define COMPARE(field, attribute)                                                              \
  if (a->field != b->field) {                                                                  \
    snprintf(what, what_size, "%s %d, not %d", #field, b->field, a->field);                    \
    return true;                                                                               \
  }
  CGC_KERNEL_IDENTITY(COMPARE)
#undef COMPARE
  return false;
}

/* Section `section` of a 64-bit little-endian ELF cubin of `size` bytes: its bytes (*bytes of
 * them), NULL when the image has none (or is no such cubin: *elf false). Every read is bounded by
 * `size`; a section without bytes in the file (NOBITS) has none. */
static const unsigned char* elf_section(const unsigned char* p, size_t size, const char* section, size_t* bytes,
                                        bool* elf) {
  *bytes = 0;
  *elf = false;
  if (size < 64 || p[0] != 0x7f || p[1] != 'E' || p[2] != 'L' || p[3] != 'F' || p[4] != 2 || p[5] != 1) return NULL;
  uint64_t shoff = read_u64(p + 40), shentsize = read_u16(p + 58), shnum = read_u16(p + 60);
  uint64_t shstrndx = read_u16(p + 62);
  if (shentsize < 64 || shoff > size || shnum * shentsize > size - shoff || shstrndx >= shnum) return NULL;
  const unsigned char* names_header = p + shoff + shstrndx * shentsize;
  uint64_t names_at = read_u64(names_header + 24), names_size = read_u64(names_header + 32);
  if (names_at > size || names_size > size - names_at) return NULL;
  *elf = true;
  size_t length = strlen(section) + 1; /* with its NUL: ".text.foo" is not ".text.foobar" */
  for (uint64_t i = 0; i < shnum; i++) {
    const unsigned char* sh = p + shoff + i * shentsize;
    uint64_t at = read_u32(sh), offset = read_u64(sh + 24), n = read_u64(sh + 32);
    if (at > names_size || names_size - at < length || memcmp(p + names_at + at, section, length) != 0) continue;
    if (read_u32(sh + 4) == 8 /* SHT_NOBITS */ || offset > size || n > size - offset) return NULL;
    *bytes = (size_t)n;
    return p + offset;
  }
  return NULL;
}

/* Whether kernel `name` does the same in two recorded images `a` and `b` (ELF cubins): the same
 * machine code, no relocations in it (a call or a global's address, which the driver fills in at
 * load and could name other code), and the same constant and initialised global data in both
 * modules (which the code reads by fixed offsets). Only then either image serves. */
static bool same_kernel(const struct added_image* a, const struct added_image* b, const char* name) {
  static const char* const kModuleData[] = {".nv.constant3", ".nv.global.init"};
  char section[600];
  const char* kernel_sections[] = {".text.%s", ".rel.text.%s", ".rela.text.%s", ".nv.constant2.%s"};
  for (size_t k = 0; k < sizeof kernel_sections / sizeof *kernel_sections; k++) {
    if ((size_t)snprintf(section, sizeof section, kernel_sections[k], name) >= sizeof section) return false;
    size_t na = 0, nb = 0;
    bool ea = false, eb = false;
    const unsigned char* sa = elf_section(a->image, a->size, section, &na, &ea);
    const unsigned char* sb = elf_section(b->image, b->size, section, &nb, &eb);
    if (!ea || !eb) return false; /* not cubins: cannot tell */
    if (k == 0 && (sa == NULL || sb == NULL)) return false;      /* no code found */
    if (k == 1 || k == 2) {
      if (sa != NULL || sb != NULL) return false;               /* relocated code */
      continue;
    }
    if ((sa == NULL) != (sb == NULL) || na != nb || (sa != NULL && memcmp(sa, sb, na) != 0)) return false;
  }
  for (size_t k = 0; k < sizeof kModuleData / sizeof *kModuleData; k++) {
    size_t na = 0, nb = 0;
    bool ea = false, eb = false;
    const unsigned char* sa = elf_section(a->image, a->size, kModuleData[k], &na, &ea);
    const unsigned char* sb = elf_section(b->image, b->size, kModuleData[k], &nb, &eb);
    if ((sa == NULL) != (sb == NULL) || na != nb || (sa != NULL && memcmp(sa, sb, na) != 0)) return false;
  }
  return true;
}

/* Whether image `i` (loaded on `dev` for the lookup) has a kernel `name` (*named) of build
 * `wanted` (*same). images_lock held, context current. An image this device cannot load has
 * neither. */
static cgc_status_t image_has_kernel(struct added_image* i, struct cgc__device* dev, const char* name,
                                     const cgc__kernel_identity_t* wanted, bool* named, bool* same, const char* func) {
  *same = false;
  CUmodule cu = NULL;
  if (added_module_on(i, dev, &cu, func) != CGC_SUCCESS) return CGC_SUCCESS; /* not for this device: look on */
  CUfunction candidate = NULL;
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuModuleGetFunction)(&candidate, cu, name));
  if (r != CUDA_SUCCESS) return CGC_SUCCESS;
  *named = true;
  cgc__kernel_identity_t found;
  CGC_TRY(cgc__kernel_identity(candidate, &found, func));
  char what[96];
  *same = !cgc__kernel_identity_differs(wanted, &found, what, sizeof what);
  return CGC_SUCCESS;
}

cgc_status_t cgc__module_origin(struct cgc__device* dev, CUfunction fn, const char* name, const struct cgc__use* uses,
                                size_t n_uses, cgc__kernel_origin_t* out, const char* func) {
  memset(out, 0, sizeof *out);
  CUmodule module = NULL;
  CGC_TRY(CGC_CU(func, cuFuncGetModule(&module, fn)));
  /* A module of cgc's the graph holds: its image goes into the file. */
  for (size_t i = 0; i < n_uses; i++) {
    if (uses[i].ops != &code_use_ops) continue;
    const struct module_code* code = uses[i].object;
    if (code->cu != module) continue;
    if (code->image == NULL)
      return cgc__fail(CGC_ERROR_NOT_SAVABLE, func,
                       "kernel '%s' is of a module cgc_module_load loaded from an image whose length cgc cannot tell "
                       "(a fatbin, a 64-bit ELF cubin or PTX text can be saved)",
                       name);
    out->image = code->image;
    out->size = code->image_size;
    return CGC_SUCCESS;
  }
  /* Else an added or recorded image that has a kernel of that name and the same build. */
  cgc__kernel_identity_t wanted;
  CGC_TRY(cgc__kernel_identity(fn, &wanted, func));
  cgc_status_t st = CGC_SUCCESS;
  bool named = false, found_one = false;
  size_t recorded_matches = 0;
  cgc__mutex_lock(&images_lock, CGC__LOCK_IMAGES);
  /* The images added by key: the first that has the kernel. */
  for (struct added_image* i = added_images; i != NULL && !found_one && st == CGC_SUCCESS; i = i->next) {
    bool same = false;
    st = image_has_kernel(i, dev, name, &wanted, &named, &same, func);
    if (same) {
      found_one = true;
      out->key = i->key; /* never freed */
      out->image = i->image;
      out->size = i->size;
    }
  }
  /* Else the recorded ones (embedded, as cgc_module_load's are), where the match must be the only
   * one, or every match must do the same (same_kernel: a template instantiated in two files):
   * recorded modules of one library (Triton's, torch.compile's) can share kernel names and builds
   * with other code. A recorded image is loaded for the lookup only if the kernel's name is in its
   * bytes at all. */
  size_t name_size = strlen(name) + 1;
  const struct added_image* first = NULL;
  struct added_image* recorded = atomic_load_explicit(&recorded_images, memory_order_acquire);
  for (struct added_image* i = recorded; i != NULL && !found_one && st == CGC_SUCCESS; i = i->next) {
    if (memmem(i->image, i->size, name, name_size) == NULL) continue;
    bool same = false;
    st = image_has_kernel(i, dev, name, &wanted, &named, &same, func);
    if (!same) continue;
    if (first == NULL) {
      first = i;
      recorded_matches = 1;
      out->key = NULL;
      out->image = i->image;
      out->size = i->size;
    } else if (!same_kernel(first, i, name)) {
      recorded_matches++; /* another kernel of that name and build that may do otherwise */
    }
  }
  cgc__mutex_unlock(&images_lock, CGC__LOCK_IMAGES);
  if (st == CGC_SUCCESS && recorded_matches > 1) {
    memset(out, 0, sizeof *out);
    return cgc__fail(CGC_ERROR_NOT_SAVABLE, func,
                     "kernel '%s' is of a module cgc did not load, and at least %zu recorded images have a kernel of "
                     "that name and build that may do otherwise (other code, relocations or module data): cgc cannot "
                     "tell which it is; add its image by key (cgc_module_add_image)",
                     name, recorded_matches);
  }
  found_one = found_one || recorded_matches == 1;
  if (st != CGC_SUCCESS || found_one) return st;
  return cgc__fail(CGC_ERROR_NOT_SAVABLE, func,
                   "kernel '%s' is of a module cgc did not load%s: load it with cgc_module_load, add its image with "
                   "cgc_module_add_image, or record the images of the modules others load (cgc_module_record) "
                   "before they load",
                   name,
                   named ? " (an added or recorded image has a kernel of that name, built differently)"
                         : ", and no image added by key or recorded has a kernel of that name");
}

cgc_status_t cgc__module_code_load(struct cgc__device* dev, const void* image, size_t size, void** out,
                                   const char* func) {
  *out = NULL;
  struct module_code* code = calloc(1, sizeof *code);
  void* copy = code != NULL ? calloc(1, size + 1) : NULL; /* a zero after it: PTX ends there */
  if (copy == NULL) {
    free(code);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  memcpy(copy, image, size);
  /* The driver takes no length: an image whose headers reach past its bytes is refused first. */
  if (image_size_within(copy, size) == 0) {
    free(copy);
    free(code);
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                     "a module image of %zu bytes is damaged: its headers reach past its end", size);
  }
  cgc_status_t st;
  CGC_RELAXED(st = CGC_CU(func, cuModuleLoadData(&code->cu, copy)));
  if (st != CGC_SUCCESS) {
    free(copy);
    free(code);
    return st;
  }
  code->dev = dev;
  code->image = copy; /* the image it was loaded from: a restored graph can be saved again */
  code->image_size = size;
  atomic_init(&code->refs, 1);
  atomic_init(&code->held_by_capture, 0);
  *out = code;
  return CGC_SUCCESS;
}

cgc_status_t cgc__module_code_kernel(void* code, const char* name, CUfunction* out, const char* func) {
  struct module_code* c = code;
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuModuleGetFunction)(out, c->cu, name));
  if (r == CUDA_ERROR_NOT_FOUND)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the saved module has no kernel named '%s' here", name);
  return cgc__cu_fail(r, func, "cuModuleGetFunction");
}

struct cgc__use cgc__module_code_use(void* code) {
  return (struct cgc__use){.ops = &code_use_ops, .object = code, .amount = 0};
}

void cgc__module_code_release(void* code) { code_release(code); }
