/*
 * h5_writer.c - writing an npuc model as HDF5, in one of three trees:
 *
 *   PLAIN   one dataset per tensor at the tensor's name when that is a safe
 *           HDF5 path (non-empty components, no "." or ".."), else "t%05zu".
 *   KERAS2  Keras 2 save_weights: root attribute layer_names, one group per
 *           layer (the tensor's group; a tensor without one gets a layer of
 *           its own name) with attribute weight_names, each weight at
 *           <layer>/<weight name>.
 *   KERAS3  Keras 3 .weights.h5: layers/<group>/vars/<i>; tensors without a
 *           group go to /vars/<i>.  bfloat16 is stored as Keras 3 stores it:
 *           2-byte opaque data with the attribute dtype = "bfloat16".
 *
 * Every dataset carries the string attributes `name` (the real tensor name,
 * so any UTF-8 name survives whatever path it got) and `npuc_dtype` (so the
 * reader never has to guess between look-alike custom floats).  A layer
 * whose name is no safe path is written as "layer%05zu" with a `name`
 * attribute.  Paths that collide with an existing object fall back to
 * generated ones; the attributes keep the real names.
 *
 * Datasets with elements and rank >= 1 are chunked (about 1 MiB, whole rows
 * where a row fits) with shuffle + deflate when the "deflate" option is
 * above 0; others are contiguous.  The "structure" option picks the tree.  Types are the reader's (h5_common.c); data is written with
 * the file type as the memory type, so bytes go through unchanged.  A
 * tensor of NPUC_PROGRESS_MIN bytes or more, when the context watches
 * progress, is written in pieces of whole chunks (h5_slabs.c): same bytes.
 *
 * Determinism: the same input gives the same bytes.  Object timestamps are
 * off, the file format is pinned to the 1.8 format (readable by HDF5 >= 1.8,
 * h5py, Keras), groups and the root track creation order so the reader gets
 * declaration order back.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5_common.h"
#include "strmap.h"

#define CHUNK_TARGET_BYTES (1u << 20)

typedef struct h5w_state {
    hid_t file, gcpl, lcpl;
    char **dpath; /* dataset path of each tensor */
    size_t n;
    npuc__strmap claimed; /* layer / vars groups that belong to a layer */
    unsigned deflate;       /* the "deflate" option: 0 = contiguous */
    int keras3;             /* a Keras 3 tree: bfloat16 is stored as Keras 3 stores it */
    char err[256];
} h5w_state;

/* ------------------------------------------------------------ paths */

/* Safe: non-empty components, no leading, trailing or double '/', no "." or
 * ".." component.  Such a path means the same thing to HDF5 as to a reader. */
static int safe_path(const char *p) {
    if (!*p) return 0;
    const char *c = p;
    for (;;) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == 0) return 0;
        if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) return 0;
        if (!e) return 1;
        c = e + 1;
    }
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

/* Makes every prefix of path up to (but not including) stop a group,
 * creating missing ones.  Returns 1, 0 when a prefix exists but is not a
 * group, -1 on HDF5 failure or allocation failure. */
static int make_groups(h5w_state *s, const char *path, size_t stop) {
    char *p = malloc(stop + 1);
    if (!p) return -1;
    memcpy(p, path, stop);
    p[stop] = 0;
    int rc = 1;
    for (size_t k = 1; k <= stop && rc == 1; k++) {
        if (k < stop && p[k] != '/') continue;
        char saved = p[k];
        p[k] = 0;
        htri_t ex = H5Lexists(s->file, p, H5P_DEFAULT);
        if (ex < 0) {
            rc = -1;
        } else if (ex) {
            H5O_info_t oi;
            if (H5Oget_info_by_name2(s->file, p, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) rc = -1;
            else if (oi.type != H5O_TYPE_GROUP) rc = 0;
        } else {
            hid_t g = H5Gcreate2(s->file, p, s->lcpl, s->gcpl, H5P_DEFAULT);
            if (g < 0) rc = -1;
            else H5Gclose(g);
        }
        p[k] = saved;
    }
    free(p);
    return rc;
}

/* 1 if path is a group now (existing or created), 0 if something else is in
 * the way, -1 on failure. */
static int ensure_group(h5w_state *s, const char *path) {
    return make_groups(s, path, strlen(path));
}

/* 1 if a new object can be created at path (its parents are made groups),
 * 0 if not, -1 on failure. */
static int place(h5w_state *s, const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash) {
        int rc = make_groups(s, path, (size_t)(slash - path));
        if (rc != 1) return rc;
    }
    htri_t ex = H5Lexists(s->file, path, H5P_DEFAULT);
    return ex < 0 ? -1 : !ex;
}

