/*
 * h5_reader.c - HDF5 files (plain trees, Keras 2 save_weights, Keras 3
 * .weights.h5) as npuc models.
 *
 * What we read:
 *   - Root scalar string attributes become metadata (layer_names excepted).
 *   - Keras 2 (root, or /model_weights of a full-model file, has the
 *     attribute layer_names): for each layer in layer_names order the group
 *     <layer> with attribute weight_names; each weight is the dataset at
 *     <layer>/<weight name>, named by the weight name.  Datasets the lists do
 *     not reach are appended afterwards from a plain walk, so nothing is lost.
 *   - Keras 3 (root has a group "layers"): a plain walk; a dataset in a
 *     group "vars" belongs to the layer whose group holds "vars".
 *   - Plain: every dataset, depth first, links in creation order when the
 *     group tracks it, else by name (all-digit names numerically).
 * A dataset's string attribute `name` overrides the name from its path, and
 * `npuc_dtype` pins its dtype (the writer sets both).
 *
 * Hostile files: we follow hard links only, visit each object once (cycles
 * terminate), bound depth and object count, refuse external and virtual
 * storage and unavailable filters, and refuse datasets whose size is out of
 * proportion to their storage (NPUC_H5_FILL_SLACK + NPUC_H5_MAX_RATIO x the
 * stored bytes): reading one can allocate at most that much.  Payloads are
 * read on demand (npuc__h5_read) into the caller's buffer: a malloc'd one here
 * (NPUC_H5_INPROCESS=1), the parent's shared memory in the contained reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "h5_common.h"
#include "h5_worker.h"

typedef struct h5r_state {
    hid_t file;
    npuc_h5_style style; /* the tree the file holds */
} h5r_state;

/* An open-addressing set of object addresses. */
typedef struct addrset {
    uint64_t *slot; /* address + 1; 0 = empty */
    size_t cap, n;
} addrset;

typedef struct walker {
    npuc_ctx *ctx;
    npuc_model *m;
    const char *path;
    hid_t file;
    addrset seen;  /* objects the plain walk entered */
    addrset added; /* datasets that became tensors */
    size_t nobj;   /* links followed, bounded by NPUC_H5_MAX_OBJECTS */
    npuc_h5_style style;
    int keras3;
    char err[256];
} walker;

static npuc_status h5_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned);
static void h5_close(npuc_model *m);
static const npuc_backend H5_BACKEND = {h5_load, h5_close, NULL, NULL, NULL};

/* ------------------------------------------------------------ addrset */

static int addr_has(const addrset *s, haddr_t a) {
    if (!s->cap) return 0;
    uint64_t k = (uint64_t)a + 1;
    for (size_t i = (size_t)(k * 0x9e3779b97f4a7c15ull) & (s->cap - 1); s->slot[i];
         i = (i + 1) & (s->cap - 1))
        if (s->slot[i] == k) return 1;
    return 0;
}

static int addr_add(addrset *s, haddr_t a) {
    if (addr_has(s, a)) return 0;
    if (2 * (s->n + 1) > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
        uint64_t *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i]) continue;
            size_t j = (size_t)(s->slot[i] * 0x9e3779b97f4a7c15ull) & (nc - 1);
            while (ns[j]) j = (j + 1) & (nc - 1);
            ns[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = ns;
        s->cap = nc;
    }
    uint64_t k = (uint64_t)a + 1;
    size_t i = (size_t)(k * 0x9e3779b97f4a7c15ull) & (s->cap - 1);
    while (s->slot[i]) i = (i + 1) & (s->cap - 1);
    s->slot[i] = k;
    s->n++;
    return 0;
}

/* ------------------------------------------------------------ helpers */

static npuc_status nomem(walker *w) {
    return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "%s: out of memory", w->path);
}

/* "a" + "/" + "b" (or just "b" when a is empty), malloc'd. */
static char *join(const char *a, const char *b) {
    size_t la = a ? strlen(a) : 0, lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    if (la) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    } else {
        memcpy(s, b, lb + 1);
    }
    return s;
}

static const char *link_kind(H5L_type_t t) {
    switch (t) {
    case H5L_TYPE_SOFT: return "a soft link";
    case H5L_TYPE_EXTERNAL: return "an external link";
    default: return "a user-defined link";
    }
}

static npuc_status bad_link(walker *w, const char *p, H5L_type_t t) {
    return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: '%s' is %s (npuc follows hard links only)",
                     w->path, p, link_kind(t));
}

static npuc_status count_object(walker *w) {
    if (++w->nobj > NPUC_H5_MAX_OBJECTS)
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: more than %u HDF5 objects", w->path,
                         (unsigned)NPUC_H5_MAX_OBJECTS);
    return NPUC_OK;
}

/* Opens the object a hard link points to, by address: no path is
 * re-interpreted, so odd link names ("..", names with '/') cannot redirect us. */
