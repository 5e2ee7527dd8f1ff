/* A program that uses an installed cgc, built with pkg-config or with CMake
 * (tools/check_install.sh does both):
 *   cc -std=c11 consumer.c $(pkg-config --cflags --libs cgc) -o consumer
 *   cmake -S examples/consumer -B build -DCMAKE_PREFIX_PATH=PREFIX && cmake --build build
 * It prints the library's version, checks that its major version is the header's, and counts
 * the CUDA devices. Without a driver or GPU it says so and still succeeds: libcgc.so.1 loads
 * the driver at run time, so it loads everywhere. */
#include <cgc.h>

#include <stdio.h>

int main(void) {
  uint32_t v = cgc_version();
  unsigned major = (unsigned)(v >> 16), minor = (unsigned)((v >> 8) & 0xffu), patch = (unsigned)(v & 0xffu);
  printf("cgc %u.%u.%u\n", major, minor, patch);
  if (major != CGC_VERSION_MAJOR) {
    fprintf(stderr, "consumer: libcgc is version %u.%u.%u, the header cgc.h is %d.%d.%d: another major version\n",
            major, minor, patch, CGC_VERSION_MAJOR, CGC_VERSION_MINOR, CGC_VERSION_PATCH);
    return 1;
  }

  int count = 0;
  cgc_status_t status = cgc_device_count(&count);
  if (status == CGC_ERROR_NO_DRIVER || status == CGC_ERROR_NO_DEVICE) {
    printf("no GPU: %s\n", cgc_last_error());
    return 0;
  }
  if (status != CGC_SUCCESS) {
    fprintf(stderr, "consumer: cgc_device_count: %s\n", cgc_last_error());
    return 1;
  }
  printf("%d CUDA device%s\n", count, count == 1 ? "" : "s");
  return 0;
}