/* ------------------------------------------------------------ datasets */

/* The failure of the HDF5 call whose message s->err already holds. */
static npuc_status hfailed(npuc_writer *w, h5w_state *s, const char *what, const char *name) {
    if (name)
        return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: tensor '%s': %s (HDF5: %s)", w->path, name, what,
                         s->err);
    return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: %s (HDF5: %s)", w->path, what, s->err);
}

/* The failure of the HDF5 call just made. */
static npuc_status hfail(npuc_writer *w, h5w_state *s, const char *what, const char *name) {
    npuc__h5_errtext(s->err, sizeof s->err);
    return hfailed(w, s, what, name);
}

static npuc_status nomem(npuc_writer *w) {
    return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "%s: out of memory", w->path);
}

/* Chunk shape of about CHUNK_TARGET_BYTES: whole trailing dimensions while
 * they fit (whole rows when a row fits), then a slice of the next. */
static void chunk_dims(const npuc_tensor_info *t, hsize_t *c) {
    uint64_t target = CHUNK_TARGET_BYTES / npuc_dtype_size(t->dtype), prod = 1;
    if (!target) target = 1;
    int k = t->rank - 1;
    for (; k >= 0; k--) {
        uint64_t d = (uint64_t)t->shape[k];
        if (prod * d > target) break; /* prod <= target <= 2^20, d < 2^63: no overflow */
        c[k] = d;
        prod *= d;
    }
    if (k >= 0) {
        uint64_t part = target / prod;
        c[k] = part ? part : 1;
        for (int j = 0; j < k; j++) c[j] = 1;
    }
}

/* Creates tensor i's dataset at path with its attributes. */
static npuc_status create_ds(npuc_writer *w, h5w_state *s, size_t i, const char *path) {
    const npuc_tensor_info *t = &w->t[i];
    npuc_status st = NPUC_OK;
    hid_t type = s->keras3 ? npuc__h5_type_create_keras3(t->dtype) : npuc__h5_type_create(t->dtype);
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    hid_t d = H5I_INVALID_HID;
    hsize_t dims[NPUC_MAX_RANK], cd[NPUC_MAX_RANK];
    for (int k = 0; k < t->rank; k++) dims[k] = (hsize_t)t->shape[k];
    space = t->rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(t->rank, dims, NULL);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (type < 0 || space < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0) {
        st = hfail(w, s, "cannot set up the dataset", t->name);
        goto done;
    }
    if (s->deflate > 0 && t->rank >= 1 && t->numel > 0) {
        chunk_dims(t, cd);
        if (H5Pset_chunk(dcpl, t->rank, cd) < 0 || H5Pset_shuffle(dcpl) < 0 ||
            H5Pset_deflate(dcpl, s->deflate) < 0) {
            st = hfail(w, s, "cannot set up compression", t->name);
            goto done;
        }
    } else if (H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0) {
        st = hfail(w, s, "cannot set up the dataset", t->name);
        goto done;
    }
    d = H5Dcreate2(s->file, path, type, space, s->lcpl, dcpl, H5P_DEFAULT);
    if (d < 0) {
        st = hfail(w, s, "cannot create the dataset", t->name);
        goto done;
    }
    if (npuc__h5_write_str_attr(d, "name", t->name) != 0 ||
        npuc__h5_write_str_attr(d, "npuc_dtype", npuc_dtype_name(t->dtype)) != 0 ||
        (s->keras3 && t->dtype == NPUC_DTYPE_BF16 && npuc__h5_write_str_attr(d, "dtype", "bfloat16") != 0)) {
        st = hfail(w, s, "cannot write its attributes", t->name);
        goto done;
    }
    if (!(s->dpath[i] = npuc__strdup(path))) st = nomem(w);
done:
    if (d >= 0 && H5Dclose(d) < 0 && st == NPUC_OK) st = hfail(w, s, "cannot close the dataset", t->name);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return st;
}