static npuc_status open_addr(walker *w, haddr_t addr, const char *p, hid_t *out) {
    if (addr == HADDR_UNDEF)
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: '%s': link to an undefined address", w->path, p);
    *out = H5Oopen_by_addr(w->file, addr);
    if (*out < 0) {
        npuc__h5_errtext(w->err, sizeof w->err);
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: '%s': cannot open object (HDF5: %s)", w->path,
                         p, w->err);
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ datasets */

static npuc_status check_dcpl(walker *w, hid_t did, const char *p, uint64_t *chunk_elems) {
    npuc_status st = NPUC_OK;
    hid_t dcpl = H5Dget_create_plist(did);
    *chunk_elems = 0;
    if (dcpl < 0) {
        npuc__h5_errtext(w->err, sizeof w->err);
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': cannot read its properties (HDF5: %s)",
                         w->path, p, w->err);
    }
    H5D_layout_t lay = H5Pget_layout(dcpl);
    if (lay == H5D_VIRTUAL) {
        st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                       "%s: dataset '%s': virtual datasets are not supported", w->path, p);
        goto done;
    }
    if (lay != H5D_CONTIGUOUS && lay != H5D_CHUNKED && lay != H5D_COMPACT) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unknown storage layout", w->path, p);
        goto done;
    }
    int next = H5Pget_external_count(dcpl);
    if (next < 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable storage properties",
                       w->path, p);
        goto done;
    }
    if (next > 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                       "%s: dataset '%s': data in external files is not supported", w->path, p);
        goto done;
    }
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable filter pipeline", w->path, p);
        goto done;
    }
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, cfg = 0;
        size_t ncd = 0;
        char name[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, sizeof name, name, &cfg);
        name[sizeof name - 1] = 0;
        /* H5Zfilter_avail may load a plugin from HDF5_PLUGIN_PATH: what is
         * installed is trusted like the library itself. */
        htri_t av = id < 0 ? -1 : H5Zfilter_avail(id);
        unsigned info = 0;
        if (av > 0 && (H5Zget_filter_info(id, &info) < 0 || !(info & H5Z_FILTER_CONFIG_DECODE_ENABLED)))
            av = 0;
        if (av <= 0) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                           "%s: dataset '%s': filter %d%s%s%s is not available", w->path, p, (int)id,
                           *name ? " (" : "", name, *name ? ")" : "");
            goto done;
        }
    }
    if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        uint64_t e = 1;
        if (cr <= 0) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable chunk shape", w->path, p);
            goto done;
        }
        for (int i = 0; i < cr && i < H5S_MAX_RANK; i++)
            if (npuc_mul_overflow(e, cd[i], &e)) e = UINT64_MAX;
        *chunk_elems = e;
    }
done:
    H5Pclose(dcpl);
    return st;
}

/* Reads type, shape and storage of dataset did and checks that reading it
 * is bounded (see the top of the file). */
