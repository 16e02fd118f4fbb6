/* ember — safetensors reading and writing.
 *
 * Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * u64 N, then N bytes of UTF-8 JSON (an object; the writer pads it with spaces
 * so that the data starts 8-byte aligned), then the data section. Each JSON
 * entry except the optional "__metadata__" (an object of string -> string) is
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, offsets
 * relative to the data section, little-endian, row-major.
 *
 * Reading maps the file read-only (MAP_PRIVATE) and validates the whole header
 * at open, as strictly as the reference implementation: the tensors' byte
 * ranges, sorted by offset, must tile the data section exactly (no overlap,
 * no hole, no trailing bytes) and each must hold exactly numel * dtype-size
 * bytes. Every problem is an em_status with a message naming the file and the
 * tensor or field. em_safetensors_get returns a copy (a new contiguous CPU
 * tensor); zero-copy views into the mapping may come later.
 *
 * Writing is atomic: "<path>.tmp.<pid>", fsync, rename over path, fsync the
 * directory. Any failure removes the temporary file and leaves an existing
 * file at path untouched. The layout matches the Python library's: tensors
 * ordered by dtype (widest first, in safetensors' dtype order) then by name,
 * so each tensor's data is aligned to its element size; "__metadata__" first
 * with keys sorted; compact JSON padded with spaces to a multiple of 8. Saving
 * the tensors of a file the Python library wrote reproduces it byte for byte.
 *
 * JSON parsing uses cJSON with its allocation hooks routed through em__malloc,
 * so the fail-the-Nth-allocation switch reaches the parser too.
 */
#include "tensor/tensor_internal.h"
#include "tensor/file_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

/* __metadata__ key holding the CRC-32C of the data section (8 lowercase hex
 * digits), written by em_safetensors_save and verified by open when present;
 * other readers (safetensors, transformers) ignore it. */
#define ST_CRC_KEY "ember_crc32c"
#define ST_CRC_PLACEHOLDER "00000000"
#define ST_MAX_HEADER 100000000ull      /* the reference implementation's cap */
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers lose precision */

/* ---- dtypes ---------------------------------------------------------------- */

static const char *const st_dtype_names[EM_NUM_DTYPES] = {
    [EM_F32] = "F32", [EM_F64] = "F64", [EM_F16] = "F16", [EM_BF16] = "BF16",
    [EM_I64] = "I64", [EM_I32] = "I32", [EM_BOOL] = "BOOL",
};
/* Position in safetensors' Dtype enum; its writer orders tensors by it, descending. */
static const int st_dtype_rank[EM_NUM_DTYPES] = {
    [EM_BOOL] = 0, [EM_F16] = 1, [EM_BF16] = 2, [EM_I32] = 3, [EM_F32] = 4, [EM_F64] = 5, [EM_I64] = 6,
};
/* Valid safetensors dtypes that ember has no dtype for. */
static const char *const st_unsupported[] = {
    "U8", "I8", "U16", "I16", "U32", "U64", "C64", "F4", "F6_E2M3", "F6_E3M2",
    "F8_E5M2", "F8_E4M3", "F8_E8M0",
};

/* ---- the open file ---------------------------------------------------------- */

typedef struct st_entry {
    const char *name;    /* points into the cJSON tree */
    em_dtype dtype;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
    int order;           /* position in the header, to keep sorting stable */
} st_entry;

struct em_safetensors {
    char *path;
    uint8_t *map;              /* the whole file, PROT_READ, MAP_PRIVATE */
    size_t map_len;
    const uint8_t *data;       /* the data section */
    uint64_t data_len;
    cJSON *json;               /* the parsed header; owns names and metadata */
    const cJSON *meta;         /* "__metadata__" object or NULL */
    int n;
    st_entry *entries;         /* sorted by (begin, end): "file order" */
    const st_entry **by_name;  /* the entries sorted by name, for lookup */
};

