/*
 * model.c - the in-memory model container every reader fills and every pass
 * reads: the tensor table, the name index, metadata, Keras layer groups, and
 * lazy payload access through the format backend.  Which backend opens a
 * file is the format registry's call (format.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "format_row.h"
#include "layout_rules.h"
#include "strmap.h"

/* ------------------------------------------------------------ open */

npuc_open_opts npuc_open_opts_defaults(void) {
    npuc_open_opts o = {.format = NPUC_FORMAT_AUTO, .max_header_bytes = 100000000u};
    return o;
}

npuc_status npuc_model_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *opts,
                            npuc_model **out) {
    *out = NULL;
    npuc_open_opts o = opts ? *opts : npuc_open_opts_defaults();
    if (!path || !*path) return npuc_fail(ctx, NPUC_ERR_ARG, "no input file given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return npuc_fail(ctx, errno == ENOENT ? NPUC_ERR_NOT_FOUND : NPUC_ERR_IO, "%s: %s", path,
                         strerror(errno));
    /* A directory is a model when a format reads directories (a sharded
     * checkpoint, formats/checkpoint): the registry's sniffs decide. */
    if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a regular file", path);
    const npuc__format_row *row;
    npuc_status st = npuc__format_for_open(ctx, path, &o, &row);
    if (st != NPUC_OK) return st;
    if (S_ISDIR(sb.st_mode) && !row->writes_dir) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: not a regular file", path);
    if ((st = row->open(ctx, path, &o, out)) != NPUC_OK) return st;
    (*out)->format = npuc__format_id(row);
    /* A graph the file states (ONNX) is read now, so the roles and layouts
     * its ops state replace the name/rank rules before any pass asks. */
    if ((st = npuc__format_read_graph(ctx, *out)) != NPUC_OK && st != NPUC_ERR_NOT_FOUND) {
        npuc_model_close(*out);
        *out = NULL;
        return st;
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ builder */

npuc_model *npuc__model_new(const char *path, npuc_format fmt) {
    npuc_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->path = npuc__strdup(path);
    if (!m->path) { free(m); return NULL; }
    m->format = fmt;
    return m;
}

npuc_status npuc__model_add(npuc_ctx *ctx, npuc_model *m, const char *name, npuc_dtype dt,
                            int rank, const int64_t *shape, const char *group, size_t *idx) {
    if (rank < 0 || rank > NPUC_MAX_RANK)
        return npuc_fail(ctx, NPUC_ERR_UNSUPPORTED, "%s: tensor '%s': rank %d exceeds %d", m->path,
                         name, rank, NPUC_MAX_RANK);
    if (m->n == m->cap) {
        size_t cap = m->cap;
        size_t c2 = cap, c3 = cap, c4 = cap, c5 = cap;
        if (npuc__grow((void **)&m->t, &cap, m->n + 1, sizeof *m->t) ||
            npuc__grow((void **)&m->offset, &c2, m->n + 1, sizeof *m->offset) ||
            npuc__grow((void **)&m->src, &c3, m->n + 1, sizeof *m->src) ||
            npuc__grow((void **)&m->buf, &c4, m->n + 1, sizeof *m->buf) ||
            npuc__grow((void **)&m->owned, &c5, m->n + 1, sizeof *m->owned))
            return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
        m->cap = cap;
    }
    npuc_tensor_info *t = &m->t[m->n];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    if (npuc__shape_sizes(dt, rank, shape, &t->numel, &t->nbytes) != 0)
        return npuc_fail(ctx, NPUC_ERR_OVERFLOW, "%s: tensor '%s': shape overflows 64-bit sizes",
                         m->path, name);
    t->name = npuc__strdup(name);
    t->group = group ? npuc__strdup(group) : NULL;
    if (!t->name || (group && !t->group)) {
        free((char *)t->name);
        free((char *)t->group);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    }
    if (idx) *idx = m->n;
    m->n++;
    return NPUC_OK;
}

static npuc_status add_pair(npuc_ctx *ctx, const char *path, char ***ks, char ***vs, size_t *n,
                            size_t *cap, const char *k, const char *v) {
    size_t c1 = *cap, c2 = *cap;
    if (npuc__grow((void **)ks, &c1, *n + 1, sizeof **ks) || npuc__grow((void **)vs, &c2, *n + 1, sizeof **vs))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    *cap = c1;
    char *kk = npuc__strdup(k), *vv = npuc__strdup(v);
    if (!kk || !vv) {
        free(kk);
        free(vv);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", path);
    }
    (*ks)[*n] = kk;
    (*vs)[*n] = vv;
    (*n)++;
    return NPUC_OK;
}

npuc_status npuc__model_add_meta(npuc_ctx *ctx, npuc_model *m, const char *k, const char *v) {
    return add_pair(ctx, m->path, &m->meta_k, &m->meta_v, &m->nmeta, &m->capmeta, k, v);
}

npuc_status npuc__model_add_group(npuc_ctx *ctx, npuc_model *m, const char *g) {
    if (npuc__grow((void **)&m->groups, &m->capgroups, m->ngroups + 1, sizeof *m->groups))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    if (!(m->groups[m->ngroups] = npuc__strdup(g)))
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    m->ngroups++;
    return NPUC_OK;
}

/* FNV-1a (strmap.h): small, good enough for tensor names. */
static size_t hash_str(const char *s) { return (size_t)npuc__fnv1a64(s); }

/* Builds an open-addressing index of names[0..n); returns the index of the
 * first duplicate name + 1, 0 on success, or (size_t)-1 on allocation failure. */
static size_t build_index(const npuc_tensor_info *t, size_t n, size_t **hash, size_t *hcap) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    size_t *h = calloc(cap, sizeof *h);
    if (!h) return (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t s = hash_str(t[i].name) & (cap - 1);
        while (h[s]) {
            if (strcmp(t[h[s] - 1].name, t[i].name) == 0) { free(h); return i + 1; }
            s = (s + 1) & (cap - 1);
        }
        h[s] = i + 1;
    }
    free(*hash);
    *hash = h;
    *hcap = cap;
    return 0;
}

static int index_find(const npuc_tensor_info *t, const size_t *hash, size_t hcap, const char *name,
                      size_t *idx) {
    if (!hash) return -1;
    size_t s = hash_str(name) & (hcap - 1);
    while (hash[s]) {
        if (strcmp(t[hash[s] - 1].name, name) == 0) { *idx = hash[s] - 1; return 0; }
        s = (s + 1) & (hcap - 1);
    }
    return -1;
}

/* Replaces the suffix of name after its last '.' and looks the result up. */
static int find_sibling(const npuc_model *m, const char *name, const char *suffix, size_t *idx) {
    const char *dot = strrchr(name, '.');
    if (!dot) return -1;
    size_t stem = (size_t)(dot - name) + 1;
    size_t sl = strlen(suffix);
    char buf[1024];
    if (stem + sl + 1 > sizeof buf) return -1;
    memcpy(buf, name, stem);
    memcpy(buf + stem, suffix, sl + 1);
    return npuc_model_find(m, buf, idx);
}

/* The model's copy of evidence phrase ev: tensor infos point to one string
 * per distinct phrase (a model has few).  NULL for "" or out of memory
 * (*oom set). */
static const char *intern(npuc_model *m, const char *ev, int *oom) {
    if (!ev || !*ev) return NULL;
    for (size_t i = m->nevidence; i-- > 0;)
        if (strcmp(m->evidence[i], ev) == 0) return m->evidence[i];
    if (npuc__grow((void **)&m->evidence, &m->capevidence, m->nevidence + 1, sizeof *m->evidence) ||
        !(m->evidence[m->nevidence] = npuc__strdup(ev))) {
        *oom = 1;
        return NULL;
    }
    return m->evidence[m->nevidence++];
}

/* Sets tensor i's layout as stated (a rule, a recorded entry, a caller):
 * that is certain. */
static int state_layout(npuc_model *m, size_t i, npuc_layout l, const char *why) {
    int oom = 0;
    m->t[i].layout = l;
    m->t[i].confidence = NPUC_CONF_CERTAIN;
    m->t[i].evidence = intern(m, why, &oom);
    return oom ? -1 : 0;
}

/* The layout hook for a graph a file states (format_row.h read_graph): the
 * role and layout of tensor i as the op that consumes it says, which wins
 * over the name/rank rules npuc__model_finish applied (certain). */
npuc_status npuc__model_state_layout(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_role role, npuc_layout l,
                                     const char *why) {
    if (i >= m->n) return npuc_fail(ctx, NPUC_ERR_ARG, "%s: no tensor %zu", m->path, i);
    if (l != NPUC_LAYOUT_NONE && npuc_layout_out_axis(l, m->t[i].rank) < 0)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': layout %s does not fit rank %d", m->path,
                         m->t[i].name, npuc_layout_name(l), m->t[i].rank);
    m->t[i].role = role;
    if (state_layout(m, i, l, why) != 0) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    return NPUC_OK;
}

