/* safetensors: round trips of every dtype and layout, metadata, the exact
 * byte layout of the Python writer, a PyTorch-written fixture, atomic saves,
 * a corpus of corrupt files (each rejected with the right status and a message
 * naming the file and the problem), and the fail-the-Nth-allocation switch. */
#include "check_util.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------- */

/* A safetensors file from raw parts: LE u64 length of header, header, then
 * data_len bytes of data (zeros when data is NULL). */
static void write_st(const char *path, const char *header, const void *data, size_t data_len)
{
    size_t hl = strlen(header);
    uint8_t *b = calloc(1, 8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data) memcpy(b + 8 + hl, data, data_len);
    tu_write_file(path, b, 8 + hl + data_len);
    free(b);
}

/* Entries of the scratch directory whose name contains ".tmp." (leftover temporaries). */
static int count_temporaries(void)
{
    DIR *d = opendir(tu_scratch());
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* The logical contents of t (any layout), row-major, into out (numel*size bytes).
 * Independent of ember's copy kernels: walks the strides itself. */
static void gather_bytes(em_tensor *t, uint8_t *out)
{
    size_t es = em_dtype_size(t->dtype);
    int64_t n = em_numel(t), idx[EM_MAX_DIMS] = {0};
    const uint8_t *base = n ? em_data_ptr(t) : NULL;
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
        memcpy(out + (size_t)e * es, base + off * (int64_t)es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* got: what em_safetensors_get returned; want: what was saved (any layout). */
static void assert_same(em_tensor *got, em_tensor *want, const char *name)
{
    ck_assert_msg(got != NULL, "get '%s' failed: %s", name, em_last_error());
    ck_assert_int_eq(got->dtype, want->dtype);
    ck_assert_int_eq(got->ndim, want->ndim);
    for (int d = 0; d < want->ndim; d++) ck_assert_int_eq(got->shape[d], want->shape[d]);
    ck_assert(em_is_contiguous(got));
    ck_assert(got->device.type == EM_DEVICE_CPU);
    size_t nb = (size_t)em_numel(want) * em_dtype_size(want->dtype);
    uint8_t *w = malloc(nb + 1);
    gather_bytes(want, w);
    ck_assert_msg(nb == 0 || memcmp(em_data_ptr(got), w, nb) == 0, "tensor '%s' differs after the round trip", name);
    free(w);
}

static void assert_error_mentions(const char *path, const char *what)
{
    const char *msg = em_last_error();
    ck_assert_msg(strstr(msg, path) != NULL, "message does not name the path %s: %s", path, msg);
    ck_assert_msg(strstr(msg, what) != NULL, "message does not say \"%s\": %s", what, msg);
}

/* A 1-d tensor of n copies of v; made with em_set so that this test needs no fill kernel. */
static em_tensor *filled(int64_t n, em_dtype dt, double v)
{
    em_tensor *t = em_empty(1, &n, dt, EM_CPU);
    for (int64_t i = 0; i < n; i++) em_set(t, &i, v);
    return t;
}

static const char *dt_tag[EM_NUM_DTYPES] = {"f32", "f64", "f16", "bf16", "i64", "i32", "bool"};

/* ---- round trips ------------------------------------------------------------- */

START_TEST(round_trip_every_dtype)
{
    int64_t base = tu_live_bytes();
    enum { PER = 4 };
    em_tensor *ts[EM_NUM_DTYPES * PER];
    char names[EM_NUM_DTYPES * PER][32];
    const char *np[EM_NUM_DTYPES * PER];
    int n = 0;
    for (int dt = 0; dt < EM_NUM_DTYPES; dt++) {
        double lo = dt == EM_I64 || dt == EM_I32 ? -1e6 : -100, hi = -lo;
        ts[n] = tu_rand_tensor(EM_SHAPE(3, 5), (em_dtype)dt, lo, hi, 100 + (uint64_t)dt, NULL);
        snprintf(names[n++], 32, "mat_%s", dt_tag[dt]);
        ts[n] = tu_rand_tensor(0, NULL, (em_dtype)dt, lo, hi, 200 + (uint64_t)dt, NULL);
        snprintf(names[n++], 32, "scalar_%s", dt_tag[dt]);
        ts[n] = em_empty(EM_SHAPE(0, 3), (em_dtype)dt, EM_CPU);
        snprintf(names[n++], 32, "empty_%s", dt_tag[dt]);
        ts[n] = em_empty(EM_SHAPE(4, 0, 2), (em_dtype)dt, EM_CPU);
        snprintf(names[n++], 32, "empty3_%s", dt_tag[dt]);
    }
    /* i64 beyond 2^53 must survive exactly */
    int64_t big[4] = {INT64_MIN, INT64_MAX, (1ll << 53) + 1, -((1ll << 60) + 3)};
    em_release(ts[EM_I64 * PER]);
    ts[EM_I64 * PER] = em_from_data(big, EM_SHAPE(2, 2), EM_I64);
    for (int i = 0; i < n; i++) np[i] = names[i];

    const char *path = tu_scratch_path("all.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, n, np, ts, 0, NULL, NULL), EM_OK);
    ck_assert_int_eq(count_temporaries(), 0);

    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    ck_assert_int_eq(em_safetensors_count(st), n);
    int seen[EM_NUM_DTYPES * PER] = {0};
    for (int i = 0; i < n; i++) {
        const char *nm = em_safetensors_name(st, i);
        for (int j = 0; j < n; j++)
            if (strcmp(nm, names[j]) == 0) seen[j]++;
    }
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(seen[i], 1);
        em_tensor *g = em_safetensors_get(st, names[i]);
        assert_same(g, ts[i], names[i]);
        em_release(g);
    }
    ck_assert_ptr_null(em_safetensors_metadata(st, "format"));
    em_safetensors_close(st);
    for (int i = 0; i < n; i++) em_release(ts[i]);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(round_trip_non_contiguous)
{
    int64_t base = tu_live_bytes();
    const em_dtype dts[] = {EM_F32, EM_F16, EM_I64, EM_BOOL, EM_F64};
    em_tensor *owners[16], *ts[32];
    char names[32][32];
    const char *np[32];
    int no = 0, n = 0;
    for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
        em_dtype dt = dts[k];
        em_tensor *a = owners[no++] = tu_rand_tensor(EM_SHAPE(4, 6), dt, -50, 50, 7 + k, NULL);
        em_tensor *row = owners[no++] = tu_rand_tensor(EM_SHAPE(1, 3), dt, -50, 50, 70 + k, NULL);
        ts[n] = em_transpose(a, 0, 1);                         /* [6,4] */
        snprintf(names[n++], 32, "t_%s", dt_tag[dt]);
        ts[n] = em_narrow(a, 1, 2, 3);                         /* [4,3] with an offset */
        snprintf(names[n++], 32, "n_%s", dt_tag[dt]);
        ts[n] = em_expand(row, EM_SHAPE(5, 3));                /* stride 0 */
        snprintf(names[n++], 32, "e_%s", dt_tag[dt]);
        em_tensor *tr = em_transpose(a, 0, 1);
        ts[n] = em_select(tr, 0, 2);                           /* [4], stride 6 */
        em_release(tr);
        snprintf(names[n++], 32, "s_%s", dt_tag[dt]);
    }
    /* larger than the writer's 1 MiB scratch buffer */
    em_tensor *big = owners[no++] = tu_rand_tensor(EM_SHAPE(600, 500), EM_F32, -1, 1, 99, NULL);
    ts[n] = em_transpose(big, 0, 1);
    snprintf(names[n++], 32, "big_t");
    for (int i = 0; i < n; i++) np[i] = names[i];
    for (int i = 0; i < 4; i++) ck_assert_msg(!em_is_contiguous(ts[i]), "%s is contiguous", names[i]);
    ck_assert(!em_is_contiguous(ts[n - 1]));

    const char *path = tu_scratch_path("views.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, n, np, ts, 0, NULL, NULL), EM_OK);
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    for (int i = 0; i < n; i++) {
        em_tensor *g = em_safetensors_get(st, names[i]);
        assert_same(g, ts[i], names[i]);
        em_release(g);
    }
    em_safetensors_close(st);
    for (int i = 0; i < n; i++) em_release(ts[i]);
    for (int i = 0; i < no; i++) em_release(owners[i]);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(metadata_round_trip)
{
    const char *keys[] = {"format", "quote\"back\\slash", "\xc3\xbcnic\xc3\xb8" "de", "empty"};
    const char *vals[] = {"pt", "line\nbreak\ttab\x01" "ctl/", "\xe5\x80\xa4", ""};
    em_tensor *t = filled(2, EM_F32, 1);
    const char *path = tu_scratch_path("meta.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 4, keys, vals), EM_OK);
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    for (int i = 0; i < 4; i++) {
        const char *v = em_safetensors_metadata(st, keys[i]);
        ck_assert_msg(v && strcmp(v, vals[i]) == 0, "metadata '%s' came back as '%s'", keys[i], v ? v : "(null)");
    }
    ck_assert_ptr_null(em_safetensors_metadata(st, "missing"));
    ck_assert_ptr_null(em_safetensors_metadata(st, "Format"));
    em_safetensors_close(st);

    /* metadata only, no tensors */
    const char *p2 = tu_scratch_path("only-meta.safetensors");
    ck_assert_int_eq(em_safetensors_save(p2, 0, NULL, NULL, 1, keys, vals), EM_OK);
    ck_assert_int_eq(em_safetensors_open(p2, &st), EM_OK);
    ck_assert_int_eq(em_safetensors_count(st), 0);
    ck_assert_str_eq(em_safetensors_metadata(st, "format"), "pt");
    em_safetensors_close(st);

    /* no metadata: no "__metadata__" key at all */
    const char *p3 = tu_scratch_path("no-meta.safetensors");
    ck_assert_int_eq(em_safetensors_save(p3, 1, (const char *[]){"w"}, &t, 0, NULL, NULL), EM_OK);
    size_t len;
    uint8_t *b = (uint8_t *)tu_read_file(p3, &len);
    b[len] = 0;
    ck_assert_ptr_null(strstr((char *)b + 8, "__metadata__"));
    free(b);
    em_release(t);
}
END_TEST

/* The exact bytes the Python library writes for these tensors: widest dtype
 * first (in safetensors' order I64, F64, F32, I32, BF16, F16, BOOL), then by
 * name; compact JSON; header padded with spaces to a multiple of 8. */
START_TEST(header_layout_matches_python_writer)
{
    float b[2] = {1.0f, -2.5f};
    int64_t a = -7;
    uint8_t c[3] = {1, 0, 1};
    uint16_t d = 0x3fc0; /* bf16 1.5 */
    em_tensor *ts[4] = {em_from_data(b, EM_SHAPE(2), EM_F32), em_from_data(&a, EM_SHAPE(1), EM_I64),
                        em_from_data(c, EM_SHAPE(3), EM_BOOL), em_from_data(&d, 0, NULL, EM_BF16)};
    const char *names[4] = {"b", "a", "c", "d"};
    const char *path = tu_scratch_path("layout.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, 4, names, ts, 1, (const char *[]){"format"}, (const char *[]){"pt"}),
                     EM_OK);
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                       "\"d\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[16,18]},"
                       "\"c\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[18,21]}}";
    size_t jl = strlen(json), hl = (jl + 7) / 8 * 8, len;
    uint8_t *f = (uint8_t *)tu_read_file(path, &len);
    ck_assert_uint_eq(len, 8 + hl + 21);
    uint64_t got_hl = 0;
    for (int i = 7; i >= 0; i--) got_hl = got_hl << 8 | f[i];
    ck_assert_uint_eq(got_hl, hl);
    ck_assert_msg(memcmp(f + 8, json, jl) == 0, "header: %.*s", (int)jl, f + 8);
    for (size_t i = jl; i < hl; i++) ck_assert_int_eq(f[8 + i], ' ');
    const uint8_t *data = f + 8 + hl;
    ck_assert_int_eq(memcmp(data, &a, 8), 0);
    ck_assert_int_eq(memcmp(data + 8, b, 8), 0);
    ck_assert_int_eq(memcmp(data + 16, &d, 2), 0);
    ck_assert_int_eq(memcmp(data + 18, c, 3), 0);
    free(f);

    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    const char *order[4] = {"a", "b", "d", "c"};   /* file (offset) order */
    for (int i = 0; i < 4; i++) ck_assert_str_eq(em_safetensors_name(st, i), order[i]);
    em_safetensors_close(st);
    for (int i = 0; i < 4; i++) em_release(ts[i]);
}
END_TEST

/* tests/fixtures/st_torch.safetensors was written by PyTorch + safetensors
 * (tools/make-safetensors-fixture.py); the values are restated here. */
START_TEST(torch_fixture)
{
    int64_t base = tu_live_bytes();
    const char *fx = tu_fixture_path("st_torch.safetensors");
    em_safetensors *st = NULL;
    ck_assert_msg(em_safetensors_open(fx, &st) == EM_OK, "%s", em_last_error());
    ck_assert_str_eq(em_safetensors_metadata(st, "format"), "pt");
    const char *order[] = {"i64", "f64", "empty", "f32", "f32_special", "scalar", "i32", "bf16", "f16", "bool"};
    enum { N = sizeof order / sizeof *order };
    ck_assert_int_eq(em_safetensors_count(st), N);
    for (int i = 0; i < N; i++) ck_assert_str_eq(em_safetensors_name(st, i), order[i]);

    em_tensor *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = em_safetensors_get(st, order[i]);
        ck_assert_msg(t[i] != NULL, "%s", em_last_error());
    }
    /* i64 */
    const int64_t i64[6] = {INT64_MIN, -1, 0, 1, (1ll << 53) + 1, INT64_MAX};
    ck_assert_int_eq(t[0]->dtype, EM_I64);
    ck_assert_int_eq(t[0]->ndim, 1);
    ck_assert_int_eq(t[0]->shape[0], 6);
    ck_assert_int_eq(memcmp(em_data_ptr(t[0]), i64, sizeof i64), 0);
    /* f64: i / 3 */
    ck_assert_int_eq(t[1]->dtype, EM_F64);
    for (int i = 0; i < 5; i++) ck_assert(((double *)em_data_ptr(t[1]))[i] == i / 3.0);
    /* empty [0, 4] */
    ck_assert_int_eq(t[2]->dtype, EM_F32);
    ck_assert_int_eq(t[2]->ndim, 2);
    ck_assert_int_eq(t[2]->shape[0], 0);
    ck_assert_int_eq(t[2]->shape[1], 4);
    /* f32 [3, 4]: i * 0.25 - 1 */
    ck_assert_int_eq(t[3]->ndim, 2);
    ck_assert_int_eq(t[3]->shape[0], 3);
    ck_assert_int_eq(t[3]->shape[1], 4);
    for (int i = 0; i < 12; i++) ck_assert(((float *)em_data_ptr(t[3]))[i] == i * 0.25f - 1.0f);
    /* special f32 values, by bits (NaN: any NaN) */
    const uint32_t bits[6] = {0x7f800000u, 0xff800000u, 0, 0x80000000u, 0x00000001u, 0x7f7fffffu};
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, (char *)em_data_ptr(t[4]) + 4 * i, 4);
        if (i == 2) ck_assert(isnan(((float *)em_data_ptr(t[4]))[i]));
        else ck_assert_uint_eq(u, bits[i]);
    }
    /* scalar */
    ck_assert_int_eq(t[5]->ndim, 0);
    ck_assert(em_item(t[5]) == 3.25);
    /* i32 [3, 2]: (i - 3) * 1000003 */
    ck_assert_int_eq(t[6]->dtype, EM_I32);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(((int32_t *)em_data_ptr(t[6]))[i], (i - 3) * 1000003);
    /* bf16 [8]: i * 1.5 - 3; bf16 is the top half of the f32 bits */
    ck_assert_int_eq(t[7]->dtype, EM_BF16);
    for (int i = 0; i < 8; i++) {
        float want = i * 1.5f - 3.0f;
        uint32_t u;
        memcpy(&u, &want, 4);
        ck_assert_uint_eq(((uint16_t *)em_data_ptr(t[7]))[i], u >> 16);
        ck_assert(em_get(t[7], (int64_t[]){i}) == want);
    }
    /* f16 [2, 3, 2]: (i - 6) * 0.125 */
    ck_assert_int_eq(t[8]->dtype, EM_F16);
    ck_assert_int_eq(t[8]->ndim, 3);
    for (int i = 0; i < 12; i++) {
        int64_t idx[3] = {i / 6, i / 2 % 3, i % 2};
        ck_assert(em_get(t[8], idx) == (i - 6) * 0.125);
    }
    ck_assert_uint_eq(((uint16_t *)em_data_ptr(t[8]))[0], 0xBA00);   /* -0.75: sign 1, exponent 14, mantissa 0x200 */
    /* bool: i % 3 == 0 */
    ck_assert_int_eq(t[9]->dtype, EM_BOOL);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(((uint8_t *)em_data_ptr(t[9]))[i], i % 3 == 0);

    /* Saved back by ember, the file is byte-identical to the one PyTorch wrote. */
    const char *out = tu_scratch_path("resaved.safetensors");
    const char *meta_k[] = {"format"}, *meta_v[] = {"pt"};
    ck_assert_int_eq(em_safetensors_save(out, N, order, t, 1, meta_k, meta_v), EM_OK);
    size_t la, lb;
    uint8_t *a = (uint8_t *)tu_read_file(fx, &la), *b = (uint8_t *)tu_read_file(out, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert_msg(memcmp(a, b, la) == 0, "ember's file differs from the PyTorch-written fixture");
    free(a);
    free(b);
    /* For tools/make-safetensors-fixture.py --verify (run by hand). */
    const char *interop = getenv("EMBER_ST_INTEROP_OUT");
    if (interop && *interop) ck_assert_int_eq(em_safetensors_save(interop, N, order, t, 1, meta_k, meta_v), EM_OK);

    for (int i = 0; i < N; i++) em_release(t[i]);
    em_safetensors_close(st);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* Readers must accept what other writers may produce: an unpadded header
 * (unaligned data), whitespace, keys in any order, extra keys in an entry,
 * and BOOL bytes other than 0/1 (read as true). */
START_TEST(reads_unaligned_and_loose_headers)
{
    double v[2] = {1.0 / 3, -1e300};
    uint8_t data[16 + 3];
    memcpy(data, v, 16);
    data[16] = 0;
    data[17] = 2;
    data[18] = 255;
    const char *h = " { \"m\" : {\"data_offsets\":[16,19], \"shape\":[3], \"dtype\":\"BOOL\", \"extra\": null},\n"
                    "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}\n ";
    ck_assert_uint_ne(strlen(h) % 8, 0);
    const char *path = tu_scratch_path("loose.safetensors");
    write_st(path, h, data, sizeof data);
    em_safetensors *st = NULL;
    ck_assert_msg(em_safetensors_open(path, &st) == EM_OK, "%s", em_last_error());
    ck_assert_str_eq(em_safetensors_name(st, 0), "d");
    ck_assert_str_eq(em_safetensors_name(st, 1), "m");
    em_tensor *d = em_safetensors_get(st, "d"), *m = em_safetensors_get(st, "m");
    ck_assert_int_eq(memcmp(em_data_ptr(d), v, 16), 0);
    ck_assert_int_eq(((uint8_t *)em_data_ptr(m))[0], 0);
    ck_assert_int_eq(((uint8_t *)em_data_ptr(m))[1], 1);
    ck_assert_int_eq(((uint8_t *)em_data_ptr(m))[2], 1);
    em_release(d);
    em_release(m);
    em_safetensors_close(st);
}
END_TEST

START_TEST(missing_file_and_missing_tensor)
{
    em_safetensors *st = (em_safetensors *)1;
    const char *path = tu_scratch_path("nope.safetensors");
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_ERR_NOT_FOUND);
    ck_assert_ptr_null(st);
    assert_error_mentions(path, "No such file");

    ck_assert_int_eq(em_safetensors_open(tu_scratch(), &st), EM_ERR_IO);
    assert_error_mentions(tu_scratch(), "not a regular file");

    /* a FIFO at the path: refused at once (opening it for reading blocked for
     * ever, waiting for a writer); so are the other readers of outside files
     * (config.json, vocabularies, tables: em__read_file) */
    const char *fifo = tu_scratch_path("fifo.safetensors");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_int_eq(em_safetensors_open(fifo, &st), EM_ERR_IO);
    assert_error_mentions(fifo, "not a regular file");
    em_tokenizer *tok = NULL;
    ck_assert_int_ne(em_tokenizer_load(fifo, NULL, &tok), EM_OK);
    assert_error_mentions(fifo, "not a regular file");

    em_tensor *t = filled(2, EM_F32, 0);
    path = tu_scratch_path("one.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL), EM_OK);
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    em_clear_error();
    ck_assert_ptr_null(em_safetensors_get(st, "w2"));
    ck_assert_int_eq(em_last_status(), EM_ERR_NOT_FOUND);
    assert_error_mentions(path, "no tensor named 'w2'");
    em_safetensors_close(st);
    em_release(t);
}
END_TEST

/* ---- atomic saves ---------------------------------------------------------- */

START_TEST(save_into_missing_directory_fails_cleanly)
{
    em_tensor *t = filled(3, EM_F32, 1);
    const char *path = tu_scratch_path("no-such-dir/x.safetensors");
    em_status s = em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL);
    ck_assert_int_ne(s, EM_OK);
    ck_assert(s == EM_ERR_NOT_FOUND || s == EM_ERR_IO);
    assert_error_mentions(path, "No such file");
    struct stat sb;
    ck_assert_int_ne(stat(tu_scratch_path("no-such-dir"), &sb), 0);
    DIR *d = opendir(tu_scratch());
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) entries += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(entries, 0);
    em_release(t);
}
END_TEST

/* Renaming over a directory fails after the temporary file was written: the
 * temporary must go, the directory must stay. */
START_TEST(save_over_a_directory_removes_the_temporary)
{
    const char *path = tu_scratch_path("adir");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(mkdir(tu_scratch_path("adir/inner"), 0755), 0);
    em_tensor *t = filled(3, EM_F32, 1);
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL), EM_ERR_IO);
    assert_error_mentions(path, "renaming");
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_int_eq(count_temporaries(), 0);
    em_release(t);
}
END_TEST

/* Fail each allocation of a save in turn: the old file stays byte for byte,
 * no temporary is left, nothing leaks; once enough succeed the save lands. */
START_TEST(failed_save_keeps_the_old_file)
{
    const char *path = tu_scratch_path("model.safetensors");
    em_tensor *old = filled(4, EM_F32, 1.5);
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"old"}, &old, 0, NULL, NULL), EM_OK);
    size_t old_len;
    uint8_t *old_bytes = (uint8_t *)tu_read_file(path, &old_len);

    em_tensor *a = tu_rand_tensor(EM_SHAPE(5, 7), EM_F32, -1, 1, 5, NULL);
    em_tensor *at = em_transpose(a, 0, 1);   /* non-contiguous: needs the scratch buffer */
    em_tensor *ts[2] = {a, at};
    const char *names[2] = {"a", "at"};
    int64_t base = tu_live_bytes();
    bool failed_mid_write = false;
    int n;
    em_status s = EM_ERR_OOM;
    for (n = 1; n < 100; n++) {
        em_alloc_fail_after(n, false);
        s = em_safetensors_save(path, 2, names, ts, 1, (const char *[]){"k"}, (const char *[]){"v"});
        em_alloc_fail_after(0, false);
        if (s == EM_OK) break;
        ck_assert_int_eq(s, EM_ERR_OOM);
        assert_error_mentions(path, "out of memory");
        failed_mid_write |= strstr(em_last_error(), "writing tensor 'at'") != NULL;
        size_t len;
        uint8_t *now = (uint8_t *)tu_read_file(path, &len);
        ck_assert_uint_eq(len, old_len);
        ck_assert_int_eq(memcmp(now, old_bytes, len), 0);
        free(now);
        ck_assert_int_eq(count_temporaries(), 0);
        ck_assert_int_eq(tu_live_bytes(), base);
    }
    ck_assert_int_eq(s, EM_OK);
    ck_assert_int_gt(n, 3);
    ck_assert(failed_mid_write);
    ck_assert_int_eq(count_temporaries(), 0);
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    ck_assert_int_eq(em_safetensors_count(st), 2);
    em_tensor *g = em_safetensors_get(st, "at");
    assert_same(g, at, "at");
    em_release(g);
    em_safetensors_close(st);
    free(old_bytes);
    em_release(at);
    em_release(a);
    em_release(old);
}
END_TEST