static npuc_status inspect(walker *w, hid_t did, const char *p, npuc_dtype *dt, int *rank,
                           int64_t *shape) {
    npuc_status st = NPUC_OK;
    hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    char *hint = NULL;
    uint64_t chunk_elems;
    if ((st = check_dcpl(w, did, p, &chunk_elems)) != NPUC_OK) return st;

    npuc_h5_attr ar = npuc__h5_attr_string(did, "npuc_dtype", &hint);
    if (ar == NPUC_H5_ATTR_NOMEM) return nomem(w);
    if (ar != NPUC_H5_ATTR_OK && ar != NPUC_H5_ATTR_ABSENT) {
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT,
                         "%s: dataset '%s': attribute npuc_dtype is not a string", w->path, p);
    }
    type = H5Dget_type(did);
    if (type < 0) {
        npuc__h5_errtext(w->err, sizeof w->err);
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable type (HDF5: %s)",
                       w->path, p, w->err);
        goto done;
    }
    /* Keras 3 marks bfloat16 (stored opaque) with dtype = "bfloat16". */
    if (!hint && H5Tget_class(type) == H5T_OPAQUE) {
        char *kd = NULL;
        ar = npuc__h5_attr_string(did, "dtype", &kd);
        if (ar == NPUC_H5_ATTR_NOMEM) { st = nomem(w); goto done; }
        if (ar == NPUC_H5_ATTR_OK && strcmp(kd, "bfloat16") == 0 && !(hint = npuc__strdup("BF16"))) {
            free(kd);
            st = nomem(w);
            goto done;
        }
        free(kd);
    }
    char why[160];
    npuc_h5_typecheck tc = npuc__h5_type_classify(type, hint, dt, why, sizeof why);
    if (tc != NPUC_H5_TYPE_OK) {
        st = npuc_fail(w->ctx, tc == NPUC_H5_TYPE_UNSUPPORTED ? NPUC_ERR_UNSUPPORTED : NPUC_ERR_FORMAT,
                       "%s: dataset '%s': %s", w->path, p, why);
        goto done;
    }

    space = H5Dget_space(did);
    H5S_class_t sc = space < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(space);
    if (sc == H5S_SCALAR) {
        *rank = 0;
    } else if (sc == H5S_SIMPLE) {
        int r = H5Sget_simple_extent_ndims(space);
        if (r < 0) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable dataspace", w->path, p);
            goto done;
        }
        if (r > NPUC_MAX_RANK) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: dataset '%s': rank %d exceeds %d",
                           w->path, p, r, NPUC_MAX_RANK);
            goto done;
        }
        hsize_t d[NPUC_MAX_RANK];
        if (H5Sget_simple_extent_dims(space, d, NULL) != r) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable dataspace", w->path, p);
            goto done;
        }
        for (int i = 0; i < r; i++) {
            if (d[i] > (hsize_t)INT64_MAX) {
                st = npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: dataset '%s': dimension %d is too large",
                               w->path, p, i);
                goto done;
            }
            shape[i] = (int64_t)d[i];
        }
        *rank = r;
    } else if (sc == H5S_NULL) {
        st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: dataset '%s': null dataspace (no data)",
                       w->path, p);
        goto done;
    } else {
        npuc__h5_errtext(w->err, sizeof w->err);
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': unreadable dataspace (HDF5: %s)",
                       w->path, p, w->err);
        goto done;
    }

    uint64_t numel, nbytes;
    if (npuc__shape_sizes(*dt, *rank, shape, &numel, &nbytes) != 0) {
        st = npuc_fail(w->ctx, NPUC_ERR_OVERFLOW, "%s: dataset '%s': shape overflows 64-bit sizes",
                       w->path, p);
        goto done;
    }
    /* Bounding what a read can allocate and decompress.  Stored bytes S
     * (H5Dget_storage_size) must fit in the file.  Contiguous and compact
     * data is stored verbatim: S equals nbytes, or S is 0 (never written,
     * reads as fill value) and nbytes is at most NPUC_H5_FILL_SLACK.  Chunked
     * data may be compressed: deflate cannot beat NPUC_H5_MAX_RATIO (1032:1,
     * a 258-byte match in 2 bits), so nbytes <= SLACK + RATIO * S; chunks
     * never written count as fill.  A chunk itself may not be larger than
     * max(nbytes, SLACK): HDF5 allocates whole chunks when reading. */
    uint64_t S = H5Dget_storage_size(did);
    uint64_t fsz = w->m->file_size;
    H5D_layout_t lay = chunk_elems ? H5D_CHUNKED : H5D_CONTIGUOUS;
    if (S > fsz) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT,
                       "%s: dataset '%s': claims %llu stored bytes in a %llu-byte file", w->path, p,
                       (unsigned long long)S, (unsigned long long)fsz);
        goto done;
    }
    if (lay == H5D_CONTIGUOUS) {
        if (S != nbytes && (S != 0 || nbytes > NPUC_H5_FILL_SLACK)) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT,
                           "%s: dataset '%s': shape needs %llu bytes but %llu are stored", w->path, p,
                           (unsigned long long)nbytes, (unsigned long long)S);
            goto done;
        }
    } else {
        uint64_t lim, cb;
        if (npuc_mul_overflow(S, NPUC_H5_MAX_RATIO, &lim) ||
            npuc_add_overflow(lim, NPUC_H5_FILL_SLACK, &lim))
            lim = UINT64_MAX;
        if (nbytes > lim) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT,
                           "%s: dataset '%s': %llu bytes of data from %llu stored bytes "
                           "(more than %llux plus fill): refusing a decompression bomb",
                           w->path, p, (unsigned long long)nbytes, (unsigned long long)S,
                           (unsigned long long)NPUC_H5_MAX_RATIO);
            goto done;
        }
        if (npuc_mul_overflow(chunk_elems, npuc_dtype_size(*dt), &cb) ||
            (cb > nbytes && cb > NPUC_H5_FILL_SLACK)) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': chunks larger than the data",
                           w->path, p);
            goto done;
        }
    }
done:
    free(hint);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return st;
}

/* Turns dataset did (at path p, hard-link address addr) into a tensor named
 * by its `name` attribute, else dflt. */
static npuc_status add_dataset(walker *w, hid_t did, haddr_t addr, const char *p, const char *dflt,
                               const char *group) {
    npuc_dtype dt;
    int rank = 0;
    int64_t shape[NPUC_MAX_RANK] = {0};
    npuc_status st = inspect(w, did, p, &dt, &rank, shape);
    if (st != NPUC_OK) return st;
    char *name = NULL;
    npuc_h5_attr ar = npuc__h5_attr_string(did, "name", &name);
    if (ar == NPUC_H5_ATTR_NOMEM) return nomem(w);
    const char *nm = ar == NPUC_H5_ATTR_OK ? name : dflt;
    if (!npuc__utf8_valid(nm, strlen(nm))) {
        free(name);
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: dataset '%s': tensor name is not valid UTF-8",
                         w->path, p);
    }
    size_t idx;
    st = npuc__model_add(w->ctx, w->m, nm, dt, rank, shape, group, &idx);
    free(name);
    if (st != NPUC_OK) return st;
    w->m->offset[idx] = (uint64_t)addr;
    if (!(w->m->src[idx] = npuc__strdup(p))) return nomem(w);
    if (addr_add(&w->added, addr) != 0) return nomem(w);
    return NPUC_OK;
}

/* ------------------------------------------------------------ plain walk */

typedef struct link_ent {
    char *name;
    H5L_type_t type;
    haddr_t addr;
} link_ent;

typedef struct link_list {
    link_ent *v;
    size_t n, cap;
    int oom, toomany;
} link_list;

