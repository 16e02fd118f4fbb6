/* ember — the shared-memory all-reduce for ranks on one node.
 *
 * MPI carries everything that crosses machines. When every rank is on this
 * node (checked by opening one shared segment, not by host names), large
 * all-reduces go through POSIX shared memory instead: OpenMPI 4.1's own
 * large-message all-reduce moves a few hundred MB/s here, while memory moves
 * tens of GB/s.
 *
 * Layout: a control segment with one cache-line slot per rank (its pid, the
 * collective it last entered, and a phase counter), and one data segment per
 * rank, as large as the largest all-reduce so far. With P ranks, the tensor
 * is cut into P chunks; rank r owns chunk r. One all-reduce is three phases,
 * each ended by bumping the rank's phase counter and begun by waiting for
 * every peer's:
 *   A. copy every chunk but r into my segment;
 *   B. reduce chunk r over all ranks (mine from my tensor, the others from
 *      their segments), in rank order, into my tensor and my segment;
 *   C. copy every other chunk q, reduced, from rank q's segment.
 * Each rank moves about 2 N bytes in and 2 N out for N bytes of tensor (P=2).
 * Waits poll with the group's deadline and notice dead peers (kill(pid, 0)).
 * The header exchange before (pg_mpi.c) guarantees that every rank is in the
 * same all-reduce of the same size, so every decision here is the same on
 * every rank without further talk.
 */
#include "distributed/pg_internal.h"

#include "ember_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if EMBER_HAVE_MPI
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOT 128
typedef struct shm_slot {
    _Atomic uint64_t phase;   /* three per shared-memory all-reduce */
    _Atomic uint64_t seq;     /* the collective this rank entered last */
    int32_t pid;
    char pad[SLOT - 2 * sizeof(uint64_t) - sizeof(int32_t)];
} shm_slot;
_Static_assert(sizeof(shm_slot) == SLOT, "shm_slot is one slot");

typedef struct shm_tag {
    char name[40];            /* "/ember-<pid>-<random>" */
    uint64_t nonce;           /* written into the control segment by rank 0 */
} shm_tag;

struct em__pg_shm {
    shm_tag tag;
    shm_slot *ctl;            /* slot 0 holds the nonce; rank q uses slot q + 1 */
    size_t ctl_bytes;
    char **seg;               /* [world] data segments, all mapped here */
    const void **src;         /* [world] reduction sources (scratch) */
    size_t cap;               /* bytes of each data segment (equal on every rank) */
    uint64_t gen;             /* data segment generation (names are unique) */
    uint64_t ops;             /* shared-memory all-reduces so far */
    size_t min_bytes;         /* smaller all-reduces stay on MPI */
    bool data_ok;             /* false after a failed grow: MPI takes over */
};

#define MY(pg) (&(pg)->shm->ctl[(pg)->rank + 1])
#define PEER(pg, q) (&(pg)->shm->ctl[(q) + 1])

static uint64_t random_u64(void)
{
    uint64_t x = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &x, sizeof x) != (ssize_t)sizeof x)
            x = 0;
        close(fd);
    }
    return x ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(em__pg_now() * 1e9);
}

/* Maps a named segment of `bytes`; create: exclusive create and reserve the
 * memory (posix_fallocate: a full /dev/shm fails here, not with SIGBUS later). */
static void *map_segment(const char *name, size_t bytes, bool create)
{
    int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    void *p = NULL;
    struct stat st;
    if (create) {
        if (posix_fallocate(fd, 0, (off_t)bytes) != 0) {
            close(fd);
            shm_unlink(name);
            return NULL;
        }
    } else if (fstat(fd, &st) != 0 || (size_t)st.st_size < bytes) {
        close(fd);
        return NULL;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        if (create)
            shm_unlink(name);
        return NULL;
    }
    return p;
}

