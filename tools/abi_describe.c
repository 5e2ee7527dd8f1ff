/* Prints the ABI of capi/cgc.h as lines a test in any language can read without a parser
 * library: the header's own lists (functions, status codes, public structs) expanded, each type
 * with its ABI class. The bindings' CI tests compare their tables and structs against it, so a
 * parameter changed in one place and not the other fails a test instead of a user's program.
 *
 *   version 1.0.0
 *   function <index> <name> <return class> [<parameter name>:<class> ...]
 *   status <name> <value>
 *   struct <name> <size>
 *   field <struct> <index> <name> <class> <offset> <size>
 *   callback <type> <return class> [<parameter name>:<class> ...]
 *
 * Classes: i8 u8 u16 i32 u32 u64 usize isize f32 void (by value), handle:<type> (an opaque cgc_*_t),
 * fnptr:<type> (a callback, whose signature is its `callback` line), struct:<name>,
 * ptr(<class>) (a pointer to that class), array(<count>,<class>).
 * A type this program does not know makes it fail: a new type needs its class here first.
 * Function indexes are the positions in cgc_api_t (after struct_size). */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/cgc.h"

/* C type names (after `const` is dropped) and their classes. */
static const struct {
  const char* type;
  const char* class_name;
} kTypes[] = {
    {"void", "void"},         {"char", "i8"},
    {"int", "i32"},           {"unsigned", "u32"},
    {"uint32_t", "u32"},      {"uint64_t", "u64"},
    {"size_t", "usize"},      {"ssize_t", "isize"},
    {"float", "f32"},         {"cgc_status_t", "i32"},
    {"cgc_capture_mode_t", "i32"}, {"cgc_capture_status_t", "i32"},
    {"cgc_dtype_t", "i32"},   {"cgc_reduce_op_t", "i32"},
    {"cgc_context_t", "handle:cgc_context_t"}, {"cgc_stream_t", "handle:cgc_stream_t"},
    {"cgc_event_t", "handle:cgc_event_t"},     {"cgc_graph_t", "handle:cgc_graph_t"},
    {"cgc_pool_t", "handle:cgc_pool_t"},       {"cgc_comm_t", "handle:cgc_comm_t"},
    {"cgc_rng_t", "handle:cgc_rng_t"},         {"cgc_capture_fn", "fnptr:cgc_capture_fn"},
    {"cgc_capture_options_t", "struct:cgc_capture_options_t"},
    {"cgc_graph_info_t", "struct:cgc_graph_info_t"},
    {"cgc_memory_stats_t", "struct:cgc_memory_stats_t"},
    {"cgc_comm_id_t", "struct:cgc_comm_id_t"},
    /* 1.1 */
    {"uint8_t", "u8"},        {"uint16_t", "u16"},
    {"cgc_access_property_t", "i32"}, {"cgc_mem_op_kind_t", "i32"},
    {"cgc_function_attribute_t", "i32"},
    /* 1.2 */
    {"cgc_graph_update_t", "i32"},      {"cgc_conditional_kind_t", "i32"},
    {"cgc_module_t", "handle:cgc_module_t"},   {"cgc_function_t", "handle:cgc_function_t"},
    {"cgc_host_fn", "fnptr:cgc_host_fn"},
    {"cgc_access_policy_t", "struct:cgc_access_policy_t"},
    {"cgc_mem_op_t", "struct:cgc_mem_op_t"},
    /* 1.5 */
    {"cgc_nccl_memory_t", "i32"},
    /* 1.6 */
    {"cgc_block_state_t", "i32"},
    {"cgc_segment_info_t", "struct:cgc_segment_info_t"},
    {"cgc_block_info_t", "struct:cgc_block_info_t"},
    {"cgc_save_options_t", "struct:cgc_save_options_t"},
    {"cgc_saved_info_t", "struct:cgc_saved_info_t"},
    {"cgc_restore_options_t", "struct:cgc_restore_options_t"},
};

static int failed;

/* Copies `text` without comments and with whitespace runs made single spaces. */
static void clean(const char* text, char* out, size_t size) {
  size_t n = 0;
  for (const char* p = text; *p != '\0' && n + 1 < size;) {
    if (p[0] == '/' && p[1] == '*') {
      const char* end = strstr(p + 2, "*/");
      p = end ? end + 2 : p + strlen(p);
      continue;
    }
    if (isspace((unsigned char)*p)) {
      if (n > 0 && out[n - 1] != ' ') out[n++] = ' ';
      p++;
      continue;
    }
    out[n++] = *p++;
  }
  while (n > 0 && out[n - 1] == ' ') n--;
  out[n] = '\0';
}

