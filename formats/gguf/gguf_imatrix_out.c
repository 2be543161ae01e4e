/*
 * gguf_imatrix_out.c - npuc_imatrix_from_calib: llama.cpp's legacy
 * importance matrix from the W.input rows of calibration files
 * (include/npuc/calib.h; docs/calibration.md).
 *
 * Each entry's sums of x^2 are accumulated in double, one column per input,
 * over the rows in file order and row order, single-threaded, so the file
 * does not depend on the chunking or the thread count.  Rows are converted
 * to float32 a chunk at a time (about 4 MiB), so memory is the chunk plus K
 * doubles per entry.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_imatrix.h"

#define IMO_CHUNK_FLOATS (1u << 20)

typedef struct imo_entry {
    char *name;       /* W */
    uint64_t K, rows;
    const char *first; /* the file W.input was first seen in */
    double *sum;
    float *out; /* the sums as written */
} imo_entry;

static int cmp_imo(const void *a, const void *b) {
    return strcmp(((const imo_entry *)a)->name, ((const imo_entry *)b)->name);
}

/* Adds the rows of tensor i of m to e->sum. */
static npuc_status accumulate(npuc_ctx *ctx, npuc_model *m, size_t i, imo_entry *e, float *buf, uint64_t cap) {
    const npuc_tensor_info *t = npuc_model_tensor(m, i);
    const void *data;
    npuc_status st = npuc_model_data(ctx, m, i, &data);
    if (st != NPUC_OK) return st;
    const uint64_t K = e->K, rows = t->numel / K, per = cap / K ? cap / K : 1;
    const size_t es = npuc_dtype_size(t->dtype);
    for (uint64_t r = 0; r < rows && st == NPUC_OK; r += per) {
        const uint64_t nr = rows - r < per ? rows - r : per;
        npuc_convert(buf, NPUC_DTYPE_F32, (const unsigned char *)data + r * K * es, t->dtype, (size_t)(nr * K));
        for (uint64_t q = 0; q < nr && st == NPUC_OK; q++) {
            const float *x = buf + q * K;
            for (uint64_t k = 0; k < K; k++) {
                if (!isfinite(x[k])) {
                    st = npuc_fail(ctx, NPUC_ERR_VALUE, "%s: tensor '%s': row %" PRIu64 ", column %" PRIu64 " is %s",
                                   npuc_model_path(m), t->name, r + q, k, isnan(x[k]) ? "NaN" : "infinite");
                    break;
                }
                e->sum[k] += (double)x[k] * (double)x[k];
            }
        }
    }
    npuc_model_release(m, i);
    return st;
}