/* Creates tensor i at dir/leaf when leaf is a safe path and the place is
 * free, else at dir/<pfx><i> (then dir/<pfx><i>.<k>); dir "" is the root.
 * Returns the path used relative to dir through *rel when rel is non-NULL. */
static npuc_status put_tensor(npuc_writer *w, h5w_state *s, size_t i, const char *dir,
                              const char *leaf, const char *pfx, char **rel) {
    char gen[64];
    for (size_t attempt = safe_path(leaf) ? 0 : 1;; attempt++) {
        const char *r = leaf;
        if (attempt == 1) snprintf(gen, sizeof gen, "%s%05zu", pfx, i);
        else if (attempt > 1) snprintf(gen, sizeof gen, "%s%05zu.%zu", pfx, i, attempt);
        if (attempt > 0) r = gen;
        char *p = *dir ? join(dir, r) : npuc__strdup(r);
        if (!p) return nomem(w);
        int ok = place(s, p);
        if (ok < 0) {
            free(p);
            return hfail(w, s, "cannot create its groups", w->t[i].name);
        }
        if (ok) {
            npuc_status st = create_ds(w, s, i, p);
            free(p);
            if (st == NPUC_OK && rel && !(*rel = npuc__strdup(r))) st = nomem(w);
            return st;
        }
        free(p);
        /* Each failed attempt met a distinct existing object: bounded. */
        if (attempt > w->n + 16)
            return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: tensor '%s': no free dataset path",
                             w->path, w->t[i].name);
    }
}

/* ------------------------------------------------------------ layers */

/* Tensors grouped by layer, layers in order of first appearance:
 * layer[0..nl) are names, order[start[j] .. start[j+1]) the tensors of layer j. */
typedef struct layering {
    const char **layer;
    size_t nl;
    size_t *start, *order;
} layering;

static void layering_free(layering *L) {
    free(L->layer);
    free(L->start);
    free(L->order);
    memset(L, 0, sizeof *L);
}

/* own: a tensor without a group forms a layer named after itself (Keras 2);
 * else such tensors are skipped (Keras 3 writes them under /vars). */
static npuc_status make_layering(npuc_writer *w, int own, layering *L) {
    npuc__strmap idx = {0};
    size_t n = w->n ? w->n : 1;
    size_t *of = malloc(n * sizeof *of);
    L->layer = malloc(n * sizeof *L->layer);
    L->start = calloc(n + 1, sizeof *L->start);
    L->order = malloc(n * sizeof *L->order);
    L->nl = 0;
    npuc_status st = NPUC_OK;
    if (!of || !L->layer || !L->start || !L->order) { st = nomem(w); goto done; }
    for (size_t i = 0; i < w->n; i++) {
        const char *g = w->t[i].group;
        if (!g && !own) { of[i] = SIZE_MAX; continue; }
        if (!g) g = w->t[i].name;
        size_t j;
        if (!npuc__strmap_get(&idx, g, &j)) {
            j = L->nl++;
            L->layer[j] = g;
            if (npuc__strmap_put(&idx, g, j) != 0) { st = nomem(w); goto done; }
        }
        of[i] = j;
        L->start[j + 1]++;
    }
    for (size_t j = 0; j < L->nl; j++) L->start[j + 1] += L->start[j];
    /* Counting sort, stable: declaration order inside each layer. */
    size_t *fill = calloc(L->nl ? L->nl : 1, sizeof *fill);
    if (!fill) { st = nomem(w); goto done; }
    for (size_t i = 0; i < w->n; i++)
        if (of[i] != SIZE_MAX) L->order[L->start[of[i]] + fill[of[i]]++] = i;
    free(fill);
done:
    free(of);
    npuc__strmap_free(&idx);
    if (st != NPUC_OK) layering_free(L);
    return st;
}