/* All ranks learn whether all of them succeeded (the exchange is also a barrier). */
static em_status all_ok(em_process_group *pg, bool mine, bool *all, const char *what, char *msg, size_t cap)
{
    char stack[256], *flags = pg->world <= 256 ? stack : malloc((size_t)pg->world);
    if (!flags) {
        snprintf(msg, cap, "%s: out of memory", what);
        return EM_ERR_OOM;
    }
    char c = mine ? 1 : 0;
    em_status s = em__pg_mpi_allgather_bytes(pg, &c, flags, 1, what, msg, cap);
    *all = true;
    for (int q = 0; s == EM_OK && q < pg->world; q++)
        *all = *all && flags[q];
    if (flags != stack)
        free(flags);
    return s;
}

em_status em__pg_shm_setup(em_process_group *pg, char *msg, size_t cap)
{
    int world = pg->world;
    em__pg_shm *sh = calloc(1, sizeof *sh);
    shm_tag *tags = calloc((size_t)world, sizeof *tags);
    if (!sh || !tags) {
        free(sh);
        free(tags);
        return EM_OK;   /* no shared memory: MPI carries everything */
    }
    shm_tag mine = {0};
    if (pg->rank == 0) {
        mine.nonce = random_u64();
        snprintf(mine.name, sizeof mine.name, "/ember-%d-%08llx", (int)getpid(),
                 (unsigned long long)(mine.nonce & 0xffffffffu));
    }
    em_status s = em__pg_mpi_allgather_bytes(pg, &mine, tags, (int)sizeof mine, "shared-memory setup", msg, cap);
    if (s != EM_OK) {
        free(sh);
        free(tags);
        return s;
    }
    sh->tag = tags[0];
    free(tags);
    sh->ctl_bytes = (size_t)(world + 1) * SLOT;
    char ctl_name[64];
    snprintf(ctl_name, sizeof ctl_name, "%s-ctl", sh->tag.name);

    bool ok0 = true, ok = true;
    if (pg->rank == 0) {
        sh->ctl = map_segment(ctl_name, sh->ctl_bytes, true);
        ok0 = sh->ctl != NULL;
        if (ok0) {
            memcpy(sh->ctl[0].pad, &sh->tag.nonce, sizeof sh->tag.nonce);
            sh->ctl[1].pid = (int32_t)getpid();
        }
    }
    s = all_ok(pg, ok0, &ok, "shared-memory setup", msg, cap);
    if (s == EM_OK && ok && pg->rank != 0) {
        sh->ctl = map_segment(ctl_name, sh->ctl_bytes, false);
        uint64_t nonce = 0;
        if (sh->ctl)
            memcpy(&nonce, sh->ctl[0].pad, sizeof nonce);
        ok0 = sh->ctl && nonce == sh->tag.nonce;   /* the same segment, so the same node */
        if (ok0)
            sh->ctl[pg->rank + 1].pid = (int32_t)getpid();
    }
    if (s == EM_OK && ok)
        s = all_ok(pg, ok0, &ok, "shared-memory setup", msg, cap);
    if (pg->rank == 0 && sh->ctl)
        shm_unlink(ctl_name);   /* mapped by all who could: the name is no longer needed */
    if (s != EM_OK || !ok) {
        if (sh->ctl)
            munmap(sh->ctl, sh->ctl_bytes);
        free(sh);
        return s;
    }
    sh->seg = calloc((size_t)world, sizeof *sh->seg);
    sh->src = calloc((size_t)world, sizeof *sh->src);
    if (!sh->seg || !sh->src) {
        munmap(sh->ctl, sh->ctl_bytes);
        free(sh->seg);
        free(sh->src);
        free(sh);
        return EM_OK;   /* no shared memory: MPI carries everything */
    }
    const char *e = getenv("EMBER_SHM_MIN_BYTES");
    sh->min_bytes = e ? (size_t)strtoull(e, NULL, 10) : (size_t)256 << 10;
    sh->data_ok = true;
    pg->shm = sh;
    return EM_OK;
}

static void unmap_data(em__pg_shm *sh, int world)
{
    for (int q = 0; q < world; q++)
        if (sh->seg[q]) {
            munmap(sh->seg[q], sh->cap);
            sh->seg[q] = NULL;
        }
    sh->cap = 0;
}