static void links_free(link_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static herr_t collect_link(hid_t g, const char *name, const H5L_info_t *info, void *op) {
    link_list *l = op;
    (void)g;
    if (l->n >= NPUC_H5_MAX_OBJECTS) { l->toomany = 1; return -1; }
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        link_ent *v = realloc(l->v, nc * sizeof *v);
        if (!v) { l->oom = 1; return -1; }
        l->v = v;
        l->cap = nc;
    }
    char *c = npuc__strdup(name);
    if (!c) { l->oom = 1; return -1; }
    l->v[l->n].name = c;
    l->v[l->n].type = info->type;
    l->v[l->n].addr = info->type == H5L_TYPE_HARD ? info->u.address : HADDR_UNDEF;
    l->n++;
    return 0;
}

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* By name, except that two all-digit names compare as numbers, so Keras 3
 * "vars/10" follows "vars/9". */
static int cmp_links(const void *pa, const void *pb) {
    const char *a = ((const link_ent *)pa)->name, *b = ((const link_ent *)pb)->name;
    if (all_digits(a) && all_digits(b)) {
        const char *x = a, *y = b;
        while (*x == '0' && x[1]) x++;
        while (*y == '0' && y[1]) y++;
        size_t lx = strlen(x), ly = strlen(y);
        if (lx != ly) return lx < ly ? -1 : 1;
        int c = strcmp(x, y);
        if (c) return c;
    }
    return strcmp(a, b);
}

/* Lists the links of group gid in creation order when the group tracks it,
 * else by name. */
static npuc_status list_links(walker *w, hid_t gid, const char *gp, link_list *l) {
    unsigned crt = 0;
    hid_t gcpl = H5Gget_create_plist(gid);
    if (gcpl >= 0) {
        if (H5Pget_link_creation_order(gcpl, &crt) < 0) crt = 0;
        H5Pclose(gcpl);
    }
    herr_t rc = -1;
    if (crt & H5P_CRT_ORDER_TRACKED) {
        rc = H5Literate(gid, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, collect_link, l);
        if (rc < 0 && !l->oom && !l->toomany) links_free(l); /* retry by name */
    }
    int by_name = rc < 0;
    if (rc < 0 && !l->oom && !l->toomany) {
        rc = H5Literate(gid, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_link, l);
        if (rc < 0 && !l->oom && !l->toomany) npuc__h5_errtext(w->err, sizeof w->err);
    }
    if (l->oom) return nomem(w);
    if (l->toomany)
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: group '/%s': more than %u links",
                         w->path, gp ? gp : "", (unsigned)NPUC_H5_MAX_OBJECTS);
    if (rc < 0)
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: group '/%s': cannot list its links (HDF5: %s)",
                         w->path, gp ? gp : "", w->err);
    if (by_name && l->n > 1) qsort(l->v, l->n, sizeof *l->v, cmp_links);
    return NPUC_OK;
}

/* The Keras 3 layer of the datasets in group "vars" under group gid at path
 * gp: gp without its leading "layers/", or the group's `name` attribute;
 * NULL for a "vars" at the root.  *out is malloc'd or NULL. */
static npuc_status keras3_layer(walker *w, hid_t gid, const char *gp, char **out) {
    *out = NULL;
    if (!gp) return NPUC_OK;
    npuc_h5_attr ar = npuc__h5_attr_string(gid, "name", out);
    if (ar == NPUC_H5_ATTR_NOMEM) return nomem(w);
    if (ar != NPUC_H5_ATTR_OK) {
        const char *g = strncmp(gp, "layers/", 7) == 0 ? gp + 7 : gp;
        if (!(*out = npuc__strdup(g))) return nomem(w);
    }
    if (!npuc__utf8_valid(*out, strlen(*out))) {
        free(*out);
        *out = NULL;
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: group '%s': layer name is not valid UTF-8",
                         w->path, gp);
    }
    return NPUC_OK;
}

/* Walks group gid (path gp, NULL for the root) depth first.  group: the
 * Keras 3 layer of datasets directly inside gid, or NULL. */
static npuc_status walk_group(walker *w, hid_t gid, const char *gp, int depth, const char *group) {
    if (depth > NPUC_H5_MAX_DEPTH)
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: group '%s': nested deeper than %d levels",
                         w->path, gp, NPUC_H5_MAX_DEPTH);
    link_list l = {0};
    npuc_status st = list_links(w, gid, gp, &l);
    int group_added = 0;
    for (size_t i = 0; st == NPUC_OK && i < l.n; i++) {
        link_ent *e = &l.v[i];
        char *cp = join(gp, e->name);
        if (!cp) { st = nomem(w); break; }
        hid_t obj = H5I_INVALID_HID;
        if (e->type != H5L_TYPE_HARD) st = bad_link(w, cp, e->type);
        else if (addr_has(&w->seen, e->addr)) { free(cp); continue; }
        else if ((st = count_object(w)) == NPUC_OK && addr_add(&w->seen, e->addr) != 0) st = nomem(w);
        if (st == NPUC_OK) st = open_addr(w, e->addr, cp, &obj);
        if (st == NPUC_OK) {
            H5I_type_t it = H5Iget_type(obj);
            if (it == H5I_GROUP) {
                char *sub = NULL;
                if (w->keras3 && strcmp(e->name, "vars") == 0) st = keras3_layer(w, gid, gp, &sub);
                if (st == NPUC_OK) st = walk_group(w, obj, cp, depth + 1, sub);
                free(sub);
            } else if (it == H5I_DATASET && !addr_has(&w->added, e->addr)) {
                /* A Keras 3 layer is listed once, before its first variable;
                 * its variables sit together in one "vars" group. */
                if (group && !group_added) {
                    st = npuc__model_add_group(w->ctx, w->m, group);
                    group_added = 1;
                }
                if (st == NPUC_OK) st = add_dataset(w, obj, e->addr, cp, cp, group);
            }
            H5Oclose(obj);
        }
        free(cp);
    }
    links_free(&l);
    return st;
}

