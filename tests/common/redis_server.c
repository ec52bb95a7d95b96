/* tests/common/redis_server.c — see redis_server.h. */
#define _GNU_SOURCE
#include "tests/common/redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

struct rs {
  char dir[256];
  int port;
  pid_t pid;
  int replicaof;     /* > 0: a replica of 127.0.0.1:replicaof */
  int sentinel_of;   /* > 0: a redis-sentinel monitoring 127.0.0.1:sentinel_of */
  char master_name[64];
};

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static int spawn(rs_t *rs) {
  const char *bin = getenv("GANTRY_REDIS_SERVER");
  if (!bin) bin = "redis-server";
  char port[16], log[300];
  snprintf(port, sizeof port, "%d", rs->port);
  snprintf(log, sizeof log, "%s/redis.log", rs->dir);
  char conf[300], rep[16];
  snprintf(conf, sizeof conf, "%s/sentinel.conf", rs->dir);
  snprintf(rep, sizeof rep, "%d", rs->replicaof);
  if (rs->sentinel_of > 0) { /* fast timeouts: a test sees a failover in ~1-2 s */
    FILE *f = fopen(conf, "w");
    if (!f) return -1;
    fprintf(f, "port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile %s\n"
               "sentinel monitor %s 127.0.0.1 %d 2\n"
               "sentinel down-after-milliseconds %s 500\n"
               "sentinel failover-timeout %s 2000\n"
               "sentinel parallel-syncs %s 1\n",
            rs->port, rs->dir, log, rs->master_name, rs->sentinel_of, rs->master_name,
            rs->master_name, rs->master_name);
    fclose(f);
  }
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    /* Dies with the test process (even when it is killed), and keeps off its stdout. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      dup2(nul, 1);
      dup2(nul, 2);
    }
    if (rs->sentinel_of > 0) {
      const char *sb = getenv("GANTRY_REDIS_SENTINEL");
      if (!sb) sb = "redis-sentinel";
      execlp(sb, sb, conf, (char *)NULL);
    } else if (rs->replicaof > 0) {
      execlp(bin, bin, "--port", port, "--bind", "127.0.0.1", "--dir", rs->dir, "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--logfile", log, "--protected-mode", "no",
             "--replicaof", "127.0.0.1", rep, (char *)NULL);
    } else { /* no 5 s wait before a replica's first full sync */
      execlp(bin, bin, "--port", port, "--bind", "127.0.0.1", "--dir", rs->dir, "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--logfile", log, "--protected-mode", "no",
             "--repl-diskless-sync-delay", "0", (char *)NULL);
    }
    _exit(127);
  }
  rs->pid = pid;
  return 0;
}

/* Polls INFO server until our server answers (it is a separate process we cannot get an event
 * from). The answer must carry our child's process_id: between free_port() and the bind another
 * test's redis can take the port, and would answer a plain PING while ours exits. */