npuc_status npuc__model_finish(npuc_ctx *ctx, npuc_model *m, int keras) {
    size_t dup = build_index(m->t, m->n, &m->hash, &m->hcap);
    if (dup == (size_t)-1) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    if (dup) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: duplicate tensor name '%s'", m->path,
                              m->t[dup - 1].name);
    /* Evidence, strongest first (layout_rules.h); the file's own "format"
     * and Keras model_config come from its metadata, as the reader found it. */
    npuc__layout_src src;
    if (npuc__layout_src_init(&src, keras, npuc_model_meta_get(m, "format"),
                              npuc_model_meta_get(m, "model_config")) != 0)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    int oom = 0;
    npuc__layout_decision *d = calloc(m->n ? m->n : 1, sizeof *d);
    if (!d) {
        npuc__layout_src_free(&src);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    }
    for (size_t i = 0; i < m->n; i++) npuc__layout_decide(&src, &m->t[i], &d[i]);
    npuc__layout_refine(&src, m->t, m->n, d);
    for (size_t i = 0; i < m->n; i++) {
        npuc_tensor_info *t = &m->t[i];
        t->role = d[i].role;
        t->layout = d[i].layout;
        t->confidence = d[i].conf;
        t->evidence = intern(m, d[i].ev, &oom);
    }
    free(d);
    npuc__layout_src_free(&src);
    /* PyTorch BatchNorm: X.weight / X.bias beside X.running_mean are gamma/beta. */
    for (size_t i = 0; i < m->n; i++) {
        size_t j;
        npuc_tensor_info *t = &m->t[i];
        if (t->rank != 1 || find_sibling(m, t->name, "running_mean", &j) != 0) continue;
        const char *dot = strrchr(t->name, '.');
        if (strcmp(dot, ".weight") == 0) t->role = NPUC_ROLE_BN_GAMMA;
        else if (strcmp(dot, ".bias") == 0) t->role = NPUC_ROLE_BN_BETA;
        else continue;
        t->confidence = NPUC_CONF_CERTAIN;
        t->evidence = intern(m, "PyTorch name: BatchNorm weight/bias beside running_mean", &oom);
    }
    if (oom) return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    /* Layouts recorded by npuc when it wrote the file. */
    const char *lj = npuc_model_meta_get(m, "npuc.layout");
    if (lj) {
        json_error_t e;
        json_t *o = json_loads(lj, 0, &e);
        if (!o || !json_is_object(o)) {
            json_decref(o);
            return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: metadata 'npuc.layout' is not a JSON object",
                             m->path);
        }
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) {
            size_t idx;
            npuc_layout l;
            if (!json_is_string(v) || npuc_layout_parse(json_string_value(v), &l) != 0 ||
                npuc_model_find(m, k, &idx) != 0 ||
                (l != NPUC_LAYOUT_NONE && npuc_layout_out_axis(l, m->t[idx].rank) < 0)) {
                /* k belongs to o: format the message before dropping o. */
                npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: metadata 'npuc.layout': bad entry for tensor '%.160s'",
                          m->path, k);
                json_decref(o);
                return NPUC_ERR_FORMAT;
            }
            if (state_layout(m, idx, l, "recorded in npuc.layout metadata") != 0) {
                json_decref(o);
                return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
            }
        }
        json_decref(o);
    }
    return NPUC_OK;
}