/* The class of a C type written like "const cgc_capture_options_t*" or "void**". */
static void classify(const char* type, char* out, size_t size) {
  char t[128];
  clean(type, t, sizeof t);
  size_t stars = 0;
  for (char* p = t; *p; p++) stars += *p == '*';
  /* The base name: the words without const and the stars. */
  char base[128] = "";
  char* save = NULL;
  for (char* word = strtok_r(t, " *", &save); word != NULL; word = strtok_r(NULL, " *", &save)) {
    if (strcmp(word, "const") == 0) continue;
    if (base[0] != '\0') strncat(base, " ", sizeof base - strlen(base) - 1);
    strncat(base, word, sizeof base - strlen(base) - 1);
  }
  const char* cls = NULL;
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0] && cls == NULL; i++)
    if (strcmp(kTypes[i].type, base) == 0) cls = kTypes[i].class_name;
  if (cls == NULL) {
    fprintf(stderr, "abi_describe: unknown type '%s' (in '%s'): give it a class in kTypes\n", base, type);
    failed = 1;
    cls = "unknown";
  }
  /* ptr(...) once per star, around the base class. */
  out[0] = '\0';
  for (size_t i = 0; i < stars && strlen(out) + 4 < size; i++) strcat(out, "ptr(");
  if (strlen(out) + strlen(cls) + stars < size) strcat(out, cls);
  for (size_t i = 0; i < stars && strlen(out) + 1 < size; i++) strcat(out, ")");
}

/* Prints "name:class" for each parameter of a list written like "(int a, const T* b)". */
static void print_params(const char* params) {
  char list[1024];
  clean(params, list, sizeof list);
  size_t len = strlen(list);
  if (len < 2 || list[0] != '(' || list[len - 1] != ')') {
    fprintf(stderr, "abi_describe: cannot read the parameter list '%s'\n", params);
    failed = 1;
    return;
  }
  list[len - 1] = '\0';
  char* rest = list + 1;
  if (strcmp(rest, "void") == 0 || rest[0] == '\0') return;
  char* save = NULL;
  for (char* param = strtok_r(rest, ",", &save); param != NULL; param = strtok_r(NULL, ",", &save)) {
    while (*param == ' ') param++;
    /* The name is the last identifier; the type is what precedes it. */
    size_t end = strlen(param);
    while (end > 0 && param[end - 1] == ' ') end--;
    size_t start = end;
    while (start > 0 && (isalnum((unsigned char)param[start - 1]) || param[start - 1] == '_')) start--;
    char name[64], type[128], cls[256];
    snprintf(name, sizeof name, "%.*s", (int)(end - start), param + start);
    snprintf(type, sizeof type, "%.*s", (int)start, param);
    classify(type, cls, sizeof cls);
    printf(" %s:%s", name, cls);
  }
}

int main(void) {
  printf("version %d.%d.%d\n", CGC_VERSION_MAJOR, CGC_VERSION_MINOR, CGC_VERSION_PATCH);
  int index = 0;
  char cls[256];
#define PRINT_FUNCTION(ret, name, params) \
  classify(#ret, cls, sizeof cls);         \
  printf("function %d %s %s", index++, #name, cls); \
  print_params(#params);                   \
  printf("\n");
  CGC_API_FUNCTIONS(PRINT_FUNCTION)
#undef PRINT_FUNCTION
  if ((size_t)index * sizeof(void (*)(void)) + sizeof(size_t) != sizeof(cgc_api_t)) {
    fprintf(stderr, "abi_describe: cgc_api_t is not struct_size plus %d function pointers\n", index);
    failed = 1;
  }
  /* The callback types, written out here and checked against the header by the compiler. */
  _Static_assert(__builtin_types_compatible_p(cgc_capture_fn, cgc_status_t (*)(cgc_stream_t, void*)),
                 "cgc_capture_fn changed: update its callback line");
  printf("callback cgc_capture_fn i32 stream:handle:cgc_stream_t user:ptr(void)\n");
  _Static_assert(__builtin_types_compatible_p(cgc_host_fn, void (*)(void*)), "cgc_host_fn changed: update its callback line");
  printf("callback cgc_host_fn void user:ptr(void)\n");
#define PRINT_STATUS(name, value, text) printf("status %s %d\n", #name, (int)(value));
  CGC_STATUS_LIST(PRINT_STATUS)
#undef PRINT_STATUS
#define PRINT_FIELD(type, name, array)                                                            \
  classify(#type, cls, sizeof cls);                                                               \
  if (#array[0] != '\0') {                                                                        \
    char element[64];                                                                             \
    snprintf(element, sizeof element, "%.60s", cls);                                              \
    snprintf(cls, sizeof cls, "array(%zu,%s)", sizeof(((struct_type*)0)->name) / sizeof(type), element); \
  }                                                                                               \
  printf("field %s %d %s %s %zu %zu\n", struct_name, field++, #name, cls, offsetof(struct_type, name), \
         sizeof(((struct_type*)0)->name));
#define PRINT_STRUCT(T, FIELDS)                                  \
  {                                                              \
    typedef T struct_type;                                       \
    const char* struct_name = #T;                                \
    int field = 0;                                               \
    printf("struct %s %zu\n", struct_name, sizeof(struct_type)); \
    FIELDS(PRINT_FIELD)                                          \
  }
  CGC_STRUCTS(PRINT_STRUCT)
#undef PRINT_STRUCT
#undef PRINT_FIELD
  return failed;
}
