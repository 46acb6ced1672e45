/* KV: range, put, delete and transactions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resilience/etcd/internal.h"
#include "giant/engine/etcd.h"

static ProtobufCBinaryData bytes_of(const void *p, size_t n) {
  ProtobufCBinaryData b = {n, (uint8_t *)p};
  return b;
}

static gt_status check_key(const char *key, const char *what) {
  if (!key) return gt_errorf(GT_EINVAL, "%s: key is NULL", what);
  return GT_OK;
}

gt_status et_prefix_end(const char *key, ProtobufCBinaryData *end) {
  size_t n = strlen(key);
  uint8_t *b = malloc(n + 1);
  if (!b) return gt_errorf(GT_ENOMEM, "out of memory");
  memcpy(b, key, n);
  /* Increment the last byte below 0xff, dropping 0xff bytes after it; with
   * none, the range runs to the end of the key space ("\0"). */
  while (n > 0) {
    if (b[n - 1] < 0xff) {
      b[n - 1]++;
      end->data = b;
      end->len = n;
      return GT_OK;
    }
    n--;
  }
  b[0] = 0;
  end->data = b;
  end->len = 1;
  return GT_OK;
}

gt_status et_kv_copy(const Mvccpb__KeyValue *src, gt_etcd_kv *dst) {
  memset(dst, 0, sizeof *dst);
  dst->key = malloc(src->key.len + 1);
  if (!dst->key) return gt_errorf(GT_ENOMEM, "out of memory");
  if (src->key.len) memcpy(dst->key, src->key.data, src->key.len);
  dst->key[src->key.len] = 0;
  dst->key_len = src->key.len;
  dst->value = malloc(src->value.len + 1);
  if (!dst->value) {
    free(dst->key);
    dst->key = NULL;
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (src->value.len) memcpy(dst->value, src->value.data, src->value.len);
  dst->value[src->value.len] = 0;
  dst->value_len = src->value.len;
  dst->create_revision = src->create_revision;
  dst->mod_revision = src->mod_revision;
  dst->version = src->version;
  dst->lease = src->lease;
  return GT_OK;
}

void gt_etcd_kv_free(gt_etcd_kv *kv) {
  if (!kv) return;
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof *kv);
}

void gt_etcd_kvs_free(gt_etcd_kvs *kvs) {
  if (!kvs) return;
  for (size_t i = 0; i < kvs->n; i++) gt_etcd_kv_free(&kvs->kvs[i]);
  free(kvs->kvs);
  memset(kvs, 0, sizeof *kvs);
}

static gt_status copy_range(const Etcdserverpb__RangeResponse *r, int keys_only, gt_etcd_kvs *out) {
  memset(out, 0, sizeof *out);
  out->more = r->more;
  out->count = r->count;
  out->revision = r->header ? r->header->revision : 0;
  if (r->n_kvs == 0) return GT_OK;
  out->kvs = calloc(r->n_kvs, sizeof *out->kvs);
  if (!out->kvs) return gt_errorf(GT_ENOMEM, "out of memory");
  for (size_t i = 0; i < r->n_kvs; i++) {
    gt_status st = et_kv_copy(r->kvs[i], &out->kvs[i]);
    if (st != GT_OK) {
      gt_etcd_kvs_free(out);
      return st;
    }
    out->n++;
    if (keys_only) {
      free(out->kvs[i].value);
      out->kvs[i].value = NULL;
    }
  }
  return GT_OK;
}