/* ------------------------------------------------------------ keras 2 */

/* Follows relative path rel (components split at '/', empty and "."
 * components skipped, as HDF5 does) from group start over hard links only.
 * NPUC_ERR_NOT_FOUND (no message) when a component is missing. */
static npuc_status resolve(walker *w, hid_t start, const char *rel, const char *shown, hid_t *out,
                           haddr_t *addr) {
    *out = H5I_INVALID_HID;
    char *copy = npuc__strdup(rel);
    if (!copy) return nomem(w);
    hid_t cur = start;
    H5Iinc_ref(start);
    haddr_t a = HADDR_UNDEF;
    npuc_status st = NPUC_OK;
    int depth = 0;
    char *save = NULL;
    for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0) continue;
        if (++depth > NPUC_H5_MAX_DEPTH) {
            st = npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: '%s': nested deeper than %d levels",
                           w->path, shown, NPUC_H5_MAX_DEPTH);
            break;
        }
        if (H5Iget_type(cur) != H5I_GROUP) { st = NPUC_ERR_NOT_FOUND; break; }
        htri_t ex = H5Lexists(cur, c, H5P_DEFAULT);
        if (ex <= 0) { st = NPUC_ERR_NOT_FOUND; break; }
        H5L_info_t li;
        if (H5Lget_info(cur, c, &li, H5P_DEFAULT) < 0) {
            npuc__h5_errtext(w->err, sizeof w->err);
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: '%s': unreadable link (HDF5: %s)", w->path,
                           shown, w->err);
            break;
        }
        if (li.type != H5L_TYPE_HARD) { st = bad_link(w, shown, li.type); break; }
        if ((st = count_object(w)) != NPUC_OK) break;
        hid_t next = H5I_INVALID_HID;
        if ((st = open_addr(w, li.u.address, shown, &next)) != NPUC_OK) break;
        H5Oclose(cur);
        cur = next;
        a = li.u.address;
    }
    free(copy);
    if (st != NPUC_OK) {
        H5Oclose(cur);
        return st;
    }
    *out = cur;
    *addr = a;
    return NPUC_OK;
}

/* Reads a Keras name list: attribute `name`, or when Keras had to split a
 * large one, `name0`, `name1`, ... (save_attributes_to_hdf5_group). */
static npuc_h5_attr read_names(hid_t obj, const char *name, npuc_h5_strlist *out) {
    npuc_h5_attr r = npuc__h5_attr_strlist(obj, name, out);
    if (r != NPUC_H5_ATTR_ABSENT) return r;
    char an[96];
    for (unsigned k = 0;; k++) {
        snprintf(an, sizeof an, "%s%u", name, k);
        r = npuc__h5_attr_strlist(obj, an, out);
        if (r == NPUC_H5_ATTR_ABSENT) return k ? NPUC_H5_ATTR_OK : NPUC_H5_ATTR_ABSENT;
        if (r != NPUC_H5_ATTR_OK) return r;
        if (out->n > NPUC_H5_MAX_LIST) return NPUC_H5_ATTR_TOOBIG;
    }
}

static npuc_status attr_fail(walker *w, npuc_h5_attr r, const char *where, const char *name) {
    switch (r) {
    case NPUC_H5_ATTR_NOMEM: return nomem(w);
    case NPUC_H5_ATTR_ABSENT:
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: %s: attribute '%s' is missing", w->path,
                         where, name);
    case NPUC_H5_ATTR_TOOBIG:
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED, "%s: %s: attribute '%s' is too large",
                         w->path, where, name);
    case NPUC_H5_ATTR_WRONG:
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: %s: attribute '%s' is not a string array",
                         w->path, where, name);
    default:
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: %s: attribute '%s' is unreadable", w->path,
                         where, name);
    }
}

/* One Keras 2 layer: its group (named by its `name` attribute, else by the
 * layer_names entry) and the datasets its weight_names list. */
