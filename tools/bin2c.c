/* bin2c: turns a binary file (a fatbin) into a C source defining
 *   const unsigned char NAME[]; const size_t NAME_size;
 * so that kernels travel inside the library or test binary that uses them.
 * Usage: bin2c NAME INPUT OUTPUT.c */
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s NAME INPUT OUTPUT.c\n", argv[0]);
    return 2;
  }
  FILE* in = fopen(argv[2], "rb");
  if (in == NULL) {
    perror(argv[2]);
    return 1;
  }
  FILE* out = fopen(argv[3], "w");
  if (out == NULL) {
    perror(argv[3]);
    fclose(in);
    return 1;
  }
  /* 16-byte alignment: the driver reads fatbin headers in place. */
  fprintf(out, "#include <stddef.h>\n__attribute__((aligned(16))) const unsigned char %s[] = {", argv[1]);
  size_t n = 0;
  int c;
  while ((c = fgetc(in)) != EOF) {
    fprintf(out, "%s0x%02x,", (n % 16) ? "" : "\n  ", c);
    n++;
  }
  fprintf(out, "\n  0x00};\nconst size_t %s_size = %zu;\n", argv[1], n);
  int failed = ferror(in) || ferror(out);
  fclose(in);
  if (fclose(out) != 0) failed = 1;
  return failed ? 1 : 0;
}
