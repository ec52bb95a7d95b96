/* router/admission_ops.c — the operator API of admission.h: limits set / get / JSON parsing and
 * the queue listing (admin endpoints). */
#include "router/admission_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/log.h"
#include "router/redis_conn.h"

static void on_limits_set_reply(void *arg, redisReply *r, const char *err) {
  adm__op_t *o = arg;
  adm_done_cb cb = (adm_done_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type == REDIS_REPLY_ERROR) {
    GT_LOG_ERROR("admission limits change failed %s err=%s", o->what, r ? r->str : err);
    cb(o->uarg, GT_EIO, r ? r->str : err);
  } else {
    GT_LOG_INFO("admission limits changed %s admitted_now=%lld", o->what, adm__reply_int(r));
    if (adm__reply_int(r) >= ADM__MAX_ADMIT) adm__reap(o->adm); /* more may fit: admit the next batch */
    cb(o->uarg, GT_OK, "ok");
  }
  free(o);
}

int adm_limits_set(adm_t *adm, const char *model, const char *tenant, const adm_limits_t *lim,
                   adm_done_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !lim || !cb) return gt_err_set(err, GT_EINVAL, "admission: limits and callback are required");
  if (!tenant) tenant = "";
  if (!adm__valid_name(model, false, false) ||
      (tenant[0] && strcmp(tenant, "*") != 0 && !adm__valid_name(tenant, false, false)))
    return gt_err_set(err, GT_EINVAL, "admission: bad model '%s' or tenant '%s'", model ? model : "(null)", tenant);
  if (!lim->has_max_inflight && !lim->has_max_queued && !lim->has_weight)
    return gt_err_set(err, GT_EINVAL, "admission: limits update sets nothing");
  if ((lim->has_max_inflight && (lim->max_inflight < 0 || lim->max_inflight > 1000000000)) ||
      (lim->has_max_queued && (lim->max_queued < 0 || lim->max_queued > 1000000000)))
    return gt_err_set(err, GT_EINVAL, "admission: max_inflight / max_queued must be in 0..1e9");
  if (lim->has_weight && (!tenant[0] || !(lim->weight > 0 && lim->weight <= 1e6)))
    return gt_err_set(err, GT_EINVAL, "admission: weight must be in (0, 1e6] and set on a tenant");
  if (!rc_connected(adm->rc)) return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  char vi[32], vq[32], vw[32];
  const char *av[8];
  int k = 0;
  av[k++] = model;
  av[k++] = tenant;
  adm__op_t *o = adm__op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  int w = snprintf(o->what, sizeof o->what, "model=%s tenant=%s", model, tenant[0] ? tenant : "(pool)");
  if (lim->has_max_inflight) {
    snprintf(vi, sizeof vi, "%" PRId64, lim->max_inflight);
    av[k++] = "max_inflight";
    av[k++] = vi;
    w += snprintf(o->what + w, sizeof o->what - (size_t)w, " max_inflight=%s", vi);
  }
  if (lim->has_max_queued) {
    snprintf(vq, sizeof vq, "%" PRId64, lim->max_queued);
    av[k++] = "max_queued";
    av[k++] = vq;
    w += snprintf(o->what + w, sizeof o->what - (size_t)w, " max_queued=%s", vq);
  }
  if (lim->has_weight) {
    snprintf(vw, sizeof vw, "%.17g", lim->weight);
    av[k++] = "weight";
    av[k++] = vw;
    snprintf(o->what + w, sizeof o->what - (size_t)w, " weight=%s", vw);
  }
  if (adm__eval(adm, ADM__SCR_LIMITS_SET, av, k, on_limits_set_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}

int adm_limits_parse_json(const char *json, char *model, char *tenant, adm_limits_t *lim, gt_err_t *err) {
  if (!json || !model || !tenant || !lim) return gt_err_set(err, GT_EINVAL, "limits: NULL argument");
  memset(lim, 0, sizeof *lim);
  json_error_t je;
  json_t *j = json_loads(json, 0, &je);
  if (!j) return gt_err_set(err, GT_EINVAL, "limits: invalid JSON at line %d: %s", je.line, je.text);
  int rv = GT_OK;
  if (!json_is_object(j)) {
    rv = gt_err_set(err, GT_EINVAL, "limits: body must be a JSON object");
    goto out;
  }
  const char *key;
  json_t *v;
  model[0] = tenant[0] = 0;
  json_object_foreach(j, key, v) {
    if (strcmp(key, "model") == 0 || strcmp(key, "tenant") == 0) {
      const char *s = json_string_value(v);
      bool is_tenant = key[0] == 't';
      if (!s || !(adm__valid_name(s, false, false) || (is_tenant && strcmp(s, "*") == 0))) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"%s\" must be a name of 1..%d printable bytes without ':' or spaces",
                        key, ADM_NAME_MAX);
        goto out;
      }
      strcpy(is_tenant ? tenant : model, s);
    } else if (strcmp(key, "max_inflight") == 0 || strcmp(key, "max_queued") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"%s\" must be an integer in 0..1000000000", key);
        goto out;
      }
      if (key[4] == 'i') {
        lim->has_max_inflight = true;
        lim->max_inflight = json_integer_value(v);
      } else {
        lim->has_max_queued = true;
        lim->max_queued = json_integer_value(v);
      }
    } else if (strcmp(key, "weight") == 0) {
      if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) <= 1e6)) {
        rv = gt_err_set(err, GT_EINVAL, "limits: \"weight\" must be a number in (0, 1e6]");
        goto out;
      }
      lim->has_weight = true;
      lim->weight = json_number_value(v);
    } else {
      rv = gt_err_set(err, GT_EINVAL, "limits: unknown field \"%s\"", key);
      goto out;
    }
  }
  if (!model[0]) rv = gt_err_set(err, GT_EINVAL, "limits: \"model\" is required");
  else if (!lim->has_max_inflight && !lim->has_max_queued && !lim->has_weight)
    rv = gt_err_set(err, GT_EINVAL, "limits: set at least one of max_inflight, max_queued, weight");
  else if (lim->has_weight && !tenant[0])
    rv = gt_err_set(err, GT_EINVAL, "limits: \"weight\" needs a \"tenant\"");
