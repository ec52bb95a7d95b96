/* router/admission_internal.h — internals shared by the admission files (not a public API;
 * include only from router/admission*.c). Prefix adm__ / ADM__ (libuv's uv__ convention).
 *
 * Files, one job each:
 *   admission.c           client object: create/destroy, Redis connections, scripts, eval helpers
 *   admission_table.c     local request entries: hash table by ticket, lease id parsing, snapshots
 *   admission_request.c   one request's life: enqueue, admit, timeout, cancel, release, touch, stats
 *   admission_tickets.c   wake-ups: BLPOP on this instance's ticket list
 *   admission_recovery.c  heartbeat, reaper, hold end, re-registration on reconnect
 *   admission_ops.c       operator API: limits set/get/parse, queue listing
 * Threading as in admission.h: everything runs on the adm_t's loop thread. */
#ifndef GANTRY_ROUTER_ADMISSION_INTERNAL_H
#define GANTRY_ROUTER_ADMISSION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>

#include "router/admission.h"
#include "router/redis_conn.h"

struct event;

/* Script slots, in the order adm_create loads them (adm->scr[]). */
enum {
  ADM__SCR_ENQUEUE, ADM__SCR_RELEASE, ADM__SCR_HEARTBEAT, ADM__SCR_REAP,
  ADM__SCR_LIMITS_SET, ADM__SCR_LIMITS_GET, ADM__SCR_QUEUES, ADM__SCR_N
};
enum { ADM__NCOMMON = 6 };     /* common script arguments, ARGV[1..6] (see common.lua) */
enum { ADM__MAX_ADMIT = 256 }; /* admissions per script call (bounds the time Redis is busy) */

/* Local request states. DROP: finished for the user; its Redis entry/lease is being removed. */
enum { ADM__S_PENDING, ADM__S_ENQUEUING, ADM__S_WAITING, ADM__S_ADMITTED, ADM__S_DROP };

typedef struct adm__ent {
  struct adm__ent *next; /* hash chain */
  adm_t *adm;
  uint64_t ticket;
  char *id; /* "<instance>:<ticket>": entry id in Redis and lease id */
  char *model, *tenant, *rid;
  int prio, state;
  bool drop_sent; /* release script in flight */
  adm_cb cb;
  void *arg;
  struct event *timer; /* queue timeout */
  int64_t t0_ns, last_renew_ns;
  char order[24]; /* FIFO order key Redis gave the waiting entry ("": not yet); sent in heartbeats */
} adm__ent_t;

struct adm {
  struct event_base *base;
  char *host, *prefix;
  char inst[ADM_NAME_MAX + 24];
  char tk_key[ADM_NAME_MAX + 160];
  int port, ttl_ms, timeout_ms, hold_ms;
  char common[ADM__NCOMMON][ADM_NAME_MAX + 32]; /* ARGV[1..6] */
  rc_t *rc;  /* commands and scripts */
  rc_t *rcb; /* BLPOP on this instance's ticket list */
  int scr[ADM__SCR_N];
  bool destroying;
  bool evidence;  /* a heartbeat succeeded: this router has used this Redis (a later empty one
                     lost data -> hold) */
  char **peers;   /* routers alive at the last heartbeat reply (this one too); a hold after a
                     data loss ends once they all re-registered */
  size_t n_peers;
  int64_t peers_ns; /* when peers was read (0: never) */
  uint64_t next_ticket;
  adm__ent_t **buckets;
  size_t nbuckets, nents;
  struct event *tick_ev;  /* heartbeat + reap, every ttl/4 */
  struct event *kick_ev;  /* reap when a hold ends */
  struct event *blpop_retry_ev;
  adm_stats_t st;
};

/* Reply context of calls about one request or one operator call. */
typedef struct adm__op {
  adm_t *adm;
  uint64_t ticket;
  void *ucb, *uarg;
  char what[320]; /* for the log line of a limits change */
} adm__op_t;

/* ---- admission.c: helpers ---- */

/* True if s is a valid name: 1..ADM_NAME_MAX bytes (0 allowed with allow_empty; NULL counts as
 * empty), printable, and unless allow_any_printable without space ':' '*'. */
bool adm__valid_name(const char *s, bool allow_empty, bool allow_any_printable);
/* New reply context (caller-owned, free() it); NULL when out of memory. */
adm__op_t *adm__op_new(adm_t *adm, uint64_t ticket, void *ucb, void *uarg);
/* Runs script s with the common arguments followed by extra[0..n). GT_OK, or GT_ENOMEM / the
 * rc_eval error (GT_EIO when not connected), in which case cb never fires. */
int adm__eval(adm_t *adm, int s, const char **extra, int n, rc_reply_cb cb, void *arg);
/* Integer value of an integer or numeric string reply; 0 otherwise (and for NULL). */
long long adm__reply_int(const redisReply *r);

/* ---- admission_table.c: local entries ---- */

/* Entry with ticket t, or NULL. */
adm__ent_t *adm__find(const adm_t *adm, uint64_t t);
/* Adds e (growing the table); GT_OK or GT_ENOMEM (e not added). */
int adm__insert(adm_t *adm, adm__ent_t *e);
/* Removes e from the table (does not free it). */
void adm__unlink_ent(adm_t *adm, adm__ent_t *e);
/* Frees e, its strings and its timer; NULL is a no-op. */
void adm__ent_free(adm__ent_t *e);
/* Ticket of a lease id of this instance, or 0. */
uint64_t adm__parse_id(const adm_t *adm, const char *id);
/* Entries in one of the given states (mask of 1u << ADM__S_*), sorted by ticket (request order).
 * Caller frees; NULL when out of memory. */
adm__ent_t **adm__collect(adm_t *adm, unsigned state_mask, size_t *n);

/* ---- admission_request.c: request state transitions ---- */

/* e was admitted (ticket, enqueue reply or heartbeat): reports ADMITTED to its callback. */
void adm__on_admitted(adm__ent_t *e);
/* Moves e to DROP and removes its Redis entry; the local entry is freed when Redis confirms. */
void adm__drop(adm__ent_t *e);
/* Sends e's enqueue script (state ENQUEUING), or leaves it PENDING if that cannot be sent. */
void adm__send_enqueue(adm__ent_t *e);

/* ---- admission_tickets.c: wake-ups (callbacks registered by adm_create) ---- */

void adm__on_blpop_retry(evutil_socket_t fd, short what, void *arg);
void adm__on_rcb_state(void *arg, bool up);

/* ---- admission_recovery.c: heartbeat, reaper, reconnect ---- */

/* Arms the one-shot reap for when a hold of hold_ms ends (no-op if <= 0 or already armed). */
void adm__schedule_kick(adm_t *adm, long long hold_ms);
/* Renews (or re-creates) the given entries in Redis, HB_CHUNK per call. */
void adm__heartbeat(adm_t *adm, adm__ent_t **v, size_t n);
/* Frees the cached list of live routers. */
void adm__free_peers(adm_t *adm);
/* Runs the reap script (reclaims dead routers' entries, admits, ends a hold). */
void adm__reap(adm_t *adm);
/* Timer / connection callbacks registered by adm_create. */
void adm__on_tick(evutil_socket_t fd, short what, void *arg);
void adm__on_kick(evutil_socket_t fd, short what, void *arg);
void adm__on_rc_state(void *arg, bool up);

#endif
