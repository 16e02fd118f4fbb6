/* ember — the registry of the process group's transports: the one file that
 * names them. pg.c points each group at it; the comm thread, pg.c and
 * pg_common.c then reach a transport only through its table. A new transport
 * (say, Gloo-style TCP) is one file with one const em__pg_transport, and one
 * line here.
 */
#include "distributed/pg/pg_internal.h"

const em__pg_registry em__pg_transports = {
    .carrier = &em__pg_mpi_transport,
    .fast = {&em__pg_shm_transport},
    .cuda = &em__pg_nccl_transport,
};