/* Finds the group for layer j: prefix + name when name is a safe path and
 * prefix + name + suffix ("/vars" or "") is free to claim, else a new group
 * prefix + "layer%05zu" (".k" on collisions) with a `name` attribute that
 * holds the real name.  Returns the layer's path (without suffix) through
 * *out, malloc'd. */
static npuc_status layer_group(npuc_writer *w, h5w_state *s, size_t j, const char *prefix,
                               const char *name, const char *suffix, char **out) {
    *out = NULL;
    char gen[64];
    for (size_t attempt = safe_path(name) ? 0 : 1;; attempt++) {
        const char *leaf = name;
        if (attempt == 1) snprintf(gen, sizeof gen, "layer%05zu", j);
        else if (attempt > 1) snprintf(gen, sizeof gen, "layer%05zu.%zu", j, attempt);
        if (attempt > 0) leaf = gen;
        size_t lp_len = strlen(prefix) + strlen(leaf), sl = strlen(suffix);
        char *lp = malloc(lp_len + sl + 1), *claim = malloc(lp_len + sl + 1);
        if (!lp || !claim) { free(lp); free(claim); return nomem(w); }
        snprintf(lp, lp_len + 1, "%s%s", prefix, leaf);
        snprintf(claim, lp_len + sl + 1, "%s%s", lp, suffix);
        int ok = 0;
        if (!npuc__strmap_get(&s->claimed, claim, NULL)) {
            /* A generated group must be new, so that nothing already in it
             * (or its `name`) is mistaken for this layer's. */
            htri_t ex = attempt > 0 ? H5Lexists(s->file, lp, H5P_DEFAULT) : 0;
            ok = ex < 0 ? -1 : ex > 0 ? 0 : ensure_group(s, claim);
        }
        if (ok == 1 && attempt > 0) {
            hid_t g = H5Gopen2(s->file, lp, H5P_DEFAULT);
            if (g < 0 || npuc__h5_write_str_attr(g, "name", name) != 0) ok = -1;
            if (g >= 0) H5Gclose(g);
        }
        if (ok == 1 && npuc__strmap_put(&s->claimed, claim, j) != 0) {
            free(lp);
            free(claim);
            return nomem(w);
        }
        free(claim);
        if (ok < 0) {
            free(lp);
            npuc__h5_errtext(s->err, sizeof s->err);
            return npuc_fail(w->ctx, NPUC_ERR_IO, "%s: layer '%s': cannot create its group (HDF5: %s)",
                             w->path, name, s->err);
        }
        if (ok == 1) {
            *out = lp;
            return NPUC_OK;
        }
        free(lp);
        if (attempt > w->n + 16)
            return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: layer '%s': no free group path",
                             w->path, name);
    }
}

/* ------------------------------------------------------------ styles */

