/* ember — the shared-memory all-reduce for ranks on one node.
 *
 * MPI carries everything that crosses machines. When every rank is on this
 * node (checked by opening one shared segment, not by host names), the data
 * of every all-reduce goes through POSIX shared memory instead (its header
 * still goes over MPI): OpenMPI 4.1's non-blocking all-reduce moves a few
 * hundred MB/s at 25-100 MiB here, and is slower than this path even at 4 KiB.
 *
 * One segment holds a control slot per rank (its pid, the collective it last
 * entered, three progress counters and a futex word) and a ring per rank of
 * `ring` steps of `step` bytes (EMBER_SHM_RING, default 16; EMBER_SHM_STEP_KB,
 * default 256). The tensor is walked in steps; each step is cut into P parts
 * and rank r owns part r. For step g, with slot = g % ring:
 *   A. copy my parts q != r into my ring slot;
 *   B. reduce part r over all ranks (mine from my tensor, the others from
 *      their ring slots), in rank order, into my tensor and my ring slot;
 *   C. copy every other part q, reduced, from rank q's ring slot.
 * Each phase ends by bumping my counter for it; B(g) needs every peer's A(g),
 * C(g) every B(g), and A(g) every C(g - ring) (nobody still reads the slot).
 * A dataflow loop runs whatever is ready, so with the peers running it
 * settles into B(g), A(g+1), C(g), and a rank whose peer is descheduled gets
 * ahead with A by up to a ring. The rings (4 MiB a rank) stay in the shared
 * L3 cache: for N bytes of tensor a rank reads N and writes N bytes of DRAM
 * (its own tensor, the least an in-place all-reduce can move), and the
 * exchange itself goes through the cache. Measured here (2 ranks, 2 cores):
 * 25 MiB at about 10 GB/s, 100 MiB at 3-6 GB/s, where memory saturates.
 *
 * Waits poll with the group's deadline and notice dead peers (kill(pid, 0)).
 * The header exchange before (the carrier's agree, run by the comm thread)
 * guarantees that every rank is in the same all-reduce of the same size, so
 * every decision here is the same on every rank without further talk.
 *
 * A fast transport (em__pg_shm_transport; pg_internal.h): the comm thread
 * offers it each CPU job before the carrier. It sets itself up through the
 * carrier's byte allgather (em__pg_setup_allgather), never calling MPI, and
 * lends the group its view of node-local peers (who lags, who died).
 */
#include "distributed/pg/pg_internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SLOT 128
typedef struct shm_slot {
    _Atomic uint64_t a, b, c;  /* steps this rank finished in phases A, B and C (ever) */
    _Atomic uint64_t seq;      /* the collective this rank entered last */
    _Atomic uint64_t left_ms;  /* em__pg_now() * 1000 when this rank freed the group; 0: still in it */
    _Atomic uint32_t bell;     /* futex word: bumped with every counter */
    _Atomic uint32_t sleepers; /* peers asleep on bell */
    int32_t pid;
    char pad[SLOT - 5 * sizeof(uint64_t) - 3 * sizeof(uint32_t)];
} shm_slot;
_Static_assert(sizeof(shm_slot) == SLOT, "shm_slot is one slot");

typedef struct shm_tag {
    char name[40];            /* "/ember-<pid>-<random>" */
    uint64_t nonce;           /* written into the segment by rank 0 */
    uint64_t step;            /* bytes per step (rank 0's choice) */
    uint64_t ring;            /* steps per ring (rank 0's choice) */
} shm_tag;

struct em__pg_shm {
    shm_tag tag;
    char *base;               /* the whole segment */
    size_t bytes;
    shm_slot *ctl;            /* slot 0 holds the nonce; rank q uses slot q + 1 */
    char *ring0;              /* rank q's ring: ring0 + q * ring * step */
    uint64_t ring;            /* steps in a ring (EMBER_SHM_RING, default 16) */
    size_t step;              /* bytes per step, a multiple of 64 * P */
    uint64_t steps;           /* steps done so far, by every rank alike */
    const void **src;         /* [world] reduction sources (scratch) */
    size_t min_bytes;         /* smaller all-reduces stay on MPI */
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

/* Maps the named segment; create: exclusive create and reserve the memory
 * (posix_fallocate: a full /dev/shm fails here, not with SIGBUS later). */
static void *map_segment(const char *name, size_t bytes, bool create)
{
    int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
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
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        if (create)
            shm_unlink(name);
        return NULL;
    }
    return p;
}

