/* tests/bench/tok_bench.c — tokenizer throughput on one core (tok-bench; a benchmark, not a test).
 *
 *   tok-bench [vocab.gguf] [MB]
 * Generates ~MB (default 4) of English and of Chinese text deterministically (an LCG mixing
 * the phrases below into sentences), encodes each as one tok_encode call, and prints MB/s and
 * tokens for a first (cold word cache) and a best-of-3 warm run (wall clock, and per second of
 * this thread's CPU time, which a busy shared machine inflates less), plus decode and
 * streaming decode speed. Default vocab: $GANTRY_GOLDEN/qwen3-vocab.gguf, else tests/golden/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "format/gguf.h"
#include "format/tokenizer.h"

static const char *EN[] = {
    "the", "model", "serves", "tokens", "from", "a", "paged", "cache", "and", "every", "request", "is", "admitted",
    "through", "Redis", "with", "limits", "that", "operators", "change", "at", "run", "time", "without", "restart",
    "decode", "speed", "was", "measured", "apart", "cold", "warm", "prompts", "throughput", "of", "engine", "which",
    "we", "reported", "GPUs", "bandwidth", "roofline", "hybrid", "attention", "layers", "state", "scheduler",
    "batches", "prefill", "chunks", "under", "budget", "it's", "they'll", "don't", "Hello", "World", "tokenizer",
    "quickly", "jumped", "over", "lazy", "dogs", "while", "statistics", "were", "collected", "in", "production"};
static const char *EN_PUNCT[] = {", ", ". ", "; ", ": ", "! ", "? ", " - ", " (", ") ", "\n", "\n\n", "'s "};

static const char *ZH[] = {
    "我们", "模型", "服务", "生產", "單人", "八人", "伺服器", "自報", "最大", "併發", "不是", "上下文", "掉到", "今天",
    "天气", "很好", "東京", "工作", "数据", "中心", "推理", "速度", "缓存", "命中", "请求", "排队", "限制", "运营",
    "人员", "可以", "在线", "修改", "无需", "重启", "解码", "预填充", "显存", "带宽", "吞吐量", "测量", "分开", "报告",
    "冷启动", "热启动", "注意力", "层数", "状态", "调度器", "批处理", "分块", "预算", "之内", "中文", "文本", "测试"};
static const char *ZH_PUNCT[] = {"，", "。", "、", "；", "：", "！", "？", "（", "）", "\n", "“", "”", " ", "2026年", "8月"};

/* CPU time of this thread: on a shared machine, wall time also counts time spent descheduled. */
static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t next_rand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}

static char *gen(int zh, size_t target, size_t *len) {
  char *b = malloc(target + 256);
  size_t n = 0;
  while (n < target) {
    const char *w;
    if (zh)
      w = (next_rand() % 4) ? ZH[next_rand() % (sizeof ZH / sizeof *ZH)] : ZH_PUNCT[next_rand() % (sizeof ZH_PUNCT / sizeof *ZH_PUNCT)];
    else if (next_rand() % 6)
      w = EN[next_rand() % (sizeof EN / sizeof *EN)];
    else
      w = EN_PUNCT[next_rand() % (sizeof EN_PUNCT / sizeof *EN_PUNCT)];
    size_t l = strlen(w);
    memcpy(b + n, w, l);
    n += l;
    if (!zh && next_rand() % 8) b[n++] = ' ';
    if (next_rand() % 97 == 0) n += (size_t)sprintf(b + n, "%u", next_rand() % 100000);
  }
  b[n] = 0;
  *len = n;
  return b;
}

static void bench(const tok_t *t, const char *name, const char *text, size_t len) {
  gt_err_t err = {0};
  double best = 1e30, first = 0, best_cpu = 1e30;
  size_t ntok = 0;
  int32_t *ids = NULL;
  for (int r = 0; r < 4; r++) {
    free(ids);
    int64_t t0 = gt_now_ns(), c0 = cpu_ns();
    if (tok_encode(t, text, len, 0, &ids, &ntok, &err) != GT_OK) {
      fprintf(stderr, "encode failed: %s\n", err.msg);
      exit(1);
    }
    double s = (double)(gt_now_ns() - t0) / 1e9, c = (double)(cpu_ns() - c0) / 1e9;
    if (r == 0) first = s;
    if (s < best) best = s;
    if (c < best_cpu) best_cpu = c;
  }
  double mb = (double)len / 1e6;
  int64_t t0 = gt_now_ns();
  char *out;
  size_t olen;
  if (tok_decode(t, ids, ntok, 0, &out, &olen, &err) != GT_OK || olen != len || memcmp(out, text, len) != 0) {
    fprintf(stderr, "%s: decode does not round-trip\n", name);
    exit(1);
  }
  double dec_s = (double)(gt_now_ns() - t0) / 1e9;
  free(out);
  tok_stream_t st;
  tok_stream_init(&st, t, 0);
  t0 = gt_now_ns();
  size_t sbytes = 0;
  for (size_t i = 0; i < ntok; i++) {
    const char *p;
    size_t l;
    tok_stream_push(&st, ids[i], &p, &l, &err);
    sbytes += l;
  }
  double str_s = (double)(gt_now_ns() - t0) / 1e9;
  tok_stream_free(&st);
  printf("%-8s %6.2f MB  %8zu tokens (%.2f B/tok)  encode cold %6.2f MB/s  warm %6.2f MB/s  "
         "(per CPU-second %6.2f MB/s)  decode %7.1f MB/s  stream %6.1f MB/s (%zu B)\n",
         name, mb, ntok, (double)len / (double)ntok, mb / first, mb / best, mb / best_cpu, mb / dec_s, mb / str_s,
         sbytes);
  free(ids);
}

int main(int argc, char **argv) {
  char path[4096];
  if (argc > 1) {
    snprintf(path, sizeof path, "%s", argv[1]);
  } else {
    const char *dir = getenv("GANTRY_GOLDEN");
    snprintf(path, sizeof path, "%s/qwen3-vocab.gguf", dir ? dir : "tests/golden");
  }
  double mbytes = argc > 2 ? atof(argv[2]) : 4.0;
  gt_err_t err = {0};
  gguf_t *g;
  tok_t *t;
  int64_t t0 = gt_now_ns();
  if (gguf_open(path, &g, &err) != GT_OK || tok_load(g, &t, &err) != GT_OK) {
    fprintf(stderr, "tok-bench: %s: %s\n", path, err.msg);
    return 1;
  }
  printf("vocab %s: %zu tokens, %zu merges, pre %s, load %.1f ms\n", path, tok_n_vocab(t), tok_n_merges(t),
         tok_pre_name(t), (double)(gt_now_ns() - t0) / 1e6);
  size_t len;
  char *en = gen(0, (size_t)(mbytes * 1e6), &len);
  bench(t, "english", en, len);
  free(en);
  char *zh = gen(1, (size_t)(mbytes * 1e6), &len);
  bench(t, "chinese", zh, len);
  free(zh);
  tok_free(t);
  gguf_close(g);
  return 0;
}