static npuc_status write_plain(npuc_writer *w, h5w_state *s) {
    for (size_t i = 0; i < w->n; i++) {
        npuc_status st = put_tensor(w, s, i, "", w->t[i].name, "t", NULL);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

static npuc_status write_keras2(npuc_writer *w, h5w_state *s) {
    layering L = {0};
    npuc_status st = make_layering(w, 1, &L);
    if (st != NPUC_OK) return st;
    char **lpaths = calloc(L.nl ? L.nl : 1, sizeof *lpaths);
    char **wn = calloc(w->n ? w->n : 1, sizeof *wn);
    if (!lpaths || !wn) { st = nomem(w); goto done; }
    for (size_t j = 0; j < L.nl && st == NPUC_OK; j++) {
        if ((st = layer_group(w, s, j, "", L.layer[j], "", &lpaths[j])) != NPUC_OK) break;
        size_t a = L.start[j], b = L.start[j + 1];
        for (size_t k = a; k < b && st == NPUC_OK; k++) {
            size_t i = L.order[k];
            st = put_tensor(w, s, i, lpaths[j], w->t[i].name, "w", &wn[k - a]);
        }
        if (st != NPUC_OK) break;
        hid_t g = H5Gopen2(s->file, lpaths[j], H5P_DEFAULT);
        if (g < 0 || npuc__h5_write_str_array_attr(g, "weight_names", (const char *const *)wn, b - a) != 0)
            st = hfail(w, s, "cannot write a layer's weight_names", w->t[L.order[a]].name);
        if (g >= 0) H5Gclose(g);
        for (size_t k = 0; k < b - a; k++) { free(wn[k]); wn[k] = NULL; }
    }
    if (st == NPUC_OK &&
        npuc__h5_write_str_array_attr(s->file, "layer_names", (const char *const *)lpaths, L.nl) != 0)
        st = hfail(w, s, "cannot write layer_names", NULL);
done:
    if (lpaths)
        for (size_t j = 0; j < L.nl; j++) free(lpaths[j]);
    if (wn)
        for (size_t k = 0; k < w->n; k++) free(wn[k]);
    free(lpaths);
    free(wn);
    layering_free(&L);
    return st;
}

/* "layers/a/vars" for a safe Keras 3 variable path "layers/a/vars/3",
 * else NULL (malloc'd). */
static char *keras3_var_dir(const char *name) {
    const char *leaf = strrchr(name, '/');
    if (strncmp(name, "layers/", 7) != 0 || !safe_path(name) || !leaf || !leaf[1]) return NULL;
    for (const char *d = leaf + 1; *d; d++)
        if (*d < '0' || *d > '9') return NULL;
    size_t n = (size_t)(leaf - name);
    if (n < 5 || memcmp(leaf - 5, "/vars", 5) != 0) return NULL;
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, name, n);
        dir[n] = 0;
    }
    return dir;
}

static npuc_status write_keras3(npuc_writer *w, h5w_state *s) {
    layering L = {0};
    npuc_status st = make_layering(w, 0, &L);
    if (st != NPUC_OK) return st;
    char idx[32];
    /* "layers" marks the file as Keras 3 even when every tensor is loose. */
    if (ensure_group(s, "layers") != 1) {
        layering_free(&L);
        return hfail(w, s, "cannot create the group 'layers'", NULL);
    }
    for (size_t j = 0; j < L.nl && st == NPUC_OK; j++) {
        char *lp = NULL, *vp = NULL;
        if ((st = layer_group(w, s, j, "layers/", L.layer[j], "/vars", &lp)) != NPUC_OK) break;
        if (!(vp = join(lp, "vars"))) st = nomem(w);
        size_t v = 0;
        for (size_t k = L.start[j]; k < L.start[j + 1] && st == NPUC_OK; k++) {
            snprintf(idx, sizeof idx, "%zu", v++);
            st = put_tensor(w, s, L.order[k], vp, idx, "x", NULL);
        }
        free(vp);
        free(lp);
    }
    /* Tensors without a layer go where their name says when it is a Keras
     * 3 variable path (a Keras 3 tree read back from safetensors), else to
     * the top-level /vars, as Keras 3's own loose variables. */
    size_t v = 0;
    for (size_t i = 0; i < w->n && st == NPUC_OK; i++) {
        if (w->t[i].group) continue;
        char *dir = keras3_var_dir(w->t[i].name);
        if (dir) {
            st = put_tensor(w, s, i, dir, strrchr(w->t[i].name, '/') + 1, "x", NULL);
            free(dir);
            continue;
        }
        snprintf(idx, sizeof idx, "%zu", v++);
        st = put_tensor(w, s, i, "vars", idx, "x", NULL);
    }
    layering_free(&L);
    return st;
}

/* ------------------------------------------------------------ backend */