/* ------------------------------------------------------------ accessors */

void npuc_model_close(npuc_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) npuc_model_release(m, i);
    if (m->be && m->be->close) m->be->close(m);
    if (m->graph && m->graph_free) m->graph_free(m->graph);
    for (size_t i = 0; i < m->n; i++) {
        free((char *)m->t[i].name);
        free((char *)m->t[i].group);
        free(m->src[i]);
    }
    for (size_t i = 0; i < m->nmeta; i++) { free(m->meta_k[i]); free(m->meta_v[i]); }
    for (size_t i = 0; i < m->ngroups; i++) free(m->groups[i]);
    for (size_t i = 0; i < m->nevidence; i++) free(m->evidence[i]);
    free(m->evidence);
    free(m->t); free(m->offset); free(m->src); free(m->buf); free(m->owned);
    free(m->hash); free(m->meta_k); free(m->meta_v); free(m->groups); free(m->path);
    free(m);
}

const char *npuc_model_path(const npuc_model *m) { return m->path; }
npuc_format npuc_model_format(const npuc_model *m) { return m->format; }
uint64_t npuc_model_file_size(const npuc_model *m) { return m->file_size; }
size_t npuc_model_count(const npuc_model *m) { return m->n; }

const npuc_tensor_info *npuc_model_tensor(const npuc_model *m, size_t i) {
    return i < m->n ? &m->t[i] : NULL;
}