/* ---- corrupt files ----------------------------------------------------------- */

typedef struct corrupt_case {
    const char *file;
    const char *header;       /* NULL: raw bytes below */
    size_t data_len;
    const uint8_t *raw;
    size_t raw_len;
    em_status status;
    const char *says;         /* expected in the message, besides the path */
} corrupt_case;

#define F32W(off) "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" off "}"

START_TEST(corrupt_files_are_rejected)
{
    int64_t base = tu_live_bytes();
    static const uint8_t len_100[13] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' '};
    static const uint8_t len_cap[8] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0};   /* 100000001 */
    static const uint8_t len_huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    static const uint8_t five[5] = {2, 0, 0, 0, 0};
    const corrupt_case cases[] = {
        {"empty", NULL, 0, (const uint8_t *)"", 0, EM_ERR_FORMAT, "empty file"},
        {"short-length", NULL, 0, five, 5, EM_ERR_FORMAT, "too short for the 8-byte header length"},
        {"length-past-eof", NULL, 0, len_100, 13, EM_ERR_FORMAT, "header length 100 exceeds the 5 bytes"},
        {"length-over-cap", NULL, 0, len_cap, 8, EM_ERR_FORMAT, "header length 100000001 exceeds the 100000000-byte limit"},
        {"length-2^63", NULL, 0, len_huge, 8, EM_ERR_FORMAT, "100000000-byte limit"},
        {"zero-length-header", "", 0, NULL, 0, EM_ERR_FORMAT, "not valid JSON"},
        {"bad-json", "{\"w\":{\"dtype\":\"F32\",", 0, NULL, 0, EM_ERR_FORMAT, "not valid JSON"},
        {"bad-json2", "{\"w\" 1}", 0, NULL, 0, EM_ERR_FORMAT, "not valid JSON"},
        {"not-object", "[1,2,3]", 0, NULL, 0, EM_ERR_FORMAT, "header is an array, not a JSON object"},
        {"trailing", "{} x", 0, NULL, 0, EM_ERR_FORMAT, "trailing bytes"},
        {"bad-utf8", "{\"\xff\":1}", 0, NULL, 0, EM_ERR_FORMAT, "not valid UTF-8"},
        {"entry-not-object", "{\"w\":3}", 0, NULL, 0, EM_ERR_FORMAT, "tensor 'w': entry is a number, not an object"},
        {"no-dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, EM_ERR_FORMAT,
         "tensor 'w': missing \"dtype\""},
        {"no-shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, NULL, 0, EM_ERR_FORMAT,
         "tensor 'w': missing \"shape\""},
        {"no-offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, NULL, 0, EM_ERR_FORMAT,
         "tensor 'w': missing \"data_offsets\""},
        {"dtype-not-string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, EM_ERR_FORMAT,
         "\"dtype\" is a number"},
        {"unknown-dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_FORMAT, "tensor 'w': unknown dtype \"F33\""},
        {"dtype-u8", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_UNSUPPORTED, "tensor 'w': dtype U8 is not supported"},
        {"dtype-i16", "{\"q\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_UNSUPPORTED, "tensor 'q': dtype I16 is not supported"},
        {"dtype-f8", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_UNSUPPORTED, "dtype F8_E4M3 is not supported"},
        {"shape-negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_FORMAT, "tensor 'w': shape[1] is a number (-2), not a non-negative integer"},
        {"shape-fraction", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_FORMAT, "shape[0] is a number (1.5), not a non-negative integer"},
        {"shape-string", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_FORMAT, "shape[0] is a string"},
        {"shape-not-array", "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, NULL, 0,
         EM_ERR_FORMAT, "\"shape\" is a number, not an array"},
        {"shape-9-dims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, NULL,
         0, EM_ERR_UNSUPPORTED, "shape has 9 dims; ember supports at most 8"},
        {"shape-overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}",
         4, NULL, 0, EM_ERR_FORMAT, "shape [4294967296,4294967296,4] is too large"},
        {"offsets-one", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, NULL, 0, EM_ERR_FORMAT,
         "\"data_offsets\" is not a pair"},
        {"offsets-negative", "{\"w\":" F32W("[-4,0]") "}", 4, NULL, 0, EM_ERR_FORMAT, "\"data_offsets\" is not a pair"},
        {"offsets-huge", "{\"w\":" F32W("[0,1e300]") "}", 4, NULL, 0, EM_ERR_FORMAT, "\"data_offsets\" is not a pair"},
        {"offsets-out-of-range", "{\"w\":" F32W("[4,8]") "}", 4, NULL, 0, EM_ERR_FORMAT,
         "tensor 'w': data_offsets [4, 8] run past the end of the data section (4 bytes"},
        {"begin-after-end", "{\"w\":" F32W("[4,0]") "}", 4, NULL, 0, EM_ERR_FORMAT,
         "tensor 'w': data_offsets [4, 0] have begin > end"},
        {"size-mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, NULL, 0,
         EM_ERR_FORMAT, "tensor 'w': data_offsets [0, 8] span 8 bytes but shape [3] of F32 needs 12"},
        {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, NULL, 0, EM_ERR_FORMAT,
         "tensor 'b': data_offsets [4, 12] overlap tensor 'a'"},
        {"overlap-same", "{\"a\":" F32W("[0,4]") ",\"b\":" F32W("[0,4]") "}", 4, NULL, 0, EM_ERR_FORMAT,
         "overlap tensor 'a'"},
        {"hole", "{\"a\":" F32W("[0,4]") ",\"b\":" F32W("[8,12]") "}", 12, NULL, 0, EM_ERR_FORMAT,
         "hole in the data section: bytes [4, 8) before tensor 'b'"},
        {"hole-at-start", "{\"a\":" F32W("[4,8]") "}", 8, NULL, 0, EM_ERR_FORMAT,
         "hole in the data section: bytes [0, 4) before tensor 'a'"},
        {"trailing-data", "{\"a\":" F32W("[0,4]") "}", 8, NULL, 0, EM_ERR_FORMAT,
         "data section has 8 bytes but the tensors cover only 4"},
        {"duplicate-tensor", "{\"w\":" F32W("[0,4]") ",\"w\":" F32W("[4,8]") "}", 8, NULL, 0, EM_ERR_FORMAT,
         "the tensor 'w' twice"},
        {"metadata-not-object", "{\"__metadata__\":[1]}", 0, NULL, 0, EM_ERR_FORMAT,
         "\"__metadata__\" is an array, not an object of strings"},
        {"metadata-not-strings", "{\"__metadata__\":{\"format\":\"pt\",\"step\":3}}", 0, NULL, 0, EM_ERR_FORMAT,
         "\"__metadata__\" value of 'step' is a number, not a string"},
        {"metadata-duplicate-key", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, NULL, 0, EM_ERR_FORMAT,
         "has the key 'k' twice"},
        {"metadata-twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, 0, EM_ERR_FORMAT,
         "\"__metadata__\" twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const corrupt_case *c = &cases[i];
        const char *path = tu_scratch_path(c->file);
        if (c->header) write_st(path, c->header, NULL, c->data_len);
        else tu_write_file(path, c->raw, c->raw_len);
        em_clear_error();
        em_safetensors *st = (em_safetensors *)1;
        em_status s = em_safetensors_open(path, &st);
        ck_assert_msg(s == c->status, "%s: status %s, expected %s (%s)", c->file, em_status_name(s),
                      em_status_name(c->status), em_last_error());
        ck_assert_msg(st == NULL, "%s: out not cleared", c->file);
        ck_assert_int_eq(em_last_status(), c->status);
        assert_error_mentions(path, c->says);
    }

    /* a good file, truncated in its data section */
    em_tensor *t = filled(10, EM_F64, 1);
    const char *path = tu_scratch_path("truncated.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL), EM_OK);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(truncate(path, sb.st_size - 3), 0);
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_ERR_FORMAT);
    assert_error_mentions(path, "tensor 'w': data_offsets [0, 80] run past the end of the data section (77 bytes; is the file truncated?)");
    em_release(t);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* ---- failing the Nth allocation ------------------------------------------- */

static void oom_open_get_loop(bool sticky)
{
    const char *path = tu_scratch_path("oom.safetensors");
    em_tensor *ts[3] = {tu_rand_tensor(EM_SHAPE(3, 4), EM_F32, -1, 1, 1, NULL),
                        tu_rand_tensor(EM_SHAPE(5), EM_I64, -9, 9, 2, NULL),
                        em_empty(EM_SHAPE(0, 2), EM_BF16, EM_CPU)};
    const char *names[3] = {"w", "ids", "e"};
    ck_assert_int_eq(em_safetensors_save(path, 3, names, ts, 1, (const char *[]){"format"}, (const char *[]){"pt"}),
                     EM_OK);
    int64_t base = tu_live_bytes();
    /* until the first n at which open + get all succeed (n then exceeds their allocations) */
    int n, completed = 0;
    for (n = 1; n < 10000 && !completed; n++) {
        em_clear_error();
        em_alloc_fail_after(n, sticky);
        em_safetensors *st = NULL;
        em_status s = em_safetensors_open(path, &st);
        em_tensor *got[3] = {NULL, NULL, NULL};
        bool ok = s == EM_OK;
        if (ok) {
            for (int i = 0; i < 3 && ok; i++) ok = (got[i] = em_safetensors_get(st, names[i])) != NULL;
        } else {
            ck_assert_ptr_null(st);
        }
        em_alloc_fail_after(0, false);
        if (ok) {
            completed = n;
            for (int i = 0; i < 3; i++) assert_same(got[i], ts[i], names[i]);
        } else {
            ck_assert_msg(em_last_status() == EM_ERR_OOM, "n=%d: status %s: %s", n,
                          em_status_name(em_last_status()), em_last_error());
        }
        for (int i = 0; i < 3; i++) em_release(got[i]);
        em_safetensors_close(st);
        ck_assert_int_eq(tu_live_bytes(), base);
    }
    ck_assert_msg(completed > 5, "open+get finished after only %d allocations", completed);
    for (int i = 0; i < 3; i++) em_release(ts[i]);
}

TU_TEST(oom_at_every_allocation_of_open_and_get, oom_open_get_loop(false))
TU_TEST(oom_sticky_at_every_allocation_of_open_and_get, oom_open_get_loop(true))

/* ---- misuse ---------------------------------------------------------------------- */

START_TEST(misuse_duplicate_names)
{
    em_tensor *t = filled(1, EM_F32, 1);
    tu_expect_misuse("em_safetensors_save: duplicate tensor name 'w'");
    em_safetensors_save("/tmp/ember-never-written.safetensors", 3, (const char *[]){"w", "v", "w"},
                        (em_tensor *[]){t, t, t}, 0, NULL, NULL);
}
END_TEST

START_TEST(misuse_reserved_name)
{
    em_tensor *t = filled(1, EM_F32, 1);
    tu_expect_misuse("\"__metadata__\" is reserved");
    em_safetensors_save("/tmp/ember-never-written.safetensors", 1, (const char *[]){"__metadata__"}, &t, 0, NULL,
                        NULL);
}
END_TEST

START_TEST(misuse_duplicate_metadata_key)
{
    em_tensor *t = filled(1, EM_F32, 1);
    tu_expect_misuse("duplicate metadata key 'k'");
    em_safetensors_save("/tmp/ember-never-written.safetensors", 1, (const char *[]){"w"}, &t, 2,
                        (const char *[]){"k", "k"}, (const char *[]){"1", "2"});
}
END_TEST

START_TEST(misuse_name_index_out_of_range)
{
    ck_assert_ptr_nonnull(tu_scratch_new("st"));
    em_tensor *t = filled(1, EM_F32, 1);
    const char *path = tu_scratch_path("one.safetensors");
    ck_assert_int_eq(em_safetensors_save(path, 1, (const char *[]){"w"}, &t, 0, NULL, NULL), EM_OK);
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    tu_scratch_remove();
    tu_expect_misuse("em_safetensors_name: index 1 out of range for a file of 1 tensors");
    em_safetensors_name(st, 1);
}
END_TEST

/* em_safetensors_save_checked stores the data's CRC-32C in the metadata;
 * open verifies it: one flipped bit anywhere in the data is refused naming
 * the file, a damaged checksum field too; plain saves carry no key. */
START_TEST(checked_save_refuses_a_damaged_byte)
{
    em_tensor *ids = em_arange(0, 6, 1, EM_I64, EM_CPU), *ids23 = em_reshape(ids, EM_SHAPE(2, 3));
    em_tensor *ts[2] = {filled(1000, EM_F32, 0.25), em_transpose(ids23, 0, 1)};   /* one strided */
    const char *names[2] = {"w", "ids"};
    const char *path = tu_scratch_path("checked.safetensors"), *plain = tu_scratch_path("plain.safetensors");
    ck_assert_int_eq(em_safetensors_save_checked(path, 2, names, ts, 1, (const char *[]){"format"},
                                                 (const char *[]){"pt"}), EM_OK);
    ck_assert_int_eq(em_safetensors_save(plain, 2, names, ts, 0, NULL, NULL), EM_OK);
    em_safetensors *st;
    ck_assert_int_eq(em_safetensors_open(plain, &st), EM_OK);
    ck_assert_ptr_null(em_safetensors_metadata(st, "ember_crc32c"));
    em_safetensors_close(st);
    ck_assert_int_eq(em_safetensors_open(path, &st), EM_OK);
    const char *crc = em_safetensors_metadata(st, "ember_crc32c");
    ck_assert_ptr_nonnull(crc);
    ck_assert_uint_eq(strlen(crc), 8);
    ck_assert_str_ne(crc, "00000000");   /* patched after the data was written */
    em_safetensors_close(st);

    size_t len;
    uint8_t *good = (uint8_t *)tu_read_file(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | good[i];
    const char *damaged = tu_scratch_path("damaged.safetensors");
    size_t spots[3] = {8 + (size_t)hl, 8 + (size_t)hl + 2001, len - 1};   /* first, middle, last data byte */
    for (int k = 0; k < 3; k++) {
        good[spots[k]] ^= 0x10;
        tu_write_file(damaged, good, len);
        good[spots[k]] ^= 0x10;
        em_clear_error();
        ck_assert_int_eq(em_safetensors_open(damaged, &st), EM_ERR_FORMAT);
        ck_assert_msg(strstr(em_last_error(), damaged) && strstr(em_last_error(), "damaged"), "%s", em_last_error());
    }
    /* a damaged checksum field: not hex */
    char *field = memmem(good + 8, (size_t)hl, "\"ember_crc32c\":\"", 16);
    ck_assert_ptr_nonnull(field);
    field[16] = 'x';
    tu_write_file(damaged, good, len);
    ck_assert_int_eq(em_safetensors_open(damaged, &st), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "not 8 hex digits"), "%s", em_last_error());
    free(good);
    em_release(ts[0]);
    em_release(ts[1]);
    em_release(ids23);
    em_release(ids);
}
END_TEST

START_TEST(misuse_reserved_checksum_key)
{
    em_tensor *t = filled(1, EM_F32, 1);
    tu_expect_misuse("\"ember_crc32c\" is reserved");
    em_safetensors_save("/tmp/ember-never-written.safetensors", 1, (const char *[]){"w"}, &t, 1,
                        (const char *[]){"ember_crc32c"}, (const char *[]){"00000000"});
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tu_scratch_per_test(tu_case(s, "safetensors", 0), "st");
    tu_add_tests(tc, round_trip_every_dtype, checked_save_refuses_a_damaged_byte, round_trip_non_contiguous, metadata_round_trip, header_layout_matches_python_writer,
                 torch_fixture, reads_unaligned_and_loose_headers, missing_file_and_missing_tensor,
                 save_into_missing_directory_fails_cleanly, save_over_a_directory_removes_the_temporary,
                 failed_save_keeps_the_old_file, corrupt_files_are_rejected,
                 oom_at_every_allocation_of_open_and_get, oom_sticky_at_every_allocation_of_open_and_get);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_duplicate_names, misuse_reserved_name,
                        misuse_reserved_checksum_key, misuse_duplicate_metadata_key,
                        misuse_name_index_out_of_range);
    return tu_run_suite(s);
}
