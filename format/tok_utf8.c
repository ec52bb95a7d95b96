/* format/tok_utf8.c — GPT-2's byte alphabet. */
#include "format/tok_utf8.h"

static int is_printable_byte(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
  if (is_printable_byte(b)) return b;
  /* rank of b among the non-printable bytes, in byte order */
  uint32_t n = 0;
  for (unsigned x = 0; x < b; x++) n += !is_printable_byte(x);
  return 0x100 + n;
}

int tok_cp_to_byte(uint32_t cp) {
  if (cp < 0x100) return is_printable_byte(cp) ? (int)cp : -1;
  if (cp >= 0x100 + 68) return -1;
  uint32_t n = cp - 0x100;
  for (unsigned x = 0; x < 256; x++) {
    if (!is_printable_byte(x)) {
      if (n == 0) return (int)x;
      n--;
    }
  }
  return -1;
}