static void st_free(em_safetensors *st)
{
    if (!st) return;
    if (st->map) munmap(st->map, st->map_len);
    cJSON_Delete(st->json);
    em__free(st->entries);
    em__free((void *)st->by_name);
    em__free(st->path);
    em__free(st);
}

void em_safetensors_close(em_safetensors *st) { st_free(st); }

/* Index of the first byte that is not valid UTF-8, or n when all are. */
static size_t st_utf8_check(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return i;
        i += len;
    }
    return n;
}

/* A JSON number that is an exact non-negative integer (<= 2^53). */
static bool st_json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_EXACT) || (double)(uint64_t)d != d) return false;
    *out = (uint64_t)d;
    return true;
}

/* Parses and checks one tensor entry (everything but the overlap/hole checks). */
static em_status st_parse_entry(const em_safetensors *st, const cJSON *item, st_entry *e)
{
    const char *path = st->path, *name = item->string;
    e->name = name;
    if (!cJSON_IsObject(item))
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': entry is %s, not an object", path, name, em__json_kind(item));

    /* dtype */
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!dt) return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': missing \"dtype\"", path, name);
    if (!cJSON_IsString(dt))
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is %s, not a string", path, name, em__json_kind(dt));
    int found = -1;
    for (int d = 0; d < EM_NUM_DTYPES; d++)
        if (strcmp(dt->valuestring, st_dtype_names[d]) == 0) found = d;
    if (found < 0) {
        for (size_t u = 0; u < sizeof st_unsupported / sizeof *st_unsupported; u++)
            if (strcmp(dt->valuestring, st_unsupported[u]) == 0)
                return em__fail(EM_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported by ember "
                                "(F32, F64, F16, BF16, I64, I32, BOOL are)", path, name, dt->valuestring);
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': unknown dtype \"%s\"", path, name, dt->valuestring);
    }
    e->dtype = (em_dtype)found;

    /* shape */
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!sh) return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': missing \"shape\"", path, name);
    if (!cJSON_IsArray(sh))
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': \"shape\" is %s, not an array", path, name, em__json_kind(sh));
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > EM_MAX_DIMS)
        return em__fail(EM_ERR_UNSUPPORTED, "%s: tensor '%s': shape has %d dims; ember supports at most %d",
                        path, name, ndim, EM_MAX_DIMS);
    e->ndim = ndim;
    uint64_t numel = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *v = sh->child; v; v = v->next, d++) {
        uint64_t x;
        if (!st_json_uint(v, &x)) {
            char buf[64] = "";
            if (cJSON_IsNumber(v)) snprintf(buf, sizeof buf, " (%g)", v->valuedouble);
            return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': shape[%d] is %s%s, not a non-negative integer",
                            path, name, d, em__json_kind(v), buf);
        }
        e->shape[d] = (int64_t)x;
        if (__builtin_mul_overflow(numel, x, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)em_dtype_size(e->dtype), &nbytes) ||
        nbytes > (uint64_t)INT64_MAX)
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", path, name, em__dims_str(ndim, e->shape));

    /* data_offsets */
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!off) return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': missing \"data_offsets\"", path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !st_json_uint(off->child, &e->begin) ||
        !st_json_uint(off->child->next, &e->end))
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not a pair of non-negative integers [begin, end]",
                        path, name);
    if (e->begin > e->end)
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] have begin > end", path, name,
                        (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > st->data_len)
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data section "
                        "(%llu bytes; is the file truncated?)", path, name, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)st->data_len);
    if (e->end - e->begin != nbytes)
        return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape %s of %s "
                        "needs %llu", path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)(e->end - e->begin), em__dims_str(ndim, e->shape),
                        st_dtype_names[e->dtype], (unsigned long long)nbytes);
    return EM_OK;
}