/* All ranks learn whether all of them succeeded (the exchange is also a barrier). */
static em_status all_ok(em_process_group *pg, bool mine, bool *all, char *msg, size_t cap)
{
    char stack[256], *flags = pg->world <= 256 ? stack : malloc((size_t)pg->world);
    if (!flags) {
        snprintf(msg, cap, "shared-memory setup: out of memory");
        return EM_ERR_OOM;
    }
    char c = mine ? 1 : 0;
    em_status s = em__pg_setup_allgather(pg, &c, flags, 1, "shared-memory setup", msg, cap);
    *all = true;
    for (int q = 0; s == EM_OK && q < pg->world; q++)
        *all = *all && flags[q];
    if (flags != stack)
        free(flags);
    return s;
}

static size_t env_size(const char *name, size_t dflt)
{
    const char *e = getenv(name);
    return e && *e ? (size_t)strtoull(e, NULL, 10) : dflt;
}

static em_status setup_segment(em_process_group *pg, char *msg, size_t cap)
{
    int world = pg->world;
    em__pg_shm *sh = calloc(1, sizeof *sh);
    shm_tag *tags = calloc((size_t)world, sizeof *tags);
    const void **src = calloc((size_t)world, sizeof *src);
    if (!sh || !tags || !src) {
        free(sh);
        free(tags);
        free(src);
        return EM_OK;   /* no shared memory: MPI carries everything */
    }
    shm_tag mine = {0};
    if (pg->rank == 0) {
        mine.nonce = random_u64();
        snprintf(mine.name, sizeof mine.name, "/ember-%d-%08llx", (int)getpid(),
                 (unsigned long long)(mine.nonce & 0xffffffffu));
        /* the step: EMBER_SHM_STEP_KB (default 256), whole 64-byte lines per part */
        size_t step = env_size("EMBER_SHM_STEP_KB", 256) << 10, unit = (size_t)64 * (size_t)world;
        mine.step = step < unit ? unit : step / unit * unit;
        mine.ring = env_size("EMBER_SHM_RING", 16);
        mine.ring = mine.ring < 2 ? 2 : mine.ring;
    }
    em_status s = em__pg_setup_allgather(pg, &mine, tags, (int)sizeof mine, "shared-memory setup", msg, cap);
    sh->tag = tags[0];
    free(tags);
    sh->step = (size_t)sh->tag.step;
    sh->ring = sh->tag.ring;
    sh->bytes = (size_t)(world + 1) * SLOT + (size_t)world * sh->ring * sh->step;
    bool ok0 = true, ok = false;
    if (s == EM_OK && pg->rank == 0) {
        sh->base = map_segment(sh->tag.name, sh->bytes, true);
        ok0 = sh->base != NULL;
        if (ok0)
            memcpy(sh->base, &sh->tag.nonce, sizeof sh->tag.nonce);   /* slot 0 */
    }
    if (s == EM_OK)
        s = all_ok(pg, ok0, &ok, msg, cap);
    if (s == EM_OK && ok && pg->rank != 0) {
        sh->base = map_segment(sh->tag.name, sh->bytes, false);
        uint64_t nonce = 0;
        if (sh->base)
            memcpy(&nonce, sh->base, sizeof nonce);
        ok0 = sh->base && nonce == sh->tag.nonce;   /* the same segment, so the same node */
    }
    if (s == EM_OK && ok)
        s = all_ok(pg, ok0, &ok, msg, cap);
    if (pg->rank == 0 && sh->base)
        shm_unlink(sh->tag.name);   /* mapped by everyone who could: the name has served */
    if (s != EM_OK || !ok) {
        if (sh->base)
            munmap(sh->base, sh->bytes);
        free(sh);
        free(src);
        return s;   /* EM_OK: no shared memory, MPI carries everything */
    }
    /* slot 0 holds the nonce; the ranks' slots follow, then the rings */
    sh->ctl = (shm_slot *)(void *)sh->base;
    sh->ring0 = sh->base + (size_t)(world + 1) * SLOT;
    sh->src = src;
    sh->min_bytes = env_size("EMBER_SHM_MIN_BYTES", 0);
    pg->shm = sh;
    MY(pg)->pid = (int32_t)getpid();
    /* everyone's pid is written before anyone checks for dead peers */
    return em__pg_setup_barrier(pg, "shared-memory setup", msg, cap);
}

