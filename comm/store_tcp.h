/* The TCP store's protocol, shared by its server and its client.
 *
 * Every connection passes the secret handshake, then sends requests and
 * reads one reply each. A request is one frame:
 *   op u8 | timeout_ms u32 | nitems u32 | items...
 * where an item is (len u32, bytes). SET has key, value; GET, DEL one key;
 * WAIT its keys; ADD key and an 8-byte delta. A reply is status i32 then
 * for GET the value, for ADD the 8-byte sum. */
#ifndef GIANT_PARALLEL_STORE_TCP_H
#define GIANT_PARALLEL_STORE_TCP_H

#include "giant/status.h"

#define STORE_MAX_KEY 4096
#define STORE_MAX_VAL (64u << 20)
#define STORE_MAX_REQ (STORE_MAX_VAL + 2 * STORE_MAX_KEY + 64)
#define STORE_CTX "giant-store"

enum { STORE_SET = 1, STORE_GET = 2, STORE_WAIT = 3, STORE_ADD = 4, STORE_DEL = 5 };

typedef struct gt_store_server gt_store_server;

/* Listens on host:port (NULL host = every address, port 0 = any) and
 * serves from threads of this process. */
gt_status gt_store_server_start(const char *host, int port, const char *secret, gt_store_server **out);
int gt_store_server_port(const gt_store_server *s);
void gt_store_server_stop(gt_store_server *s);

#endif