int npuc_model_find(const npuc_model *m, const char *name, size_t *idx) {
    return index_find(m->t, m->hash, m->hcap, name, idx);
}

size_t npuc_model_meta_count(const npuc_model *m) { return m->nmeta; }

void npuc_model_meta_at(const npuc_model *m, size_t i, const char **key, const char **value) {
    *key = i < m->nmeta ? m->meta_k[i] : NULL;
    *value = i < m->nmeta ? m->meta_v[i] : NULL;
}

const char *npuc_model_meta_get(const npuc_model *m, const char *key) {
    for (size_t i = 0; i < m->nmeta; i++)
        if (strcmp(m->meta_k[i], key) == 0) return m->meta_v[i];
    return NULL;
}

size_t npuc_model_group_count(const npuc_model *m) { return m->ngroups; }
const char *npuc_model_group(const npuc_model *m, size_t i) {
    return i < m->ngroups ? m->groups[i] : NULL;
}

npuc_status npuc_model_set_layout(npuc_ctx *ctx, npuc_model *m, size_t i, npuc_layout l) {
    if (i >= m->n) return npuc_fail(ctx, NPUC_ERR_ARG, "tensor index %zu out of range", i);
    npuc_tensor_info *t = &m->t[i];
    if ((unsigned)l >= NPUC_LAYOUT_COUNT ||
        (l != NPUC_LAYOUT_NONE && npuc_layout_out_axis(l, t->rank) < 0))
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: tensor '%s': layout '%s' does not fit rank %d",
                         m->path, t->name, npuc_layout_name(l), t->rank);
    if (state_layout(m, i, l, "set by the caller") != 0)
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "%s: out of memory", m->path);
    return NPUC_OK;
}