gt_status gt_etcd_get(gt_etcd_client *c, const char *key, const gt_etcd_get_opts *opts, gt_etcd_kvs *out) {
  GT_TRY(check_key(key, "etcd get"));
  if (!c || !out) return gt_errorf(GT_EINVAL, "etcd get: NULL client or result");
  gt_etcd_get_opts o = {0};
  if (opts) o = *opts;
  if (o.limit < 0 || o.revision < 0)
    return gt_errorf(GT_EINVAL, "etcd get '%s': limit and revision must not be negative", key);
  Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
  req.key = bytes_of(key, strlen(key));
  if (o.prefix) GT_TRY(et_prefix_end(key, &req.range_end));
  req.limit = o.limit;
  req.revision = o.revision;
  req.keys_only = o.keys_only != 0;
  req.serializable = o.serializable != 0;
  ProtobufCMessage *m = NULL;
  char what[300];
  snprintf(what, sizeof what, "etcd get '%.200s'", key);
  gt_status st = et_unary(c, ET_KV_RANGE, &req.base, &etcdserverpb__range_response__descriptor, &m, what);
  free(req.range_end.data);
  if (st != GT_OK) return st;
  st = copy_range((Etcdserverpb__RangeResponse *)m, o.keys_only, out);
  protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

gt_status gt_etcd_get_value(gt_etcd_client *c, const char *key, void **val, size_t *len, int64_t *mod_revision) {
  if (!val || !len) return gt_errorf(GT_EINVAL, "etcd get: NULL value or length");
  gt_etcd_kvs r;
  GT_TRY(gt_etcd_get(c, key, NULL, &r));
  if (r.n == 0) {
    gt_etcd_kvs_free(&r);
    return gt_errorf(GT_ENOTFOUND, "etcd key '%s' does not exist", key);
  }
  *val = r.kvs[0].value;
  *len = r.kvs[0].value_len;
  if (mod_revision) *mod_revision = r.kvs[0].mod_revision;
  r.kvs[0].value = NULL;
  gt_etcd_kvs_free(&r);
  return GT_OK;
}

gt_status gt_etcd_put(gt_etcd_client *c, const char *key, const void *val, size_t len, int64_t lease, gt_etcd_kv *prev,
                      int64_t *revision) {
  GT_TRY(check_key(key, "etcd put"));
  if (!c || (!val && len)) return gt_errorf(GT_EINVAL, "etcd put '%s': NULL client or value", key);
  if (prev) memset(prev, 0, sizeof *prev);
  Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
  req.key = bytes_of(key, strlen(key));
  req.value = bytes_of(val, len);
  req.lease = lease;
  req.prev_kv = prev != NULL;
  ProtobufCMessage *m = NULL;
  char what[300];
  snprintf(what, sizeof what, "etcd put '%.200s'", key);
  GT_TRY(et_unary(c, ET_KV_PUT, &req.base, &etcdserverpb__put_response__descriptor, &m, what));
  Etcdserverpb__PutResponse *r = (Etcdserverpb__PutResponse *)m;
  gt_status st = GT_OK;
  if (revision) *revision = r->header ? r->header->revision : 0;
  if (prev && r->prev_kv) st = et_kv_copy(r->prev_kv, prev);
  protobuf_c_message_free_unpacked(m, NULL);
  return st;
}

gt_status gt_etcd_del(gt_etcd_client *c, const char *key, int prefix, int64_t *deleted) {
  GT_TRY(check_key(key, "etcd delete"));
  if (!c) return gt_errorf(GT_EINVAL, "etcd delete: NULL client");
  Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
  req.key = bytes_of(key, strlen(key));
  if (prefix) GT_TRY(et_prefix_end(key, &req.range_end));
  ProtobufCMessage *m = NULL;
  char what[300];
  snprintf(what, sizeof what, "etcd delete '%.200s'", key);
  gt_status st = et_unary(c, ET_KV_DELETE, &req.base, &etcdserverpb__delete_range_response__descriptor, &m, what);
  free(req.range_end.data);
  if (st != GT_OK) return st;
  if (deleted) *deleted = ((Etcdserverpb__DeleteRangeResponse *)m)->deleted;
  protobuf_c_message_free_unpacked(m, NULL);
  return GT_OK;
}

/* ---- transactions ---- */

typedef struct txn_build {
  Etcdserverpb__Compare *cmp;
  Etcdserverpb__Compare **cmpp;
  Etcdserverpb__RequestOp *ops, **opp;
  Etcdserverpb__RangeRequest *ranges;
  Etcdserverpb__PutRequest *puts;
  Etcdserverpb__DeleteRangeRequest *dels;
} txn_build;

static gt_status build_op(const gt_etcd_op *o, size_t i, txn_build *b) {
  if (!o->key) return gt_errorf(GT_EINVAL, "etcd txn: operation %zu has a NULL key", i);
  Etcdserverpb__RequestOp *r = &b->ops[i];
  etcdserverpb__request_op__init(r);
  b->opp[i] = r;
  ProtobufCBinaryData key = bytes_of(o->key, strlen(o->key));
  switch (o->type) {
    case GT_ETCD_OP_GET:
      etcdserverpb__range_request__init(&b->ranges[i]);
      b->ranges[i].key = key;
      if (o->prefix) GT_TRY(et_prefix_end(o->key, &b->ranges[i].range_end));
      r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
      r->request_range = &b->ranges[i];
      return GT_OK;
    case GT_ETCD_OP_PUT:
      if (!o->value && o->value_len) return gt_errorf(GT_EINVAL, "etcd txn: put of '%s' has a NULL value", o->key);
      etcdserverpb__put_request__init(&b->puts[i]);
      b->puts[i].key = key;
      b->puts[i].value = bytes_of(o->value, o->value_len);
      b->puts[i].lease = o->lease;
      r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
      r->request_put = &b->puts[i];
      return GT_OK;
    case GT_ETCD_OP_DEL:
      etcdserverpb__delete_range_request__init(&b->dels[i]);
      b->dels[i].key = key;
      if (o->prefix) GT_TRY(et_prefix_end(o->key, &b->dels[i].range_end));
      r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
      r->request_delete_range = &b->dels[i];
      return GT_OK;
  }
  return gt_errorf(GT_EINVAL, "etcd txn: operation %zu has unknown type %d", i, (int)o->type);
}

static gt_status build_cmp(const gt_etcd_cmp *c, size_t i, txn_build *b) {
  if (!c->key) return gt_errorf(GT_EINVAL, "etcd txn: compare %zu has a NULL key", i);
  Etcdserverpb__Compare *m = &b->cmp[i];
  etcdserverpb__compare__init(m);
  b->cmpp[i] = m;
  m->key = bytes_of(c->key, strlen(c->key));
  switch (c->op) {
    case GT_ETCD_EQUAL: m->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL; break;
    case GT_ETCD_GREATER: m->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER; break;
    case GT_ETCD_LESS: m->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS; break;
    case GT_ETCD_NOT_EQUAL: m->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL; break;
    default: return gt_errorf(GT_EINVAL, "etcd txn: compare %zu has unknown operator %d", i, (int)c->op);
  }
  switch (c->target) {
    case GT_ETCD_CMP_VALUE:
      if (!c->value && c->value_len) return gt_errorf(GT_EINVAL, "etcd txn: compare %zu has a NULL value", i);
      m->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
      m->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
      m->value = bytes_of(c->value, c->value_len);
      return GT_OK;
    case GT_ETCD_CMP_VERSION:
      m->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
      m->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
      m->version = c->number;
      return GT_OK;
    case GT_ETCD_CMP_CREATE_REVISION:
      m->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
      m->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
      m->create_revision = c->number;
      return GT_OK;
    case GT_ETCD_CMP_MOD_REVISION:
      m->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
      m->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
      m->mod_revision = c->number;
      return GT_OK;
  }
  return gt_errorf(GT_EINVAL, "etcd txn: compare %zu has unknown target %d", i, (int)c->target);
}

void gt_etcd_txn_result_free(gt_etcd_txn_result *res) {
  if (!res) return;
  for (size_t i = 0; i < res->n; i++) gt_etcd_kvs_free(&res->results[i]);
  free(res->results);
  memset(res, 0, sizeof *res);
}

static gt_status copy_txn(const Etcdserverpb__TxnResponse *r, gt_etcd_txn_result *res) {
  res->succeeded = r->succeeded;
  res->revision = r->header ? r->header->revision : 0;
  if (r->n_responses == 0) return GT_OK;
  res->results = calloc(r->n_responses, sizeof *res->results);
  if (!res->results) return gt_errorf(GT_ENOMEM, "out of memory");
  for (size_t i = 0; i < r->n_responses; i++) {
    const Etcdserverpb__ResponseOp *o = r->responses[i];
    res->n++;
    if (o->response_case == ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE && o->response_range) {
      GT_TRY(copy_range(o->response_range, 0, &res->results[i]));
    } else if (o->response_case == ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE &&
               o->response_delete_range) {
      res->results[i].count = o->response_delete_range->deleted;
    }
  }
  return GT_OK;
}

gt_status gt_etcd_txn(gt_etcd_client *c, const gt_etcd_cmp *cmps, size_t ncmp, const gt_etcd_op *success,
                      size_t nsuccess, const gt_etcd_op *failure, size_t nfailure, gt_etcd_txn_result *res) {
  if (res) memset(res, 0, sizeof *res);
  if (!c || (ncmp && !cmps) || (nsuccess && !success) || (nfailure && !failure))
    return gt_errorf(GT_EINVAL, "etcd txn: NULL client or operation array");
  size_t nops = nsuccess + nfailure, nc = ncmp ? ncmp : 1, no = nops ? nops : 1;
  txn_build b = {
      calloc(nc, sizeof *b.cmp),    calloc(nc, sizeof *b.cmpp), calloc(no, sizeof *b.ops),  calloc(no, sizeof *b.opp),
      calloc(no, sizeof *b.ranges), calloc(no, sizeof *b.puts), calloc(no, sizeof *b.dels),
  };
  gt_status st = GT_OK;
  if (!b.cmp || !b.cmpp || !b.ops || !b.opp || !b.ranges || !b.puts || !b.dels)
    st = gt_errorf(GT_ENOMEM, "out of memory");
  for (size_t i = 0; st == GT_OK && i < ncmp; i++) st = build_cmp(&cmps[i], i, &b);
  for (size_t i = 0; st == GT_OK && i < nops; i++)
    st = build_op(i < nsuccess ? &success[i] : &failure[i - nsuccess], i, &b);
  if (st == GT_OK) {
    Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
    req.n_compare = ncmp;
    req.compare = b.cmpp;
    req.n_success = nsuccess;
    req.success = b.opp;
    req.n_failure = nfailure;
    req.failure = b.opp + nsuccess;
    ProtobufCMessage *m = NULL;
    st = et_unary(c, ET_KV_TXN, &req.base, &etcdserverpb__txn_response__descriptor, &m, "etcd txn");
    if (st == GT_OK) {
      gt_etcd_txn_result tmp = {0};
      st = copy_txn((Etcdserverpb__TxnResponse *)m, &tmp);
      if (st == GT_OK && res)
        *res = tmp;
      else
        gt_etcd_txn_result_free(&tmp);
      protobuf_c_message_free_unpacked(m, NULL);
    }
  }
  for (size_t i = 0; b.ranges && b.dels && i < nops; i++) {
    free(b.ranges[i].range_end.data);
    free(b.dels[i].range_end.data);
  }
  free(b.cmp);
  free(b.cmpp);
  free(b.ops);
  free(b.opp);
  free(b.ranges);
  free(b.puts);
  free(b.dels);
  return st;
}

gt_status gt_etcd_create(gt_etcd_client *c, const char *key, const void *val, size_t len, int64_t lease, int *created) {
  GT_TRY(check_key(key, "etcd create"));
  gt_etcd_cmp cmp = {.key = key, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_EQUAL};
  gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = key, .value = val, .value_len = len, .lease = lease};
  gt_etcd_txn_result r;
  GT_TRY(gt_etcd_txn(c, &cmp, 1, &put, 1, NULL, 0, &r));
  if (created) *created = r.succeeded;
  gt_etcd_txn_result_free(&r);
  return GT_OK;
}

gt_status gt_etcd_cas(gt_etcd_client *c, const char *key, const void *expect, size_t expect_len, const void *val,
                      size_t len, int *swapped) {
  GT_TRY(check_key(key, "etcd compare-and-swap"));
  /* A value compare on an absent key is false, as documented. */
  gt_etcd_cmp cmps[2] = {
      {.key = key, .target = GT_ETCD_CMP_CREATE_REVISION, .op = GT_ETCD_GREATER, .number = 0},
      {.key = key, .target = GT_ETCD_CMP_VALUE, .op = GT_ETCD_EQUAL, .value = expect, .value_len = expect_len},
  };
  gt_etcd_op put = {.type = GT_ETCD_OP_PUT, .key = key, .value = val, .value_len = len};
  gt_etcd_txn_result r;
  GT_TRY(gt_etcd_txn(c, cmps, 2, &put, 1, NULL, 0, &r));
  if (swapped) *swapped = r.succeeded;
  gt_etcd_txn_result_free(&r);
  return GT_OK;
}