static em_status st_parse_metadata(const em_safetensors *st, const cJSON *meta)
{
    if (!cJSON_IsObject(meta))
        return em__fail(EM_ERR_FORMAT, "%s: \"__metadata__\" is %s, not an object of strings", st->path, em__json_kind(meta));
    for (const cJSON *v = meta->child; v; v = v->next) {
        if (!cJSON_IsString(v))
            return em__fail(EM_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is %s, not a string", st->path,
                            v->string, em__json_kind(v));
        for (const cJSON *w = meta->child; w != v; w = w->next)
            if (strcmp(w->string, v->string) == 0)
                return em__fail(EM_ERR_FORMAT, "%s: \"__metadata__\" has the key '%s' twice", st->path, v->string);
    }
    return EM_OK;
}

static int st_cmp_offsets(const void *pa, const void *pb)
{
    const st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

static int st_cmp_names(const void *pa, const void *pb)
{
    return strcmp((*(const st_entry *const *)pa)->name, (*(const st_entry *const *)pb)->name);
}

/* Parses the header at st->map (already length-checked) into st. */
static em_status st_parse_header(em_safetensors *st, uint64_t hlen)
{
    const char *path = st->path;
    const char *hdr = (const char *)st->map + 8;

    size_t bad = st_utf8_check((const uint8_t *)hdr, (size_t)hlen);
    if (bad != hlen)
        return em__fail(EM_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu of the header)", path, bad);

    em__json_init();
    em_clear_error();
    const char *end = NULL;
    st->json = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, false);
    if (!st->json) {
        if (em_last_status() == EM_ERR_OOM) return em__fail(EM_ERR_OOM, "%s: out of memory parsing the %llu-byte header", path,
                                         (unsigned long long)hlen);
        size_t pos = end && end >= hdr ? (size_t)(end - hdr) : 0;
        char near[24] = "";
        size_t k = 0;
        for (size_t i = pos; i < hlen && k < sizeof near - 1 && k < 16; i++)
            near[k++] = (hdr[i] >= 0x20 && hdr[i] < 0x7f) ? hdr[i] : '?';
        near[k] = 0;
        return em__fail(EM_ERR_FORMAT, "%s: header is not valid JSON (error at byte %zu of the header, near \"%s\")",
                        path, pos, near);
    }
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return em__fail(EM_ERR_FORMAT, "%s: header has trailing bytes after its JSON object (at byte %zu)", path,
                            (size_t)(p - hdr));
    if (!cJSON_IsObject(st->json))
        return em__fail(EM_ERR_FORMAT, "%s: header is %s, not a JSON object", path, em__json_kind(st->json));

    int n = 0;
    for (const cJSON *it = st->json->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (st->meta) return em__fail(EM_ERR_FORMAT, "%s: header has \"__metadata__\" twice", path);
            em_status s = st_parse_metadata(st, it);
            if (s) return s;
            st->meta = it;
        } else {
            n++;
        }
    }

    st->entries = em__calloc((size_t)(n ? n : 1), sizeof *st->entries);
    st->by_name = em__calloc((size_t)(n ? n : 1), sizeof *st->by_name);
    if (!st->entries || !st->by_name)
        return em__fail(EM_ERR_OOM, "%s: out of memory reading the header (%d tensors)", path, n);
    int i = 0;
    for (const cJSON *it = st->json->child; it; it = it->next) {
        if (it == st->meta) continue;
        em_status s = st_parse_entry(st, it, &st->entries[i]);
        if (s) return s;
        st->entries[i].order = i;
        i++;
    }
    st->n = n;

    /* file order is offset order; then duplicates, by name; then the ranges must tile the data */
    qsort(st->entries, (size_t)n, sizeof *st->entries, st_cmp_offsets);
    for (i = 0; i < n; i++) st->by_name[i] = &st->entries[i];
    qsort(st->by_name, (size_t)n, sizeof *st->by_name, st_cmp_names);
    for (i = 1; i < n; i++)
        if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0)
            return em__fail(EM_ERR_FORMAT, "%s: header has the tensor '%s' twice", path, st->by_name[i]->name);
    uint64_t expect = 0;
    for (i = 0; i < n; i++) {
        const st_entry *e = &st->entries[i];
        if (e->begin < expect)
            return em__fail(EM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' (which ends at %llu)",
                            path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                            st->entries[i - 1].name, (unsigned long long)expect);
        if (e->begin > expect)
            return em__fail(EM_ERR_FORMAT, "%s: hole in the data section: bytes [%llu, %llu) before tensor '%s' belong to no tensor",
                            path, (unsigned long long)expect, (unsigned long long)e->begin, e->name);
        expect = e->end;
    }
    if (expect != st->data_len)
        return em__fail(EM_ERR_FORMAT, "%s: data section has %llu bytes but the tensors cover only %llu "
                        "(hole or trailing bytes at the end)", path, (unsigned long long)st->data_len,
                        (unsigned long long)expect);
    return EM_OK;
}