static npuc_status keras2_layer(walker *w, hid_t base, const char *bp, const char *layer) {
    npuc_status st;
    hid_t lg = H5I_INVALID_HID;
    haddr_t la;
    char *lp = join(bp, layer), *gname = NULL, where[300];
    npuc_h5_strlist wn = {0};
    if (!lp) return nomem(w);
    snprintf(where, sizeof where, "layer '%.200s'", layer);
    st = resolve(w, base, layer, lp, &lg, &la);
    if (st == NPUC_ERR_NOT_FOUND || (st == NPUC_OK && H5Iget_type(lg) != H5I_GROUP)) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: layer_names lists '%s', which is not a group",
                       w->path, layer);
        goto done;
    }
    if (st != NPUC_OK) goto done;
    npuc_h5_attr r = npuc__h5_attr_string(lg, "name", &gname);
    if (r == NPUC_H5_ATTR_NOMEM) { st = nomem(w); goto done; }
    const char *group = gname ? gname : layer;
    if (!npuc__utf8_valid(group, strlen(group))) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: layer '%s': name is not valid UTF-8", w->path, lp);
        goto done;
    }
    if ((st = npuc__model_add_group(w->ctx, w->m, group)) != NPUC_OK) goto done;
    if ((r = read_names(lg, "weight_names", &wn)) != NPUC_H5_ATTR_OK) {
        st = attr_fail(w, r, where, "weight_names");
        goto done;
    }
    for (size_t i = 0; i < wn.n && st == NPUC_OK; i++) {
        hid_t d;
        haddr_t da;
        char *dp = join(lp, wn.v[i]);
        if (!dp) { st = nomem(w); break; }
        st = resolve(w, lg, wn.v[i], dp, &d, &da);
        if (st == NPUC_ERR_NOT_FOUND || (st == NPUC_OK && H5Iget_type(d) != H5I_DATASET)) {
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT,
                           "%s: layer '%s': weight_names entry '%s' names no dataset ('%s')", w->path,
                           layer, wn.v[i], dp);
        } else if (st == NPUC_OK) {
            st = add_dataset(w, d, da, dp, wn.v[i], group);
        }
        if (d >= 0) H5Oclose(d);
        free(dp);
    }
done:
    if (lg >= 0) H5Oclose(lg);
    npuc__h5_strlist_free(&wn);
    free(lp);
    free(gname);
    return st;
}