out:
  json_decref(j);
  return rv;
}

static void on_limits_get_reply(void *arg, redisReply *r, const char *err) {
  adm__op_t *o = arg;
  adm_limits_cb cb = (adm_limits_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
    cb(o->uarg, GT_EIO, r && r->type == REDIS_REPLY_ERROR ? r->str : (err ? err : "bad reply"), NULL);
  } else {
    adm_limits_t l = {true, true, true, adm__reply_int(r->element[0]), adm__reply_int(r->element[1]),
                      r->element[2]->type == REDIS_REPLY_STRING ? strtod(r->element[2]->str, NULL) : 1};
    cb(o->uarg, GT_OK, "ok", &l);
  }
  free(o);
}

int adm_limits_get(adm_t *adm, const char *model, const char *tenant, adm_limits_cb cb, void *arg,
                   gt_err_t *err) {
  if (!adm || !cb) return gt_err_set(err, GT_EINVAL, "admission: callback is required");
  if (!tenant) tenant = "";
  if (!adm__valid_name(model, false, false) ||
      (tenant[0] && strcmp(tenant, "*") != 0 && !adm__valid_name(tenant, false, false)))
    return gt_err_set(err, GT_EINVAL, "admission: bad model or tenant");
  adm__op_t *o = adm__op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  const char *av[2] = {model, tenant};
  if (adm__eval(adm, ADM__SCR_LIMITS_GET, av, 2, on_limits_get_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}

static void on_queues_reply(void *arg, redisReply *r, const char *err) {
  adm__op_t *o = arg;
  adm_queues_cb cb = (adm_queues_cb)o->ucb;
  if (o->adm->destroying) {
    free(o);
    return;
  }
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 7) {
    cb(o->uarg, GT_EIO, r && r->type == REDIS_REPLY_ERROR ? r->str : (err ? err : "bad reply"), NULL, 0);
    free(o);
    return;
  }
  int n = (int)(r->elements / 7);
  adm_queue_row_t *rows = calloc((size_t)n + 1, sizeof *rows);
  if (!rows) {
    cb(o->uarg, GT_ENOMEM, "out of memory", NULL, 0);
    free(o);
    return;
  }
  for (int i = 0; i < n; i++) {
    redisReply **f = r->element + 7 * i;
    adm_queue_row_t *q = &rows[i];
    snprintf(q->model, sizeof q->model, "%s", f[0]->type == REDIS_REPLY_STRING ? f[0]->str : "");
    snprintf(q->tenant, sizeof q->tenant, "%s", f[1]->type == REDIS_REPLY_STRING ? f[1]->str : "");
    q->queued = adm__reply_int(f[2]);
    q->inflight = adm__reply_int(f[3]);
    q->max_inflight = adm__reply_int(f[4]);
    q->max_queued = adm__reply_int(f[5]);
    q->weight = f[6]->type == REDIS_REPLY_STRING ? strtod(f[6]->str, NULL) : 1;
  }
  cb(o->uarg, GT_OK, "ok", rows, n);
  free(rows);
  free(o);
}

int adm_queues_list(adm_t *adm, const char *model, adm_queues_cb cb, void *arg, gt_err_t *err) {
  if (!adm || !cb) return gt_err_set(err, GT_EINVAL, "admission: callback is required");
  if (!model) model = "";
  if (model[0] && !adm__valid_name(model, false, false)) return gt_err_set(err, GT_EINVAL, "admission: bad model");
  adm__op_t *o = adm__op_new(adm, 0, (void *)cb, arg);
  if (!o) return gt_err_set(err, GT_ENOMEM, "admission: out of memory");
  const char *av[1] = {model};
  if (adm__eval(adm, ADM__SCR_QUEUES, av, 1, on_queues_reply, o) != GT_OK) {
    free(o);
    return gt_err_set(err, GT_EIO, "admission: redis is not connected");
  }
  return GT_OK;
}