void em__pg_shm_free(em_process_group *pg)
{
    em__pg_shm *sh = pg->shm;
    if (!sh)
        return;
    unmap_data(sh, pg->world);
    free(sh->seg);
    free(sh->src);
    munmap(sh->ctl, sh->ctl_bytes);
    free(sh);
    pg->shm = NULL;
}

void em__pg_shm_enter(em_process_group *pg, uint64_t seq)
{
    if (pg->shm)
        atomic_store_explicit(&MY(pg)->seq, seq, memory_order_release);
}

uint64_t em__pg_shm_peer_seq(em_process_group *pg, int rank)
{
    return pg->shm ? atomic_load_explicit(&PEER(pg, rank)->seq, memory_order_acquire) : 0;
}

void em__pg_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!pg->shm)
        return;
    size_t n = 0;
    for (int q = 0; q < pg->world && n + 64 < cap; q++) {
        uint64_t s = em__pg_shm_peer_seq(pg, q);
        if (q != pg->rank && s < seq)
            n += (size_t)snprintf(buf + n, cap - n, "; rank %d is at collective #%llu", q, (unsigned long long)s);
    }
}

bool em__pg_shm_dead_peer(em_process_group *pg, char *buf, size_t cap)
{
    if (!pg->shm)
        return false;
    for (int q = 0; q < pg->world; q++) {
        int32_t pid = PEER(pg, q)->pid;
        if (q != pg->rank && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
            snprintf(buf, cap, "rank %d (pid %d)", q, (int)pid);
            return true;
        }
    }
    return false;
}

bool em__pg_shm_wants(em_process_group *pg, const em__pg_job *job)
{
    em__pg_shm *sh = pg->shm;
    return sh && sh->data_ok && job->kind == EM__PG_ALL_REDUCE && job->dtype != EM_BOOL &&
           (size_t)job->numel * em_dtype_size(job->dtype) >= sh->min_bytes;
}

/* Replaces every rank's data segment by a larger one. Collective: every rank
 * calls it at the same all-reduce (they agree on the size). On a failure
 * anywhere (a full /dev/shm), every rank turns the shared-memory path off. */
static em_status grow(em_process_group *pg, em__pg_job *job, size_t need)
{
    em__pg_shm *sh = pg->shm;
    int world = pg->world;
    size_t align = (size_t)4 << 20;
    size_t cap = (need + align - 1) / align * align;
    uint64_t gen = sh->gen + 1;
    char name[96], msg[256];
    char **seg = calloc((size_t)world, sizeof *seg);
    snprintf(name, sizeof name, "%s-d%d-g%llu", sh->tag.name, pg->rank, (unsigned long long)gen);
    if (seg)
        seg[pg->rank] = map_segment(name, cap, true);
    bool ok = seg && seg[pg->rank];
    em_status s = all_ok(pg, ok, &ok, "growing the shared-memory buffers", msg, sizeof msg);
    if (s == EM_OK && ok) {
        for (int q = 0; q < world && ok; q++) {
            if (q == pg->rank)
                continue;
            char peer[96];
            snprintf(peer, sizeof peer, "%s-d%d-g%llu", sh->tag.name, q, (unsigned long long)gen);
            seg[q] = map_segment(peer, cap, false);
            ok = seg[q] != NULL;
        }
        s = all_ok(pg, ok, &ok, "growing the shared-memory buffers", msg, sizeof msg);
    }
    if (seg && seg[pg->rank])
        shm_unlink(name);
    if (s != EM_OK || !ok) {
        for (int q = 0; seg && q < world; q++)
            if (seg[q])
                munmap(seg[q], cap);
        free(seg);
        sh->data_ok = false;
        if (s == EM_ERR_TIMEOUT)
            return em__pg_timeout(pg, job, "growing the shared-memory buffers");
        if (s != EM_OK)
            return em__pg_job_fail(job, s, "%s", msg);
        return EM_OK;
    }
    unmap_data(sh, world);
    memcpy(sh->seg, seg, sizeof *seg * (size_t)world);
    free(seg);
    sh->cap = cap;
    sh->gen = gen;
    return EM_OK;
}