/* Keys that would make a reader see Keras 2 structure that is not there. */
static int reserved_meta(const char *k) {
    if (strncmp(k, "layer_names", 11) != 0) return 0;
    for (k += 11; *k; k++)
        if (*k < '0' || *k > '9') return 0;
    return 1;
}

npuc_status npuc__h5_writer_begin_at(npuc_writer *w, const char *file, npuc_h5_style style,
                                     int (*skip_meta)(const char *key)) {
    h5w_state *s = calloc(1, sizeof *s);
    if (!s) return nomem(w);
    s->file = s->gcpl = s->lcpl = H5I_INVALID_HID;
    s->n = w->n;
    s->deflate = (unsigned)npuc__writer_opt_long(w, "deflate", 0);
    s->keras3 = style == NPUC_H5_KERAS3;
    w->be_state = s;
    if (!(s->dpath = calloc(w->n ? w->n : 1, sizeof *s->dpath))) return nomem(w);

    npuc_status st = NPUC_OK;
    npuc_h5_quiet q;
    npuc__h5_quiet_begin(&q);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);
    const unsigned crt = H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED;
    /* The file creation list is also the root group's: no times, creation
     * order for its links and attributes. */
    if (fcpl < 0 || fapl < 0 || H5Pset_obj_track_times(fcpl, 0) < 0 ||
        H5Pset_link_creation_order(fcpl, crt) < 0 || H5Pset_attr_creation_order(fcpl, crt) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 || H5Pset_file_locking(fapl, 0, 1) < 0) {
        st = hfail(w, s, "cannot set up HDF5 file properties", NULL);
        goto done;
    }
    s->file = H5Fcreate(file, H5F_ACC_TRUNC, fcpl, fapl);
    if (s->file < 0) {
        npuc__h5_errtext(s->err, sizeof s->err);
        st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot create '%s' (HDF5: %s)", w->path, file,
                       s->err);
        goto done;
    }
    s->gcpl = H5Pcreate(H5P_GROUP_CREATE);
    s->lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (s->gcpl < 0 || s->lcpl < 0 || H5Pset_obj_track_times(s->gcpl, 0) < 0 ||
        H5Pset_link_creation_order(s->gcpl, crt) < 0 ||
        H5Pset_char_encoding(s->lcpl, H5T_CSET_UTF8) < 0) {
        st = hfail(w, s, "cannot set up HDF5 group properties", NULL);
        goto done;
    }
    for (size_t i = 0; i < w->nmeta && st == NPUC_OK; i++) {
        const char *k = w->meta_k[i];
        if (reserved_meta(k) || (skip_meta && skip_meta(k))) continue;
        if (!*k) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                           "%s: an empty metadata key cannot be an HDF5 attribute name", w->path);
        } else if (npuc__h5_write_str_attr(s->file, k, w->meta_v[i]) != 0) {
            npuc__h5_errtext(s->err, sizeof s->err);
            st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot write metadata '%s' (HDF5: %s)", w->path,
                           k, s->err);
        }
    }
    if (st != NPUC_OK) goto done;
    switch (style) {
    case NPUC_H5_KERAS2: st = write_keras2(w, s); break;
    case NPUC_H5_KERAS3: st = write_keras3(w, s); break;
    default: st = write_plain(w, s); break;
    }
done:
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    npuc__h5_quiet_end(&q);
    return st;
}

/* A large payload is written in pieces, each reported to the context's
 * progress function (h5_slabs.c keeps the file's bytes as one write). */
static void write_progress(void *user, uint64_t done, uint64_t total) {
    npuc__progress(user, NPUC_PROGRESS_WRITE, done, total);
}