/* After the carrier's setup, when every rank is on this node (EMBER_SHM=0:
 * never). Only a timeout or a lost peer fails the group; any other failure
 * leaves pg->shm NULL, and MPI carries everything. */
static em_status shm_setup(em_process_group *pg, char *msg, size_t cap)
{
    const char *e = getenv("EMBER_SHM");
    if (e && strcmp(e, "0") == 0)
        return EM_OK;
    em_status s = setup_segment(pg, msg, cap);
    return s == EM_ERR_TIMEOUT || s == EM_ERR_COMM ? s : EM_OK;
}

static void shm_close(em_process_group *pg)
{
    em__pg_shm *sh = pg->shm;
    if (!sh)
        return;
    /* tell peers still waiting in a collective that this rank will never join it */
    atomic_store(&MY(pg)->left_ms, (uint64_t)(em__pg_now() * 1000.0) | 1);
    munmap(sh->base, sh->bytes);
    free(sh->src);
    free(sh);
    pg->shm = NULL;
}

/* Publishes that this rank entered collective seq (for peers' timeout messages). */
static void shm_enter(em_process_group *pg, uint64_t seq)
{
    if (pg->shm)
        atomic_store_explicit(&MY(pg)->seq, seq, memory_order_release);
}

static uint64_t peer_seq(em_process_group *pg, int rank)
{
    return pg->shm ? atomic_load_explicit(&PEER(pg, rank)->seq, memory_order_acquire) : 0;
}

static void shm_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!pg->shm)
        return;
    size_t n = 0;
    for (int q = 0; q < pg->world && n + 64 < cap; q++) {
        uint64_t s = peer_seq(pg, q);
        if (q != pg->rank && s < seq)
            n += (size_t)snprintf(buf + n, cap - n, "; rank %d is at collective #%llu", q, (unsigned long long)s);
    }
}

static bool shm_dead_peer(em_process_group *pg, char *buf, size_t cap)
{
    if (!pg->shm)
        return false;
    double now_ms = em__pg_now() * 1000.0;
    for (int q = 0; q < pg->world; q++) {
        int32_t pid = PEER(pg, q)->pid;
        if (q != pg->rank && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
            snprintf(buf, cap, "rank %d (pid %d)", q, (int)pid);
            return true;
        }
        /* A peer that freed the group (its program ended normally) joins no more
         * collectives. Two seconds of grace: a collective it completed may still
         * be finishing here. (Without this the peer would sit in MPI_Finalize and
         * this rank in the collective until the timeout.) */
        uint64_t left = atomic_load(&PEER(pg, q)->left_ms);
        if (q != pg->rank && left && now_ms - (double)left > 2000.0) {
            snprintf(buf, cap, "rank %d (pid %d) ended its program, which ran fewer collectives than this one, and", q,
                     (int)pid);
            return true;
        }
    }
    return false;
}

/* Every all-reduce but of bools, from EMBER_SHM_MIN_BYTES up, once set up. */
static bool shm_takes(const em_process_group *pg, const em__pg_job *job)
{
    em__pg_shm *sh = pg->shm;
    return sh && job->kind == EM__PG_ALL_REDUCE && job->dtype != EM_BOOL &&
           (size_t)job->numel * em_dtype_size(job->dtype) >= sh->min_bytes;
}

/* Waiting sleeps on the peer's bell (a process-shared futex) after a short
 * spin, so that on a busy machine the waiter gives its core away instead of
 * spinning while the peer it waits for sits in a run queue. */