/* A file ember saved carries the CRC-32C of its data section: a damaged byte
 * (bit rot, a bad copy) is refused at open instead of loading wrong weights.
 * Files without the key (other writers) load unverified. */
static em_status st_verify_checksum(const em_safetensors *st)
{
    const char *want = em_safetensors_metadata(st, ST_CRC_KEY);
    if (!want) return EM_OK;
    char *end = NULL;
    unsigned long v = strtoul(want, &end, 16);
    if (strlen(want) != 8 || *end)
        return em__fail(EM_ERR_FORMAT, "%s: \"__metadata__\" field \"" ST_CRC_KEY "\" is '%s', not 8 hex digits",
                        st->path, want);
    uint32_t got = em__crc32c(st->data, (size_t)st->data_len);
    if (got != (uint32_t)v)
        return em__fail(EM_ERR_FORMAT, "%s: the tensor data is damaged: its CRC-32C is %08" PRIx32 ", but the file "
                        "was saved with %s (\"" ST_CRC_KEY "\"); restore the file from a good copy", st->path, got, want);
    return EM_OK;
}

em_status em_safetensors_open(const char *path, em_safetensors **out)
{
    if (!path || !out) {
        em__misuse("em_safetensors_open", "path and out must not be NULL");
        return EM_ERR_INVALID;
    }
    *out = NULL;
    em_safetensors *st = em__calloc(1, sizeof *st);
    size_t plen = strlen(path);
    char *pcopy = st ? em__malloc(plen + 1) : NULL;
    if (!pcopy) {
        em__free(st);
        return em__fail(EM_ERR_OOM, "%s: out of memory opening the file", path);
    }
    memcpy(pcopy, path, plen + 1);
    st->path = pcopy;

    em_status s = EM_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO must not block the open (refused below) */
    if (fd < 0) {
        int err = errno;
        s = em__fail(err == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        s = em__fail(EM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        s = em__fail(EM_ERR_IO, "%s: not a regular file", path);
        close(fd);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        if (size == 0) s = em__fail(EM_ERR_FORMAT, "%s: empty file (0 bytes); no safetensors header", path);
        else s = em__fail(EM_ERR_FORMAT, "%s: file is %llu bytes, too short for the 8-byte header length",
                          path, (unsigned long long)size);
        goto fail;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_err = errno;
    close(fd);
    if (map == MAP_FAILED) {
        s = em__fail(map_err == ENOMEM ? EM_ERR_OOM : EM_ERR_IO, "%s: cannot map %llu bytes: %s", path,
                     (unsigned long long)size, strerror(map_err));
        goto fail;
    }
    st->map = map;
    st->map_len = (size_t)size;

    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = (hlen << 8) | st->map[b];
    if (hlen > ST_MAX_HEADER) {
        s = em__fail(EM_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", path,
                     (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        s = em__fail(EM_ERR_FORMAT, "%s: header length %llu exceeds the %llu bytes after the 8-byte length "
                     "(is the file truncated?)", path, (unsigned long long)hlen, (unsigned long long)(size - 8));
        goto fail;
    }
    st->data = st->map + 8 + hlen;
    st->data_len = size - 8 - hlen;
    s = st_parse_header(st, hlen);
    if (s) goto fail;
    s = st_verify_checksum(st);
    if (s) goto fail;
    *out = st;
    return EM_OK;
fail:
    st_free(st);
    return s;
}

int em_safetensors_count(const em_safetensors *st) { return st ? st->n : 0; }

const char *em_safetensors_name(const em_safetensors *st, int i)
{
    if (!st || i < 0 || i >= st->n) {
        em__misuse("em_safetensors_name", "index %d out of range for a file of %d tensors", i, st ? st->n : 0);
        return NULL;
    }
    return st->entries[i].name;
}

const char *em_safetensors_metadata(const em_safetensors *st, const char *key)
{
    if (!st || !key || !st->meta) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->meta, key);
    return v ? v->valuestring : NULL;
}

static const st_entry *st_find(const em_safetensors *st, const char *name)
{
    int lo = 0, hi = st->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

em_tensor *em_safetensors_get(em_safetensors *st, const char *name)
{
    EM_CHECK(st && name, "em_safetensors_get", "file and name must not be NULL");
    const st_entry *e = st_find(st, name);
    if (!e) {
        em__fail(EM_ERR_NOT_FOUND, "%s: no tensor named '%s'", st->path, name);
        return NULL;
    }
    em_tensor *t = em__empty(e->ndim, e->shape, e->dtype, EM_CPU);
    if (!t) return NULL;
    size_t nb = (size_t)(e->end - e->begin);
    if (nb) memcpy(em_data_ptr(t), st->data + e->begin, nb);
    if (e->dtype == EM_BOOL) {   /* any non-zero byte is true; ember stores 0/1 */
        uint8_t *p = em_data_ptr(t);
        for (size_t i = 0; i < nb; i++) p[i] = p[i] != 0;
    }
    return t;
}

/* ---- writing ---------------------------------------------------------------- */

/* JSON text built in two passes: with p == NULL it only measures. */
typedef struct st_jbuf { char *p; size_t len; } st_jbuf;

static void st_put(st_jbuf *b, const char *s, size_t n)
{
    if (b->p) memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void st_puts(st_jbuf *b, const char *s) { st_put(b, s, strlen(s)); }
static void st_putu(st_jbuf *b, uint64_t v)
{
    char tmp[24];
    st_put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v));
}
/* A quoted JSON string, escaped as serde_json does. */
static void st_putq(st_jbuf *b, const char *s)
{
    st_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        switch (*c) {
        case '"': st_put(b, "\\\"", 2); break;
        case '\\': st_put(b, "\\\\", 2); break;
        case '\b': st_put(b, "\\b", 2); break;
        case '\f': st_put(b, "\\f", 2); break;
        case '\n': st_put(b, "\\n", 2); break;
        case '\r': st_put(b, "\\r", 2); break;
        case '\t': st_put(b, "\\t", 2); break;
        default:
            if (*c < 0x20) st_put(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", *c));
            else st_put(b, (const char *)c, 1);
        }
    }
    st_put(b, "\"", 1);
}

typedef struct st_item {
    const char *name;
    em_tensor *t;
    uint64_t begin, end;
} st_item;

static int st_cmp_item_names(const void *pa, const void *pb)
{
    return strcmp(((const st_item *)pa)->name, ((const st_item *)pb)->name);
}
static int st_cmp_item_layout(const void *pa, const void *pb)
{
    const st_item *a = pa, *b = pb;
    int ra = st_dtype_rank[a->t->dtype], rb = st_dtype_rank[b->t->dtype];
    if (ra != rb) return rb - ra;
    return strcmp(a->name, b->name);
}
static int st_cmp_strp(const void *pa, const void *pb)
{
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

static void st_header(st_jbuf *b, int n, const st_item *items, int n_meta, const char *const *keys,
                      const char *const *vals)
{
    st_put(b, "{", 1);
    if (n_meta > 0) {
        st_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) st_put(b, ",", 1);
            st_putq(b, keys[i]);
            st_put(b, ":", 1);
            st_putq(b, vals[i]);
        }
        st_put(b, "}", 1);
    }
    for (int i = 0; i < n; i++) {
        const em_tensor *t = items[i].t;
        if (i || n_meta > 0) st_put(b, ",", 1);
        st_putq(b, items[i].name);
        st_puts(b, ":{\"dtype\":\"");
        st_puts(b, st_dtype_names[t->dtype]);
        st_puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) st_put(b, ",", 1);
            st_putu(b, (uint64_t)t->shape[d]);
        }
        st_puts(b, "],\"data_offsets\":[");
        st_putu(b, items[i].begin);
        st_put(b, ",", 1);
        st_putu(b, items[i].end);
        st_puts(b, "]}");
    }
    st_put(b, "}", 1);
}

/* Writes data bytes and continues the file's data checksum. */
static bool st_emit(int fd, const void *p, size_t n, uint32_t *crc)
{
    *crc = em__crc32c_update(*crc, p, n);
    return em__write_all(fd, p, n);
}

#define ST_SCRATCH (1u << 20)

/* Writes the logical contents of a non-contiguous CPU tensor, row-major,
 * gathering elements into scratch. */
static bool st_write_strided(int fd, const em_tensor *t, uint8_t *scratch, uint32_t *crc)
{
    size_t es = em_dtype_size(t->dtype);
    const uint8_t *base = (const uint8_t *)t->storage->data + (size_t)t->offset * es;
    int nd = t->ndim;
    if (nd == 0 || em_numel(t) == 0) return st_emit(fd, base, nd == 0 ? es : 0, crc);
    int64_t inner = t->shape[nd - 1], istride = t->stride[nd - 1] * (int64_t)es;
    int64_t rows = em_numel(t) / inner;
    int64_t idx[EM_MAX_DIMS] = {0};
    size_t fill = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * t->stride[d];
        const uint8_t *row = base + off * (int64_t)es;
        for (int64_t j = 0; j < inner; j++) {
            if (fill + es > ST_SCRATCH) {
                if (!st_emit(fd, scratch, fill, crc)) return false;
                fill = 0;
            }
            const uint8_t *src = row + j * istride;
            switch (es) {   /* fixed-size copies compile to single moves */
            case 1: scratch[fill] = *src; break;
            case 2: memcpy(scratch + fill, src, 2); break;
            case 4: memcpy(scratch + fill, src, 4); break;
            default: memcpy(scratch + fill, src, 8); break;
            }
            fill += es;
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return st_emit(fd, scratch, fill, crc);
}

static em_status st_save(const char *op, bool checksum, const char *path, int n, const char *const *names,
                         em_tensor *const *ts, int n_meta, const char *const *meta_keys,
                         const char *const *meta_values)
{
    if (!path || n < 0 || (n > 0 && (!names || !ts)) || n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values))) {
        em__misuse(op, "path, names, tensors and metadata arrays must be given (n=%d, n_meta=%d)", n, n_meta);
        return EM_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        if (!names[i]) {
            em__misuse(op, "name %d is NULL", i);
            return EM_ERR_INVALID;
        }
        if (!ts[i]) {   /* an earlier failure propagates without a second message */
            if (em_last_status() != EM_OK) return em_last_status();
            em__misuse(op, "tensor '%s' is NULL", names[i]);
            return EM_ERR_INVALID;
        }
        if (strcmp(names[i], "__metadata__") == 0) {
            em__misuse(op, "\"__metadata__\" is reserved and cannot name a tensor");
            return EM_ERR_INVALID;
        }
        if (ts[i]->device.type != EM_DEVICE_CPU) {
            char dev[16];
            em__misuse(op, "tensor '%s' is on %s; move it to the CPU first (em_to)", names[i],
                       em_device_str(ts[i]->device, dev));
            return EM_ERR_INVALID;
        }
        size_t bad = st_utf8_check((const uint8_t *)names[i], strlen(names[i]));
        if (names[i][bad]) {
            em__misuse(op, "tensor name %d is not valid UTF-8", i);
            return EM_ERR_INVALID;
        }
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i]) {
            em__misuse(op, "metadata key or value %d is NULL", i);
            return EM_ERR_INVALID;
        }
        if (strcmp(meta_keys[i], ST_CRC_KEY) == 0) {
            em__misuse(op, "metadata key \"" ST_CRC_KEY "\" is reserved: ember writes the data's checksum there");
            return EM_ERR_INVALID;
        }
        if (meta_keys[i][st_utf8_check((const uint8_t *)meta_keys[i], strlen(meta_keys[i]))] ||
            meta_values[i][st_utf8_check((const uint8_t *)meta_values[i], strlen(meta_values[i]))]) {
            em__misuse(op, "metadata entry '%s' is not valid UTF-8", meta_keys[i]);
            return EM_ERR_INVALID;
        }
    }

    em_status s = EM_OK;
    int fd = -1;
    bool created = false;   /* the temporary file exists and must go on failure */
    const char *dup_tensor = NULL, *dup_key = NULL;   /* misuse, reported once all is freed */
    char *tmp = NULL, *hdr = NULL;
    uint8_t *scratch = NULL;
    size_t plen = strlen(path);
    st_item *items = em__malloc(sizeof *items * (size_t)(n ? n : 1));
    const char **mk = em__malloc(sizeof *mk * 2 * (size_t)(n_meta + 1));
    tmp = em__malloc(plen + 32);
    if (!items || !mk || !tmp) {
        s = em__fail(EM_ERR_OOM, "%s: out of memory preparing to save %d tensors", path, n);
        goto done;
    }

    /* names and metadata keys must be unique */
    for (int i = 0; i < n; i++) items[i] = (st_item){ .name = names[i], .t = ts[i] };
    qsort(items, (size_t)n, sizeof *items, st_cmp_item_names);
    for (int i = 1; i < n; i++)
        if (strcmp(items[i - 1].name, items[i].name) == 0) {
            dup_tensor = items[i].name;
            s = EM_ERR_INVALID;
            goto done;
        }
    /* the checksum key joins the caller's; its value is patched in after the data */
    const char **mv = mk + n_meta + 1;
    for (int i = 0; i < n_meta; i++) mk[i] = meta_keys[i];
    int n_all = n_meta + checksum;
    if (checksum) mk[n_meta] = ST_CRC_KEY;
    qsort(mk, (size_t)n_all, sizeof *mk, st_cmp_strp);
    for (int i = 0; i < n_all; i++) {
        if (strcmp(mk[i], ST_CRC_KEY) == 0) {
            mv[i] = ST_CRC_PLACEHOLDER;
            continue;
        }
        if (i && strcmp(mk[i - 1], mk[i]) == 0) {
            dup_key = mk[i];
            s = EM_ERR_INVALID;
            goto done;
        }
        for (int j = 0; j < n_meta; j++)
            if (meta_keys[j] == mk[i] || strcmp(meta_keys[j], mk[i]) == 0) { mv[i] = meta_values[j]; break; }
    }

    /* layout: widest dtype first, then by name; data back to back */
    qsort(items, (size_t)n, sizeof *items, st_cmp_item_layout);
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        items[i].begin = pos;
        pos += (uint64_t)em_numel(items[i].t) * em_dtype_size(items[i].t->dtype);
        items[i].end = pos;
    }
    st_jbuf jb = { 0 };
    st_header(&jb, n, items, n_all, mk, mv);
    size_t hlen = (jb.len + 7) / 8 * 8;
    hdr = em__malloc(8 + hlen);
    if (!hdr) {
        s = em__fail(EM_ERR_OOM, "%s: out of memory building the %zu-byte header", path, hlen);
        goto done;
    }
    for (int b = 0; b < 8; b++) hdr[b] = (char)(((uint64_t)hlen >> (8 * b)) & 0xff);
    jb = (st_jbuf){ .p = hdr + 8 };
    st_header(&jb, n, items, n_all, mk, mv);
    memset(hdr + 8 + jb.len, ' ', hlen - jb.len);
    /* the first match is the metadata's (it leads the header; a quote inside a JSON string is escaped) */
    static const char needle[] = "\"" ST_CRC_KEY "\":\"" ST_CRC_PLACEHOLDER "\"";
    char *crc_at = checksum ? (char *)memmem(hdr + 8, hlen, needle, sizeof needle - 1) + strlen("\"" ST_CRC_KEY "\":\"")
                            : NULL;   /* the 8 hex digits, at file offset crc_at - hdr */
    uint32_t crc = 0;

    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        int err = errno;
        s = em__fail(err == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "%s: cannot save: creating the temporary file "
                     "'%s' failed: %s", path, tmp, strerror(err));
        goto done;
    }
    created = true;
    if (!em__write_all(fd, hdr, 8 + hlen)) goto write_error;
    for (int i = 0; i < n; i++) {
        em_tensor *t = items[i].t;
        size_t nb = (size_t)(items[i].end - items[i].begin);
        if (nb == 0) continue;
        if (em_is_contiguous(t)) {
            if (!st_emit(fd, em_data_ptr(t), nb, &crc)) goto write_error;
            continue;
        }
        if (!scratch && !(scratch = em__malloc(ST_SCRATCH))) {
            s = em__fail(EM_ERR_OOM, "%s: out of memory writing tensor '%s'", path, items[i].name);
            goto done;
        }
        if (!st_write_strided(fd, t, scratch, &crc)) goto write_error;
    }
    char hex[9];
    snprintf(hex, sizeof hex, "%08" PRIx32, crc);
    if (crc_at && pwrite(fd, hex, 8, (off_t)(crc_at - hdr)) != 8) goto write_error;
    if (fsync(fd) != 0) goto write_error;
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) goto write_error;
    if (rename(tmp, path) != 0) {
        s = em__fail(EM_ERR_IO, "%s: cannot save: renaming '%s' over it failed: %s", path, tmp, strerror(errno));
        goto done;
    }
    created = false;
    /* make the rename durable: fsync the directory (some filesystems refuse: EINVAL) */
    char *slash = strrchr(tmp, '/');
    if (!slash) strcpy(tmp, ".");
    else if (slash == tmp) tmp[1] = 0;
    else *slash = 0;
    int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL)
            s = em__fail(EM_ERR_IO, "%s: saved, but syncing its directory failed: %s", path, strerror(errno));
        close(dfd);
    }
    goto done;

write_error:
    s = em__fail(EM_ERR_IO, "%s: cannot save: writing the temporary file '%s' failed: %s", path, tmp, strerror(errno));
done:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    em__free(scratch);
    em__free(hdr);
    em__free(tmp);
    em__free(mk);
    em__free(items);
    if (dup_tensor) em__misuse(op, "duplicate tensor name '%s'", dup_tensor);
    if (dup_key) em__misuse(op, "duplicate metadata key '%s'", dup_key);
    return s;
}

em_status em_safetensors_save(const char *path, int n, const char *const *names, em_tensor *const *ts,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values)
{
    return st_save("em_safetensors_save", false, path, n, names, ts, n_meta, meta_keys, meta_values);
}

em_status em_safetensors_save_checked(const char *path, int n, const char *const *names, em_tensor *const *ts,
                                      int n_meta, const char *const *meta_keys, const char *const *meta_values)
{
    return st_save("em_safetensors_save_checked", true, path, n, names, ts, n_meta, meta_keys, meta_values);
}