static npuc_status h5w_write(npuc_writer *w, size_t i, const void *data, uint64_t n) {
    h5w_state *s = w->be_state;
    const npuc_tensor_info *t = &w->t[i];
    npuc_status st = NPUC_OK;
    (void)n; /* the core checked n == t->nbytes */
    if (!s || i >= s->n || !s->dpath[i])
        return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: tensor '%s': no dataset", w->path, t->name);
    if (t->numel == 0) return NPUC_OK;
    npuc_h5_quiet q;
    npuc__h5_quiet_begin(&q);
    hid_t d = H5Dopen2(s->file, s->dpath[i], H5P_DEFAULT);
    hid_t type = d < 0 ? H5I_INVALID_HID : H5Dget_type(d);
    if (d < 0 || type < 0) st = hfail(w, s, "cannot open its dataset", t->name);
    else if (npuc__h5_xfer_slabs(d, type, t, (void *)data, 1, w->ctx && w->ctx->progress ? write_progress : NULL,
                                 w->ctx, s->err, sizeof s->err) != 0)
        st = hfailed(w, s, "cannot write data", t->name);
    if (type >= 0) H5Tclose(type);
    if (d >= 0 && H5Dclose(d) < 0 && st == NPUC_OK) st = hfail(w, s, "cannot write data", t->name);
    /* The dataset's bytes are in the file now (a closed dataset's chunks
     * are flushed): start their writeback (writeback.c) through the sec2
     * driver's descriptor, up to the file's size.  HDF5 rewrites its
     * metadata at close; the final fsync writes that. */
    void *h = NULL;
    struct stat sb;
    hid_t fapl = st == NPUC_OK ? H5Fget_access_plist(s->file) : H5I_INVALID_HID;
    if (fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 && H5Fget_vfd_handle(s->file, H5P_DEFAULT, &h) >= 0 && h &&
        fstat(*(int *)h, &sb) == 0)
        st = npuc__writer_wrote(w, *(int *)h, (uint64_t)sb.st_size);
    if (fapl >= 0) H5Pclose(fapl);
    npuc__h5_quiet_end(&q);
    return st;
}

static void free_state(npuc_writer *w) {
    h5w_state *s = w->be_state;
    if (!s) return;
    npuc_h5_quiet q;
    npuc__h5_quiet_begin(&q);
    if (s->gcpl >= 0) H5Pclose(s->gcpl);
    if (s->lcpl >= 0) H5Pclose(s->lcpl);
    if (s->file >= 0) H5Fclose(s->file);
    npuc__h5_quiet_end(&q);
    if (s->dpath)
        for (size_t i = 0; i < s->n; i++) free(s->dpath[i]);
    free(s->dpath);
    npuc__strmap_free(&s->claimed);
    free(s);
    w->be_state = NULL;
}

static npuc_status h5w_begin(npuc_writer *w) {
    return npuc__h5_writer_begin_at(w, w->tmp, npuc__h5_writer_style(w), NULL);
}

npuc_status npuc__h5_writer_finish_at(npuc_writer *w, const char *file) {
    h5w_state *s = w->be_state;
    if (!s) return npuc_fail(w->ctx, NPUC_ERR_INTERNAL, "%s: finish without begin", w->path);
    npuc_h5_quiet q;
    npuc__h5_quiet_begin(&q);
    npuc_status st = NPUC_OK;
    if (s->gcpl >= 0) H5Pclose(s->gcpl);
    if (s->lcpl >= 0) H5Pclose(s->lcpl);
    s->gcpl = s->lcpl = H5I_INVALID_HID;
    herr_t rc = H5Fclose(s->file);
    s->file = H5I_INVALID_HID;
    if (rc < 0) st = hfail(w, s, "cannot complete the file", NULL);
    npuc__h5_quiet_end(&q);
    if (st == NPUC_OK) {
        /* HDF5 has no fsync of its own: sync the closed file ourselves. */
        int fd = open(file, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0)
            st = npuc_fail(w->ctx, NPUC_ERR_IO, "%s: cannot sync '%s'", w->path, file);
        if (fd >= 0) close(fd);
    }
    free_state(w);
    return st;
}

static npuc_status h5w_finish(npuc_writer *w) { return npuc__h5_writer_finish_at(w, w->tmp); }

static void h5w_abort(npuc_writer *w) { free_state(w); }

const npuc_writer_backend npuc__h5_writer_backend = {h5w_begin, h5w_write, h5w_finish, h5w_abort, 0};