npuc_status npuc_imatrix_from_calib(npuc_ctx *ctx, npuc_model *const *files, size_t nfiles, const char *out,
                                    int overwrite, size_t *nentries) {
    if (nentries) *nentries = 0;
    if (!files || !nfiles || !out) return npuc_fail(ctx, NPUC_ERR_ARG, "npuc_imatrix_from_calib: no files or output");
    imo_entry *v = NULL;
    size_t n = 0;
    float *buf = NULL;
    npuc__imatrix_out *o = NULL;
    npuc_status st = NPUC_OK;
    /* The entries: one per W, K checked across files. */
    for (size_t f = 0; f < nfiles && st == NPUC_OK; f++)
        for (size_t i = 0; i < npuc_model_count(files[f]); i++) {
            const npuc_tensor_info *t = npuc_model_tensor(files[f], i);
            const char *path = npuc_model_path(files[f]);
            size_t len = strlen(t->name);
            if (len <= 6 || strcmp(t->name + len - 6, ".input") != 0) continue;
            if (!npuc_dtype_is_float(t->dtype) || t->rank < 2 || t->shape[t->rank - 1] < 1 || t->numel == 0) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': %s of rank %d with %" PRIu64
                                                     " values, expected float rows [N, K] with N, K >= 1",
                               path, t->name, npuc_dtype_name(t->dtype), t->rank, t->numel);
                break;
            }
            if (len - 6 > NPUC__IMATRIX_NAME_MAX) {
                st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': a weight name over %u bytes", path,
                               t->name, NPUC__IMATRIX_NAME_MAX);
                break;
            }
            const uint64_t K = (uint64_t)t->shape[t->rank - 1];
            size_t k = 0;
            while (k < n && !(strncmp(v[k].name, t->name, len - 6) == 0 && v[k].name[len - 6] == 0)) k++;
            if (k == n) {
                imo_entry *nv = realloc(v, (n + 1) * sizeof *v);
                if (!nv) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
                v = nv;
                v[n] = (imo_entry){.name = strndup(t->name, len - 6), .K = K, .first = path};
                if (!v[n].name) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); break; }
                n++;
            } else if (v[k].K != K) {
                st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': rows of %" PRIu64 " columns, %s has %" PRIu64,
                               path, t->name, K, v[k].first, v[k].K);
                break;
            }
            v[k].rows += t->numel / K;
        }
    if (st != NPUC_OK) goto done;
    if (n == 0) {
        st = npuc_fail(ctx, NPUC_ERR_NOT_FOUND,
                       "%s: no <weight>.input tensor (calibration rows) in the input%s (.hessian and .input_sq "
                       "are not used: samples/calib/dump_calib.py --inputs writes the rows)",
                       npuc_model_path(files[0]), nfiles > 1 ? "s" : "");
        goto done;
    }
    uint64_t cap = 0, last = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k].rows > INT32_MAX || v[k].K > INT32_MAX) {
            st = npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "tensor '%s.input': %" PRIu64 " rows of %" PRIu64
                                                      " values: llama.cpp's imatrix counts are int32",
                           v[k].name, v[k].rows, v[k].K);
            goto done;
        }
        if (!(v[k].sum = calloc((size_t)v[k].K, sizeof *v[k].sum))) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (v[k].K > cap) cap = v[k].K;
        if (v[k].rows > last) last = v[k].rows;
    }
    if (cap < IMO_CHUNK_FLOATS) cap = IMO_CHUNK_FLOATS;
    if (!(buf = malloc((size_t)cap * sizeof *buf))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t f = 0; f < nfiles; f++)
        for (size_t i = 0; i < npuc_model_count(files[f]); i++) {
            const char *name = npuc_model_tensor(files[f], i)->name;
            size_t len = strlen(name), k = 0;
            if (len <= 6 || strcmp(name + len - 6, ".input") != 0) continue;
            while (!(strncmp(v[k].name, name, len - 6) == 0 && v[k].name[len - 6] == 0)) k++;
            if ((st = accumulate(ctx, files[f], i, &v[k], buf, cap)) != NPUC_OK) goto done;
        }
    qsort(v, n, sizeof *v, cmp_imo);
    if (!(o = calloc(n, sizeof *o))) {
        st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        float *fs = v[k].out = malloc((size_t)v[k].K * sizeof *fs);
        if (!fs) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (uint64_t j = 0; j < v[k].K; j++) {
            const double s = v[k].sum[j];
            fs[j] = (float)s;
            if (!isfinite(fs[j])) {
                st = npuc_fail(ctx, NPUC_ERR_VALUE, "tensor '%s.input': the sum of x^2 of column %" PRIu64
                                                    " (%g) exceeds float32", v[k].name, j, s);
                goto done;
            }
        }
        o[k] = (npuc__imatrix_out){v[k].name, (int32_t)v[k].rows, v[k].K, fs};
    }
    st = npuc__imatrix_write_dat(ctx, out, overwrite, o, n, (int32_t)last, npuc_model_path(files[0]));
    if (st == NPUC_OK && nentries) *nentries = n;
done:
    for (size_t k = 0; k < n; k++) {
        free(v[k].name);
        free(v[k].sum);
        free(v[k].out);
    }
    free(v);
    free(o);
    free(buf);
    return st;
}
