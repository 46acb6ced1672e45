/* Listening sockets, on a port given or on the first free one of a range.
 *
 * A job behind a firewall that lets only a range of ports in
 * (giantrun --comm-ports A-B, GT_COMM_PORTS=A-B in a worker) keeps every
 * listener inside it: the communicators' meshes and the TCP store, through
 * gt_wire_listen, and giantrun's standalone etcd. Processes of one host
 * start at different places in the range (gt_ports_first) and step past
 * ports in use, so they do not all race for its first port.
 *
 * Shared with launch/: giantrun checks the range at start and puts its
 * private etcd in it. */
#ifndef GIANT_COMM_PORTS_H
#define GIANT_COMM_PORTS_H

#include "giant/status.h"

/* Ports lo..hi inclusive; {0, 0}: no range was given. */
typedef struct gt_port_range {
  int lo, hi;
} gt_port_range;

/* "A-B" (or "A", one port) with 1 <= A <= B <= 65535 into *r. `what`
 * names where the text came from in the error ("--comm-ports"). */
gt_status gt_ports_parse(const char *s, const char *what, gt_port_range *r);
/* $GT_COMM_PORTS into *r; {0, 0} when it is unset or empty. */
gt_status gt_ports_from_env(gt_port_range *r);
/* How many ports the range holds (0 for "any"). */
int gt_ports_count(const gt_port_range *r);
/* Where this process starts in a range: its rank on the node
 * ($GT_LOCAL_RANK) when a launcher started it, else its pid. */
unsigned gt_ports_first(void);

/* A non-blocking listening socket (SO_REUSEADDR, close-on-exec) on host
 * (NULL = all addresses) at port (0: one the kernel picks). */
gt_status gt_ports_listen_at(const char *host, int port, int *fd, int *port_out);
/* The same at a port of r, tried from index `first` (taken
 * modulo the range's size) upwards and around; a port in use, or one
 * below 1024 without the privilege, is passed over. Fails naming the
 * range and how many ports were in use when none is left. */
gt_status gt_ports_listen(const char *host, const gt_port_range *r, unsigned first, int *fd, int *port_out);

#endif