/* Waits until every peer's phase counter reaches target. */
static bool wait_peers(em_process_group *pg, em__pg_job *job, uint64_t target, double t0)
{
    double next_check = em__pg_now() + 0.25;
    for (long it = 0;; it++) {
        int q = 0;
        for (; q < pg->world; q++)
            if (q != pg->rank && atomic_load_explicit(&PEER(pg, q)->phase, memory_order_acquire) < target)
                break;
        if (q == pg->world)
            return true;
        double now = em__pg_now(), waited = now - t0;
        if (waited > pg->timeout_s) {
            char stage[96];
            snprintf(stage, sizeof stage, "in the shared-memory all-reduce, waiting for rank %d", q);
            em__pg_timeout(pg, job, stage);
            return false;
        }
        if (now > next_check) {
            char dead[96], what[160];
            next_check = now + 0.25;
            if (em__pg_shm_dead_peer(pg, dead, sizeof dead)) {
                em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d failed: %s exited during the shared-memory all-reduce",
                                em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, dead);
                return false;
            }
        }
        em__pg_backoff(it, waited);
    }
}

bool em__pg_shm_all_reduce(em_process_group *pg, em__pg_job *job, double t0)
{
    em__pg_shm *sh = pg->shm;
    int world = pg->world, r = pg->rank;
    size_t es = em_dtype_size(job->dtype);
    int64_t n = job->numel;
    size_t bytes = (size_t)n * es;
    if (bytes > sh->cap) {
        if (grow(pg, job, bytes) != EM_OK)
            return true;      /* failed: job->status says why */
        if (!sh->data_ok)
            return false;     /* declined on every rank: MPI takes it */
    }
    /* chunk q = [lo(q), hi(q)), 64-element aligned */
    int64_t ce = ((n + world - 1) / world + 63) / 64 * 64;
#define LO(q) ((int64_t)(q) * ce < n ? (int64_t)(q) * ce : n)
#define HI(q) (LO(q) + ce < n ? LO(q) + ce : n)
    char *buf = job->buf, *mine = sh->seg[r];
    uint64_t base = 3 * sh->ops++;

    /* A: every peer is done with the previous all-reduce (it read my segment) */
    if (!wait_peers(pg, job, base, t0))
        return true;
    memcpy(mine, buf, (size_t)LO(r) * es);
    memcpy(mine + HI(r) * es, buf + HI(r) * es, (size_t)(n - HI(r)) * es);
    atomic_store_explicit(&MY(pg)->phase, base + 1, memory_order_release);

    /* B: reduce my chunk */
    if (!wait_peers(pg, job, base + 1, t0))
        return true;
    const void **src = sh->src;
    for (int q = 0; q < world; q++)
        src[q] = (q == r ? buf : sh->seg[q]) + LO(r) * es;
    em__pg_reduce_into(buf + LO(r) * es, mine + LO(r) * es, src, world, HI(r) - LO(r), job->dtype, job->red);
    atomic_store_explicit(&MY(pg)->phase, base + 2, memory_order_release);

    /* C: gather the other reduced chunks */
    if (!wait_peers(pg, job, base + 2, t0))
        return true;
    for (int q = 0; q < world; q++)
        if (q != r)
            memcpy(buf + LO(q) * es, sh->seg[q] + LO(q) * es, (size_t)(HI(q) - LO(q)) * es);
    atomic_store_explicit(&MY(pg)->phase, base + 3, memory_order_release);
#undef LO
#undef HI
    return true;
}

#else /* !EMBER_HAVE_MPI */

em_status em__pg_shm_setup(em_process_group *pg, char *msg, size_t cap) { return EM_OK; }
void em__pg_shm_free(em_process_group *pg) { (void)pg; }
void em__pg_shm_enter(em_process_group *pg, uint64_t seq) { (void)pg; (void)seq; }
uint64_t em__pg_shm_peer_seq(em_process_group *pg, int rank) { return 0; }
void em__pg_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap) { buf[0] = 0; }
bool em__pg_shm_dead_peer(em_process_group *pg, char *buf, size_t cap) { return false; }
bool em__pg_shm_wants(em_process_group *pg, const em__pg_job *job) { return false; }
bool em__pg_shm_all_reduce(em_process_group *pg, em__pg_job *job, double t0) { return false; }

#endif