static void ring_bell(em_process_group *pg)
{
    shm_slot *me = MY(pg);
    atomic_fetch_add(&me->bell, 1);   /* seq_cst: ordered before reading sleepers */
    if (atomic_load(&me->sleepers))
        syscall(SYS_futex, &me->bell, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static _Atomic uint64_t *counter(em_process_group *pg, int q, size_t which)
{
    return (_Atomic uint64_t *)(void *)((char *)PEER(pg, q) + which);
}

/* Sleeps until q's bell rings (or 10 ms pass), unless q's counter is there. */
static void sleep_on(em_process_group *pg, int q, size_t which, uint64_t target)
{
    shm_slot *peer = PEER(pg, q);
    uint32_t bell = atomic_load(&peer->bell);
    atomic_fetch_add(&peer->sleepers, 1);   /* seq_cst: ordered before re-reading the counter */
    if (atomic_load(counter(pg, q, which)) < target) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        syscall(SYS_futex, &peer->bell, FUTEX_WAIT, bell, &ts, NULL, 0);
    }
    atomic_fetch_sub(&peer->sleepers, 1);
}

/* The lowest of the peers' counters `which`; *who gets a peer that has it. */
static uint64_t peers_min(em_process_group *pg, size_t which, int *who)
{
    uint64_t m = UINT64_MAX;
    for (int q = 0; q < pg->world; q++) {
        if (q == pg->rank)
            continue;
        uint64_t v = atomic_load_explicit(counter(pg, q, which), memory_order_acquire);
        if (v < m) {
            m = v;
            *who = q;
        }
    }
    return m;
}

#define DONE(field, value) (atomic_store_explicit(&MY(pg)->field, (value), memory_order_release), ring_bell(pg))

/* Step geometry: part q of local step k is [k*S + q*pe, ...) clipped to n. */
typedef struct geom {
    int64_t n, pe, S;   /* elements: tensor, per part, per step */
    size_t es;
} geom;

static int64_t part_lo(const geom *G, int64_t k, int q)
{
    int64_t lo = k * G->S + (int64_t)q * G->pe;
    return lo < G->n ? lo : G->n;
}
static int64_t part_hi(const geom *G, int64_t k, int q)
{
    int64_t hi = part_lo(G, k, q) + G->pe;
    return hi < G->n ? hi : G->n;
}

/* rank q's ring slot for global step g; part q' sits at q' * pe within it */
static char *ring(em__pg_shm *sh, int q, uint64_t g)
{
    return sh->ring0 + ((size_t)q * sh->ring + (size_t)(g % sh->ring)) * sh->step;
}

/* A: my parts q != r of local step k into my slot */
static void phase_a(em_process_group *pg, em__pg_job *job, const geom *G, int64_t k, uint64_t g)
{
    char *buf = job->buf, *slot = ring(pg->shm, pg->rank, g);
    for (int q = 0; q < pg->world; q++) {
        if (q == pg->rank)
            continue;
        int64_t lo = part_lo(G, k, q), hi = part_hi(G, k, q);
        memcpy(slot + (size_t)q * (size_t)G->pe * G->es, buf + (size_t)lo * G->es, (size_t)(hi - lo) * G->es);
    }
}

/* B: part r over all ranks, in rank order, into my tensor and my slot */
static void phase_b(em_process_group *pg, em__pg_job *job, const geom *G, int64_t k, uint64_t g)
{
    em__pg_shm *sh = pg->shm;
    int r = pg->rank;
    int64_t lo = part_lo(G, k, r), hi = part_hi(G, k, r);
    size_t at = (size_t)r * (size_t)G->pe * G->es;
    char *mine = (char *)job->buf + (size_t)lo * G->es;
    for (int q = 0; q < pg->world; q++)
        sh->src[q] = q == r ? mine : ring(sh, q, g) + at;
    em__pg_reduce_into(mine, ring(sh, r, g) + at, sh->src, pg->world, hi - lo, job->dtype, job->red);
}

/* C: the other reduced parts q, from rank q's slot */
static void phase_c(em_process_group *pg, em__pg_job *job, const geom *G, int64_t k, uint64_t g)
{
    char *buf = job->buf;
    for (int q = 0; q < pg->world; q++) {
        if (q == pg->rank)
            continue;
        int64_t lo = part_lo(G, k, q), hi = part_hi(G, k, q);
        memcpy(buf + (size_t)lo * G->es, ring(pg->shm, q, g) + (size_t)q * (size_t)G->pe * G->es,
               (size_t)(hi - lo) * G->es);
    }
}

/* A dataflow loop: do whichever phase of whichever step is ready, C before B
 * before A (C frees ring slots for the peers, B unblocks their C). When the
 * peers are running too this settles into B(g), A(g+1), C(g); when a peer is
 * descheduled, this rank still gets ahead with A up to a ring's worth of
 * steps instead of waiting. Nothing ready: spin briefly, then sleep on the
 * bell of the peer that holds things up. */
static void shm_run(em_process_group *pg, em__pg_job *job)
{
    double t0 = job->t0;
    em__pg_shm *sh = pg->shm;
    geom G;
    G.n = job->numel;
    G.es = em_dtype_size(job->dtype);
    G.pe = (int64_t)(sh->step / (size_t)pg->world / G.es);
    G.S = G.pe * pg->world;
    int64_t steps = (G.n + G.S - 1) / G.S, a = 0, b = 0, c = 0;   /* next local step of each phase */
    uint64_t g0 = sh->steps, R = sh->ring;
    sh->steps += (uint64_t)steps;   /* every rank counts the same steps, even after a failure */
    double next_check = t0 + 0.25;
    long idle = 0;
    while (c < steps) {
        int who_c = -1, who_b = -1, who_a = -1;
        if (c < b && peers_min(pg, offsetof(shm_slot, b), &who_c) >= g0 + (uint64_t)c + 1) {
            phase_c(pg, job, &G, c, g0 + (uint64_t)c);
            c++;
            DONE(c, g0 + (uint64_t)c);
            idle = 0;
            continue;
        }
        if (b < a && peers_min(pg, offsetof(shm_slot, a), &who_b) >= g0 + (uint64_t)b + 1) {
            phase_b(pg, job, &G, b, g0 + (uint64_t)b);
            b++;
            DONE(b, g0 + (uint64_t)b);
            idle = 0;
            continue;
        }
        /* my slot for step g is free once every peer finished C(g - R) */
        uint64_t ga = g0 + (uint64_t)a;
        if (a < steps && (ga < R || peers_min(pg, offsetof(shm_slot, c), &who_a) >= ga - R + 1)) {
            phase_a(pg, job, &G, a, ga);
            a++;
            DONE(a, g0 + (uint64_t)a);
            idle = 0;
            continue;
        }
        /* nothing is ready */
        int q = who_c >= 0 ? who_c : who_b >= 0 ? who_b : who_a;
        size_t which = who_c >= 0 ? offsetof(shm_slot, b) : who_b >= 0 ? offsetof(shm_slot, a) : offsetof(shm_slot, c);
        uint64_t target = who_c >= 0 ? g0 + (uint64_t)c + 1 : who_b >= 0 ? g0 + (uint64_t)b + 1 : ga - R + 1;
        double now = em__pg_now(), waited = now - t0;
        if (waited > pg->timeout_s) {
            char stage[96];
            snprintf(stage, sizeof stage, "in the shared-memory all-reduce, waiting for rank %d", q);
            em__pg_timeout(pg, job, stage);
            return;
        }
        if (now > next_check) {
            char dead[96], what[160];
            next_check = now + 0.25;
            if (shm_dead_peer(pg, dead, sizeof dead)) {
                em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d failed: %s exited during the shared-memory all-reduce",
                                em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, dead);
                return;
            }
        }
        if (idle++ < 256)
            em__pg_backoff(idle, 0);
        else
            sleep_on(pg, q, which, target);
    }
}

const em__pg_transport em__pg_shm_transport = {
    .name = "shm",
    .setup = shm_setup,
    .close = shm_close,
    .takes = shm_takes,
    .run = shm_run,
    .enter = shm_enter,
    .laggards = shm_laggards,
    .dead_peer = shm_dead_peer,
};