static int wait_ready(rs_t *rs) {
  for (int i = 0; i < 1000; i++) {
    int st;
    if (waitpid(rs->pid, &st, WNOHANG) == rs->pid) {
      rs->pid = 0;
      return -1; /* exited: port taken or bad binary */
    }
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", rs->port, tv);
    if (c && !c->err) {
      char want[40];
      snprintf(want, sizeof want, "\nprocess_id:%d\r", (int)rs->pid);
      redisReply *r = redisCommand(c, "INFO server");
      bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, want);
      if (r) freeReplyObject(r);
      redisFree(c);
      if (ok) return 0;
    } else if (c) {
      redisFree(c);
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static void reap_child(rs_t *rs, int sig) {
  if (rs->pid <= 0) return;
  kill(rs->pid, sig);
  for (int i = 0; i < 500; i++) { /* 5 s, then SIGKILL */
    if (waitpid(rs->pid, NULL, WNOHANG) == rs->pid) {
      rs->pid = 0;
      return;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(rs->pid, SIGKILL);
  waitpid(rs->pid, NULL, 0);
  rs->pid = 0;
}

static rs_t *start_kind(int replicaof, int sentinel_of, const char *name, gt_err_t *err) {
  rs_t *rs = calloc(1, sizeof *rs);
  if (!rs) {
    gt_err_set(err, GT_ENOMEM, "redis_server: out of memory");
    return NULL;
  }
  rs->replicaof = replicaof;
  rs->sentinel_of = sentinel_of;
  snprintf(rs->master_name, sizeof rs->master_name, "%s", name ? name : "");
  const char *tmp = getenv("TMPDIR");
  snprintf(rs->dir, sizeof rs->dir, "%s/gantry-redis-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(rs->dir)) {
    gt_err_set(err, GT_EIO, "redis_server: mkdtemp %s: %s", rs->dir, strerror(errno));
    free(rs);
    return NULL;
  }
  for (int attempt = 0; attempt < 5; attempt++) { /* another process may grab the free port */
    rs->port = free_port();
    if (rs->port > 0 && spawn(rs) == 0 && wait_ready(rs) == 0) return rs;
    reap_child(rs, SIGKILL);
  }
  gt_err_set(err, GT_EIO, "redis_server: could not start %s on a free port", sentinel_of > 0 ? "redis-sentinel" : "redis-server");
  rs_stop(rs);
  return NULL;
}

rs_t *rs_start(gt_err_t *err) { return start_kind(0, 0, NULL, err); }

rs_t *rs_start_replica(const rs_t *master, gt_err_t *err) {
  return start_kind(master->port, 0, NULL, err);
}

rs_t *rs_start_sentinel(const rs_t *master, const char *name, gt_err_t *err) {
  return start_kind(0, master->port, name, err);
}

int rs_port(const rs_t *rs) { return rs->port; }

/* One command on 127.0.0.1:port (200 ms bounds); the reply (caller frees) or NULL. */
static redisReply *cmd_once(int port, const char *cmd) {
  struct timeval tv = {0, 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  redisReply *r = NULL;
  if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK) r = redisCommand(c, cmd);
  if (c) redisFree(c);
  return r;
}

bool rs_is_master(const rs_t *rs) {
  redisReply *r = cmd_once(rs->port, "ROLE");
  bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
            r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "master");
  if (r) freeReplyObject(r);
  return ok;
}

static bool failover_ready(rs_t *const *sent, int n, const rs_t *replica, const char *name) {
  char cmd[100];
  snprintf(cmd, sizeof cmd, "SENTINEL master %s", name);
  for (int i = 0; i < n; i++) {
    redisReply *r = cmd_once(sent[i]->port, cmd);
    int slaves = -1, others = -1;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements; k += 2) {
      if (!strcmp(r->element[k]->str, "num-slaves")) slaves = atoi(r->element[k + 1]->str);
      if (!strcmp(r->element[k]->str, "num-other-sentinels")) others = atoi(r->element[k + 1]->str);
    }
    if (r) freeReplyObject(r);
    if (slaves < 1 || others < n - 1) return false;
  }
  redisReply *r = cmd_once(replica->port, "INFO replication"); /* string or verbatim reply */
  bool up = r && r->str && strstr(r->str, "master_link_status:up");
  if (r) freeReplyObject(r);
  return up;
}

int rs_wait_failover_ready(rs_t *const *sentinels, int n, const rs_t *replica, const char *name,
                           int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 50) { /* separate processes: poll */
    if (failover_ready(sentinels, n, replica, name)) return GT_OK;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return GT_EIO;
}

int rs_kill(rs_t *rs) {
  if (!rs || rs->pid <= 0) return GT_EIO;
  reap_child(rs, SIGKILL);
  return GT_OK;
}

int rs_restart(rs_t *rs, gt_err_t *err) {
  if (!rs) return gt_err_set(err, GT_EINVAL, "redis_server: NULL");
  reap_child(rs, SIGKILL);
  for (int attempt = 0; attempt < 50; attempt++) { /* the port may linger briefly */
    if (spawn(rs) == 0 && wait_ready(rs) == 0) return GT_OK;
    reap_child(rs, SIGKILL);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return gt_err_set(err, GT_EIO, "redis_server: restart on port %d failed", rs->port);
}

void rs_stop(rs_t *rs) {
  if (!rs) return;
  reap_child(rs, SIGTERM);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", rs->dir);
  if (system(cmd) != 0) { /* leaves a temp dir behind; nothing else to do */
  }
  free(rs);
}
