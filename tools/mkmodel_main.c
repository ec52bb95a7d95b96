/* gantry-mkmodel --preset P --type T (--out F.gguf | --header-only) [--seed S] [--threads N]
 *                [--keep-output-bf16 | --no-keep-output-bf16] [--mtp] [--layers L] [--vocab V]
 * gantry-mkmodel --list   (sizes of every preset x type, nothing written)
 * Writes a synthetic model with the preset's real shapes and random weights, or (with
 * --header-only) prints its tensor table without writing anything. Always prints the file size
 * and the bytes streamed per decoded token (every tensor but token_embd; MTP layers apart).
 * --layers / --vocab replace the preset's decoder layers / vocabulary (mk_plan_create_sized). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mkmodel.h"

#ifndef GANTRY_VERSION /* set by cmake/20-quantize.cmake */
#define GANTRY_VERSION "unknown"
#endif

static void usage(FILE *f) {
  fprintf(f, "usage: gantry-mkmodel --preset P --type T (--out F.gguf | --header-only) [--seed S] [--threads N]\n"
             "                      [--keep-output-bf16 | --no-keep-output-bf16] [--mtp] [--layers L] [--vocab V]\n"
             "       gantry-mkmodel --list | --version\n"
             "  --mtp: append the checkpoint's MTP (nextn) layers; without it the file is what llama.cpp's\n"
             "         converter writes (no MTP layers), loadable by gantry and by llama.cpp\n  presets:");
  for (int i = 0; mk_preset_name(i); i++) fprintf(f, " %s", mk_preset_name(i));
  fprintf(f, "\n  types: bf16 f16 f32 Q8_0 Q4_K Q5_K Q6_K Q4_K_M\n");
}

static void print_summary(const mk_plan_t *pl) {
  printf("preset %s type %s: %lld tensors, file %llu bytes (%.3f GiB), bytes/token %llu (%.3f GiB)"
         ", MTP layers %llu bytes\n",
         pl->p->name, pl->type_name, (long long)pl->n,
         (unsigned long long)(pl->header_bytes + pl->data_bytes),
         (pl->header_bytes + pl->data_bytes) / 1073741824.0, (unsigned long long)pl->bytes_per_token,
         pl->bytes_per_token / 1073741824.0, (unsigned long long)pl->mtp_bytes);
}

static int list_all(void) {
  static const char *const types[] = {"bf16", "f16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_K_M"};
  for (int i = 0; mk_preset_name(i); i++) {
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
      mk_plan_t *pl = NULL;
      gt_err_t err = {0};
      if (mk_plan_create(mk_preset_name(i), types[k], -1, 0, &pl, &err) != GT_OK) {
        fprintf(stderr, "gantry-mkmodel: %s\n", err.msg);
        return 1;
      }
      print_summary(pl);
      mk_plan_free(pl);
    }
  }
  return 0;
}

static int parse_u64(const char *s, unsigned long long *v) {
  char *end = NULL;
  if (!s || !*s || *s == '-') return -1;
  *v = strtoull(s, &end, 0);
  return (end && !*end) ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *preset = NULL, *type = NULL, *out = NULL;
  unsigned long long seed = 1, threads = 1, layers = 0, vocab = 0;
  int header_only = 0, keep = -1, mtp = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--list") == 0) return list_all();
    if (strcmp(a, "--header-only") == 0) header_only = 1;
    else if (strcmp(a, "--keep-output-bf16") == 0) keep = 1;
    else if (strcmp(a, "--no-keep-output-bf16") == 0) keep = 0;
    else if (strcmp(a, "--mtp") == 0) mtp = 1;
    else if (strcmp(a, "--version") == 0) {
      printf("gantry-mkmodel %s\n", GANTRY_VERSION);
      return 0;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--preset") || !strcmp(a, "--type") || !strcmp(a, "--out") ||
               !strcmp(a, "--seed") || !strcmp(a, "--threads") || !strcmp(a, "--layers") || !strcmp(a, "--vocab")) {
      if (!v) {
        fprintf(stderr, "gantry-mkmodel: %s needs a value\n", a);
        return 2;
      }
      i++;
      if (!strcmp(a, "--preset")) preset = v;
      else if (!strcmp(a, "--type")) type = v;
      else if (!strcmp(a, "--out")) out = v;
      else if (!strcmp(a, "--layers") || !strcmp(a, "--vocab")) {
        unsigned long long *dst = !strcmp(a, "--layers") ? &layers : &vocab;
        if (parse_u64(v, dst) || *dst < 1 || *dst > (1u << 24)) {
          fprintf(stderr, "gantry-mkmodel: bad %s '%s'\n", a, v);
          return 2;
        }
      } else if (!strcmp(a, "--seed")) {
        if (parse_u64(v, &seed)) {
          fprintf(stderr, "gantry-mkmodel: bad --seed '%s'\n", v);
          return 2;
        }
      } else if (parse_u64(v, &threads) || threads < 1 || threads > 256) {
        fprintf(stderr, "gantry-mkmodel: --threads must be 1..256, got '%s'\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "gantry-mkmodel: unknown argument '%s'\n", a);
      return 2;
    }
  }
  if (!preset || !type || (!out && !header_only)) {
    usage(stderr);
    return 2;
  }
  gt_err_t err = {0};
  mk_plan_t *pl = NULL;
  if (mk_plan_create_sized(preset, type, keep, mtp, (int)layers, (int)vocab, &pl, &err) != GT_OK) {
    fprintf(stderr, "gantry-mkmodel: %s\n", err.msg);
    return 2;
  }
  if (header_only) {
    for (int64_t i = 0; i < pl->n; i++) {
      const mk_tensor_t *t = &pl->t[i];
      char shape[64];
      if (t->n_dims == 1) snprintf(shape, sizeof shape, "[%lld]", (long long)t->ne[0]);
      else snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t->ne[0], (long long)t->ne[1]);
      printf("%-40s %-16s %-5s offset %12llu bytes %12llu\n", t->name, shape, dt_name(t->type),
             (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
  } else {
    if (mk_write(pl, out, seed, (int)threads, &err) != GT_OK) {
      fprintf(stderr, "gantry-mkmodel: %s\n", err.msg);
      mk_plan_free(pl);
      return 1;
    }
  }
  print_summary(pl);
  mk_plan_free(pl);
  return 0;
}