npuc_status npuc_model_apply_layout_rules(npuc_ctx *ctx, npuc_model *m, const char *const *rules,
                                          size_t nrules) {
    if (nrules == 0) return NPUC_OK;
    regex_t *re = calloc(nrules, sizeof *re);
    npuc_layout *lay = calloc(nrules, sizeof *lay);
    size_t *hits = calloc(nrules, sizeof *hits);
    npuc_layout *newl = calloc(m->n ? m->n : 1, sizeof *newl);
    unsigned char *stated = calloc(m->n ? m->n : 1, 1);
    size_t ncomp = 0;
    npuc_status st = NPUC_OK;
    if (!re || !lay || !hits || !newl || !stated) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
    for (size_t r = 0; r < nrules; r++) {
        const char *eq = strrchr(rules[r], '=');
        if (!eq || eq == rules[r] || !eq[1]) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--layout '%s': expected REGEX=NAME", rules[r]);
            goto fail;
        }
        if (npuc_layout_parse(eq + 1, &lay[r]) != 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG,
                           "--layout '%s': unknown layout '%s' (none oi io oihw iohw hwio hwim doi)",
                           rules[r], eq + 1);
            goto fail;
        }
        size_t pl = (size_t)(eq - rules[r]);
        char *pat = malloc(pl + 1);
        if (!pat) { st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory"); goto fail; }
        memcpy(pat, rules[r], pl);
        pat[pl] = 0;
        int rc = npuc__regcomp(&re[r], pat);
        free(pat);
        if (rc != 0) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "--layout '%s': %s", rules[r],
                           rc == REG_ESIZE ? "regular expression too long or too complex" : "invalid regular expression");
            goto fail;
        }
        ncomp++;
    }
    for (size_t i = 0; i < m->n; i++) {
        newl[i] = m->t[i].layout;
        for (size_t r = 0; r < nrules; r++) {
            if (regexec(&re[r], m->t[i].name, 0, NULL, 0) != 0) continue;
            hits[r]++;
            if (lay[r] != NPUC_LAYOUT_NONE && npuc_layout_out_axis(lay[r], m->t[i].rank) < 0) {
                st = npuc_fail(ctx, NPUC_ERR_ARG,
                               "%s: --layout '%s': tensor '%s' has rank %d, layout '%s' needs %s",
                               m->path, rules[r], m->t[i].name, m->t[i].rank,
                               npuc_layout_name(lay[r]),
                               npuc_layout_min_rank(lay[r]) == 2 ? "rank 2" : "rank >= 3");
                goto fail;
            }
            newl[i] = lay[r];
            stated[i] = 1;
            break;
        }
    }
    for (size_t r = 0; r < nrules; r++)
        if (!hits[r]) {
            st = npuc_fail(ctx, NPUC_ERR_ARG, "%s: --layout '%s' matches no tensor", m->path, rules[r]);
            goto fail;
        }
    for (size_t i = 0; i < m->n; i++)
        if (stated[i] && state_layout(m, i, newl[i], "stated with --layout") != 0) {
            st = npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
            goto fail;
        }
fail:
    for (size_t r = 0; r < ncomp; r++) regfree(&re[r]);
    free(re); free(lay); free(hits); free(newl); free(stated);
    return st;
}

npuc_status npuc_model_data(npuc_ctx *ctx, npuc_model *m, size_t i, const void **data) {
    if (i >= m->n) return npuc_fail(ctx, NPUC_ERR_ARG, "tensor index %zu out of range", i);
    if (!m->buf[i]) {
        void *p = NULL;
        int owned = 0;
        npuc_status st = m->be->load(ctx, m, i, &p, &owned);
        if (st != NPUC_OK) return st;
        m->buf[i] = p;
        m->owned[i] = (unsigned char)owned;
    }
    *data = m->buf[i];
    return NPUC_OK;
}

int npuc__model_can_prefetch(const npuc_model *m) { return m->be && m->be->prefetch; }

void npuc__model_prefetch(npuc_model *m, size_t i) {
    if (i < m->n && m->be && m->be->prefetch) m->be->prefetch(m, i);
}

int npuc__model_can_read_range(const npuc_model *m) { return m->be && m->be->read_range; }

npuc_status npuc__model_read_range(npuc_ctx *ctx, npuc_model *m, size_t i, uint64_t off, uint64_t n, void *dst) {
    if (i >= m->n || !npuc__model_can_read_range(m) || off > m->t[i].nbytes || n > m->t[i].nbytes - off)
        return npuc_fail(ctx, NPUC_ERR_ARG, "%s: cannot read bytes [%llu, +%llu) of tensor %zu", m->path,
                         (unsigned long long)off, (unsigned long long)n, i);
    return m->be->read_range(ctx, m, i, off, n, dst);
}

void npuc_model_release(npuc_model *m, size_t i) {
    if (i >= m->n) return;
    if (m->owned[i]) free(m->buf[i]);
    else if (m->buf[i] && m->be && m->be->release) m->be->release(m, i, m->buf[i]);
    m->buf[i] = NULL;
    m->owned[i] = 0;
}

npuc_status npuc_model_read_f32(npuc_ctx *ctx, npuc_model *m, size_t i, float *dst) {
    const void *p;
    int was_loaded = i < m->n && m->buf[i] != NULL;
    npuc_status st = npuc_model_data(ctx, m, i, &p);
    if (st != NPUC_OK) return st;
    npuc_convert(dst, NPUC_DTYPE_F32, p, m->t[i].dtype, (size_t)m->t[i].numel);
    if (!was_loaded) npuc_model_release(m, i);
    return NPUC_OK;
}