static npuc_status keras2(walker *w, hid_t base, const char *bp, const npuc_h5_strlist *layers) {
    for (size_t i = 0; i < layers->n; i++) {
        npuc_status st = keras2_layer(w, base, bp, layers->v[i]);
        if (st != NPUC_OK) return st;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ metadata */

static herr_t collect_attr(hid_t obj, const char *name, const H5A_info_t *info, void *op) {
    npuc_h5_strlist *l = op;
    (void)obj;
    (void)info;
    if (l->n >= 65536) return 1; /* enough: stop quietly */
    return npuc__h5_strlist_push(l, name, strlen(name)) == 0 ? 0 : -1;
}

/* Root scalar string attributes, in creation order when tracked, become
 * metadata; other attributes (arrays, numbers) are skipped. */
static npuc_status read_meta(walker *w, hid_t root) {
    npuc_h5_strlist names = {0};
    unsigned crt = 0;
    hid_t cpl = H5Gget_create_plist(root);
    if (cpl >= 0) {
        if (H5Pget_attr_creation_order(cpl, &crt) < 0) crt = 0;
        H5Pclose(cpl);
    }
    herr_t rc = -1;
    if (crt & H5P_CRT_ORDER_TRACKED) {
        rc = H5Aiterate2(root, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, collect_attr, &names);
        if (rc < 0) npuc__h5_strlist_free(&names);
    }
    if (rc < 0) rc = H5Aiterate2(root, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_attr, &names);
    if (rc < 0) {
        npuc__h5_errtext(w->err, sizeof w->err);
        npuc__h5_strlist_free(&names);
        return npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: cannot list root attributes (HDF5: %s)",
                         w->path, w->err);
    }
    npuc_status st = NPUC_OK;
    for (size_t i = 0; i < names.n && st == NPUC_OK; i++) {
        const char *k = names.v[i];
        if (strcmp(k, "layer_names") == 0 || !npuc__utf8_valid(k, strlen(k))) continue;
        hid_t a = H5Aopen(root, k, H5P_DEFAULT);
        char *v = NULL;
        npuc_h5_attr r = a < 0 ? NPUC_H5_ATTR_ERROR : npuc__h5_attr_read_string(a, &v);
        if (a >= 0) H5Aclose(a);
        if (r == NPUC_H5_ATTR_OK && npuc__utf8_valid(v, strlen(v)))
            st = npuc__model_add_meta(w->ctx, w->m, k, v);
        else if (r == NPUC_H5_ATTR_NOMEM) st = nomem(w);
        else if (r == NPUC_H5_ATTR_ERROR || r == NPUC_H5_ATTR_TOOBIG)
            st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: root attribute '%s' is unreadable", w->path, k);
        free(v);
    }
    npuc__h5_strlist_free(&names);
    return st;
}

/* ------------------------------------------------------------ open */

/* The group holding Keras 2 layer_names: the root, or /model_weights in a
 * whole-model file.  *base is H5I_INVALID_HID when neither has it. */
static npuc_status find_keras2(walker *w, hid_t root, hid_t *base, const char **bp) {
    *base = H5I_INVALID_HID;
    *bp = NULL;
    if (H5Aexists(root, "layer_names") > 0 || H5Aexists(root, "layer_names0") > 0) {
        H5Iinc_ref(root);
        *base = root;
        return NPUC_OK;
    }
    if (H5Lexists(root, "model_weights", H5P_DEFAULT) <= 0) return NPUC_OK;
    H5L_info_t li;
    if (H5Lget_info(root, "model_weights", &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD)
        return NPUC_OK;
    hid_t g = H5I_INVALID_HID;
    npuc_status st = open_addr(w, li.u.address, "model_weights", &g);
    if (st != NPUC_OK) return st;
    if (H5Iget_type(g) == H5I_GROUP &&
        (H5Aexists(g, "layer_names") > 0 || H5Aexists(g, "layer_names0") > 0)) {
        *base = g;
        *bp = "model_weights";
        return NPUC_OK;
    }
    H5Oclose(g);
    return NPUC_OK;
}

static int is_keras3(hid_t root) {
    H5L_info_t li;
    H5O_info_t oi;
    if (H5Lexists(root, "layers", H5P_DEFAULT) <= 0) return 0;
    if (H5Lget_info(root, "layers", &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return 0;
    if (H5Oget_info_by_name2(root, "layers", &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return 0;
    return oi.type == H5O_TYPE_GROUP;
}

static npuc_status build(walker *w, hid_t root) {
    npuc_status st = read_meta(w, root);
    if (st != NPUC_OK) return st;
    hid_t base;
    const char *bp;
    if ((st = find_keras2(w, root, &base, &bp)) != NPUC_OK) return st;
    if (base >= 0) {
        npuc_h5_strlist layers = {0};
        npuc_h5_attr r = read_names(base, "layer_names", &layers);
        w->style = NPUC_H5_KERAS2;
        st = r == NPUC_H5_ATTR_OK ? keras2(w, base, bp, &layers)
                                  : attr_fail(w, r, bp ? "group 'model_weights'" : "root", "layer_names");
        npuc__h5_strlist_free(&layers);
        H5Oclose(base);
        if (st != NPUC_OK) return st;
    } else if (is_keras3(root)) {
        w->style = NPUC_H5_KERAS3;
        w->keras3 = 1;
    }
    /* Everything the Keras lists did not reach (or the whole tree).  The
     * root counts as seen, so a link back to it ends there. */
    H5O_info_t oi;
    if (H5Oget_info2(root, &oi, H5O_INFO_BASIC) >= 0 && addr_add(&w->seen, oi.addr) != 0)
        return nomem(w);
    return walk_group(w, root, NULL, 0, NULL);
}

npuc_status npuc__h5_scan(npuc_ctx *ctx, const char *path, npuc_model **out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return npuc_fail(ctx, NPUC_ERR_IO, "%s: cannot stat", path);
    npuc_model *m = npuc__model_new(path, NPUC_FORMAT_HDF5);
    if (!m) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    m->file_size = (uint64_t)sb.st_size;
    walker w = {.ctx = ctx, .m = m, .path = path, .file = H5I_INVALID_HID, .style = NPUC_H5_PLAIN};
    npuc_status st = NPUC_OK;
    hid_t fapl = H5I_INVALID_HID, root = H5I_INVALID_HID;
    npuc_h5_quiet q;
    h5r_state *s = calloc(1, sizeof *s);
    if (!s) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    s->file = H5I_INVALID_HID;
    m->be = &H5_BACKEND;
    m->be_state = s;

    npuc__h5_quiet_begin(&q);
    /* STRONG: closing the file closes anything still open in it.  No file
     * locking: we only read, and locking fails on some network filesystems. */
    fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_file_locking(fapl, 0, 1) < 0) {
        st = npuc_fail(ctx, NPUC_ERR_INTERNAL, "%s: cannot set up HDF5 file access", path);
        goto fail_quiet;
    }
    s->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (s->file < 0) {
        npuc__h5_errtext(w.err, sizeof w.err);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not a readable HDF5 file (HDF5: %s)", path, w.err);
        goto fail_quiet;
    }
    w.file = s->file;
    root = H5Gopen2(s->file, "/", H5P_DEFAULT);
    if (root < 0) {
        npuc__h5_errtext(w.err, sizeof w.err);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: cannot open the root group (HDF5: %s)", path, w.err);
        goto fail_quiet;
    }
    if ((st = build(&w, root)) != NPUC_OK) goto fail_quiet;
    s->style = w.style;
    H5Gclose(root);
    H5Pclose(fapl);
    npuc__h5_quiet_end(&q);
    free(w.seen.slot);
    free(w.added.slot);
    *out = m;
    return NPUC_OK;

fail_quiet:
    if (root >= 0) H5Gclose(root);
    if (fapl >= 0) H5Pclose(fapl);
    npuc__h5_quiet_end(&q);
fail:
    free(w.seen.slot);
    free(w.added.slot);
    npuc_model_close(m);
    return st;
}

int npuc__h5_keras_rules(const npuc_model *m, npuc_h5_style style) {
    /* ONNX/PyTorch weights moved into a Keras layout keep OIHW: the file says
     * so with format = "pt" (h5_format.c applies the same rule when writing). */
    const char *fmt = npuc_model_meta_get(m, "format");
    return style != NPUC_H5_PLAIN && !(fmt && strcmp(fmt, "pt") == 0);
}

npuc_status npuc__h5_adopt(npuc_ctx *ctx, npuc_model *m, const npuc_h5_as *as) {
    if (!as) return NPUC_OK;
    if (as->file_size) m->file_size = as->file_size;
    if (as->shown) {
        char *p = npuc__strdup(as->shown);
        if (!p) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", as->shown);
        free(m->path);
        m->path = p;
    }
    for (size_t i = 0; i < as->nmeta; i++) {
        size_t j = 0;
        while (j < m->nmeta && strcmp(m->meta_k[j], as->meta_k[i]) != 0) j++;
        if (j == m->nmeta) {
            npuc_status st = npuc__model_add_meta(ctx, m, as->meta_k[i], as->meta_v[i]);
            if (st != NPUC_OK) return st;
            continue;
        }
        char *v = npuc__strdup(as->meta_v[i]);
        if (!v) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
        free(m->meta_v[j]);
        m->meta_v[j] = v;
    }
    return NPUC_OK;
}

npuc_status npuc__h5_open_inprocess(npuc_ctx *ctx, const char *path, const npuc_h5_as *as,
                                    npuc_model **out) {
    npuc_model *m;
    npuc_status st = npuc__h5_scan(ctx, path, &m);
    if (st != NPUC_OK) return st;
    const h5r_state *s = m->be_state;
    if ((st = npuc__h5_adopt(ctx, m, as)) != NPUC_OK ||
        (st = npuc__model_finish(ctx, m, npuc__h5_keras_rules(m, s->style))) != NPUC_OK) {
        npuc_model_close(m);
        return st;
    }
    *out = m;
    return NPUC_OK;
}

/* ------------------------------------------------------------ backend */

npuc_status npuc__h5_read(npuc_ctx *ctx, npuc_model *m, size_t i, void *buf, npuc_h5_progress_fn fn,
                          void *user) {
    h5r_state *s = m->be_state;
    const npuc_tensor_info *t = &m->t[i];
    char err[256];
    npuc_status st = NPUC_OK;
    npuc_h5_quiet q;
    npuc__h5_quiet_begin(&q);
    hid_t did = H5Oopen_by_addr(s->file, (haddr_t)m->offset[i]);
    hid_t ft = H5I_INVALID_HID, mt = H5I_INVALID_HID;
    if (did < 0 || H5Iget_type(did) != H5I_DATASET) {
        npuc__h5_errtext(err, sizeof err);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': cannot open dataset '%s' (HDF5: %s)",
                       m->path, t->name, m->src[i], err);
        goto done;
    }
    if ((ft = H5Dget_type(did)) < 0 || (mt = npuc__h5_memtype(ft, t->dtype)) < 0) {
        npuc__h5_errtext(err, sizeof err);
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': unreadable type (HDF5: %s)", m->path,
                       t->name, err);
        goto done;
    }
    if (t->numel > 0 && npuc__h5_xfer_slabs(did, mt, t, buf, 0, fn, user, err, sizeof err) != 0) {
        st = npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: tensor '%s': cannot read data (HDF5: %s)", m->path,
                       t->name, err);
        goto done;
    }
done:
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (did >= 0) H5Oclose(did);
    npuc__h5_quiet_end(&q);
    return st;
}

/* The in-process read reports to ctx's progress function directly. */
static void ctx_progress(void *user, uint64_t done, uint64_t total) {
    npuc__progress(user, NPUC_PROGRESS_READ, done, total);
}

static npuc_status h5_load(npuc_ctx *ctx, npuc_model *m, size_t i, void **data, int *owned) {
    const npuc_tensor_info *t = &m->t[i];
    if (t->nbytes > SIZE_MAX - 1)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': too large for memory", m->path, t->name);
    /* Never a NULL buffer, even for zero bytes: NULL means "not loaded". */
    unsigned char *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!buf) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: tensor '%s': out of memory", m->path, t->name);
    npuc_status st = npuc__h5_read(ctx, m, i, buf, ctx && ctx->progress ? ctx_progress : NULL, ctx);
    if (st != NPUC_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *owned = 1;
    return NPUC_OK;
}

static void h5_close(npuc_model *m) {
    h5r_state *s = m->be_state;
    if (!s) return;
    if (s->file >= 0) {
        npuc_h5_quiet q;
        npuc__h5_quiet_begin(&q);
        H5Fclose(s->file);
        npuc__h5_quiet_end(&q);
    }
    free(s);
    m->be_state = NULL;
}

/* ------------------------------------------------------------ describing */

/* Models read by neither this reader nor the contained one are PLAIN. */
npuc_h5_style npuc_model_h5_style(const npuc_model *m) {
    npuc_h5_style st;
    if (m && npuc__h5_worker_style(m, &st)) return st;
    const h5r_state *s = m && m->be == &H5_BACKEND ? m->be_state : NULL;
    return s ? s->style : NPUC_H5_PLAIN;
}

const char *npuc__h5_describe(const npuc_model *m, const char *key) {
    npuc_h5_style ws;
    if (strcmp(key, "structure") != 0) return NULL;
    if (m->be != &H5_BACKEND && !npuc__h5_worker_style(m, &ws)) return NULL;
    return npuc_h5_style_name(npuc_model_h5_style(m));
}
