/*
 * ck_ct_write.c - an npuc artifact's quant entries as compressed-tensors
 * (ck_ct.h has the layout).  The codes, scales and zero points npuc computed
 * are stored as they are, only re-encoded: compressed-tensors keeps signed
 * codes q in [-2^(b-1), 2^(b-1)) and dequantizes (q - zp) * scale, so an
 * asymmetric npuc code u in [0, 2^b) and zero point z become u - 2^(b-1)
 * and z - 2^(b-1) (the difference, hence every value, is unchanged), and a
 * symmetric code is stored as it is.  What the layout cannot hold is
 * refused, never approximated: a quantized tensor that is not a 2-D "oi"
 * Linear weight named "<m>.weight", a per-tensor scale, a group size that
 * does not divide the input width, other encodings (pruned, factored, N:M).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_ct.h"

void npuc__ct_plan_free(npuc__ct_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) free((char *)p->out[i].t.name);
    free(p->out);
    free(p->first);
    free(p->count);
    json_decref(p->qconfig);
    memset(p, 0, sizeof *p);
}

static const char *meta_get(const npuc_writer *w, const char *key) {
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], key) == 0) return w->meta_v[i];
    return NULL;
}

static npuc_status push(npuc_writer *w, npuc__ct_plan *p, const npuc_tensor_info *t, const char *name, size_t src,
                        npuc__ct_role role) {
    npuc__ct_out *o = realloc(p->out, (p->n + 1) * sizeof *o);
    if (!o) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    p->out = o;
    o = &p->out[p->n];
    memset(o, 0, sizeof *o);
    o->t = *t;
    o->t.group = NULL;
    o->src = src;
    o->role = role;
    if (!(o->t.name = npuc__strdup(name))) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    p->n++;
    return NPUC_OK;
}

static void set_shape(npuc_tensor_info *t, npuc_dtype dt, int rank, int64_t a, int64_t b) {
    t->dtype = dt;
    t->rank = rank;
    t->shape[0] = a;
    t->shape[1] = b;
    npuc__shape_sizes(t->dtype, t->rank, t->shape, &t->numel, &t->nbytes);
    t->layout = NPUC_LAYOUT_NONE;
}

/* "int4/g32 asym": how messages name a scheme. */
static void scheme_text(const json_t *e, char *buf, size_t cap) {
    if (!e) { snprintf(buf, cap, "not quantized"); return; }
    long gs = (long)json_integer_value(json_object_get(e, "group_size"));
    char g[32];
    if (gs > 0) snprintf(g, sizeof g, "g%ld", gs);
    else snprintf(g, sizeof g, "channel");
    snprintf(buf, cap, "int%d/%s %s", (int)json_integer_value(json_object_get(e, "bits")), g,
             json_is_true(json_object_get(e, "symmetric")) ? "sym" : "asym");
}

/* The module of "<m>.weight"; NULL for other names. */
static char *module_of(const char *name) {
    size_t n = strlen(name);
    return n > 7 && strcmp(name + n - 7, ".weight") == 0 ? strndup(name, n - 7) : NULL;
}

/* Fused groups: runtimes load q/k/v and gate/up as one layer with one
 * scheme.  Each member present must have the scheme of the first. */
static npuc_status check_fused(npuc_writer *w, const json_t *ents) {
    static const char *const FUSED[][3] = {{"q_proj", "k_proj", "v_proj"}, {"gate_proj", "up_proj", NULL}};
    for (size_t i = 0; i < w->n; i++) {
        const char *nm = w->t[i].name;
        for (size_t f = 0; f < 2; f++) {
            char first[1100];
            snprintf(first, sizeof first, ".%s.weight", FUSED[f][0]);
            size_t n = strlen(nm), fl = strlen(first);
            if (n <= fl || strcmp(nm + n - fl, first) != 0 || n - fl > 900) continue;
            const json_t *e0 = json_object_get(ents, nm);
            for (int k = 1; k < 3 && FUSED[f][k]; k++) {
                char other[1100];
                snprintf(other, sizeof other, "%.*s.%s.weight", (int)(n - fl), nm, FUSED[f][k]);
                int present = 0;
                for (size_t j = 0; j < w->n && !present; j++) present = strcmp(w->t[j].name, other) == 0;
                const json_t *e1 = json_object_get(ents, other);
                if (!present && !e1) continue;
                char a[64], b[64];
                scheme_text(e0, a, sizeof a);
                scheme_text(e1, b, sizeof b);
                if (strcmp(a, b) != 0)
                    return npuc_fail(w->ctx, NPUC_ERR_ARG,
                                     "%s: compressed-tensors: '%s' is %s but '%s' is %s; runtimes load %s as one layer, "
                                     "so give them one scheme (quantize rules or --exclude)",
                                     w->path, nm, a, other, b, f == 0 ? "q/k/v" : "gate/up");
            }
        }
    }
    return NPUC_OK;
}

/* The config group of entry e's scheme in groups (added when new, keyed
 * by its scheme text in keys); returns the group's "targets" array. */
static json_t *group_for(json_t *groups, json_t *keys, const json_t *e, int *mixed_fmt, const char **fmt0) {
    char key[64];
    scheme_text(e, key, sizeof key);
    int bits = (int)json_integer_value(json_object_get(e, "bits"));
    const char *fmt = bits == 8 ? "int-quantized" : "pack-quantized";
    if (!*fmt0) *fmt0 = fmt;
    else if (strcmp(*fmt0, fmt) != 0) *mixed_fmt = 1;
    json_t *known = json_object_get(keys, key);
    if (known) return json_object_get(json_object_get(groups, json_string_value(known)), "targets");
    long gs = (long)json_integer_value(json_object_get(e, "group_size"));
    json_t *wts = json_object(), *g = json_object(), *targets = json_array();
    int bad = !wts || !g || !targets;
    bad = bad || json_object_set_new(wts, "num_bits", json_integer(bits)) ||
          json_object_set_new(wts, "type", json_string("int")) ||
          json_object_set_new(wts, "symmetric", json_boolean(json_is_true(json_object_get(e, "symmetric")))) ||
          json_object_set_new(wts, "strategy", json_string(gs > 0 ? "group" : "channel")) ||
          json_object_set_new(wts, "group_size", gs > 0 ? json_integer(gs) : json_null()) ||
          json_object_set_new(wts, "dynamic", json_false()) || json_object_set_new(wts, "observer", json_string("minmax"));
    bad = bad || json_object_set(g, "targets", targets) || json_object_set(g, "weights", wts) ||
          json_object_set_new(g, "input_activations", json_null()) ||
          json_object_set_new(g, "output_activations", json_null()) || json_object_set_new(g, "format", json_string(fmt));
    char name[32];
    snprintf(name, sizeof name, "group_%zu", json_object_size(groups));
    bad = bad || json_object_set(groups, name, g) || json_object_set_new(keys, key, json_string(name));
    json_decref(wts);
    json_decref(g);
    json_decref(targets);
    return bad ? NULL : targets; /* groups holds it */
}

/* Checks entry e (of declared codes tensor t) fits the layout; one line. */
static npuc_status check_entry(npuc_writer *w, const char *name, const json_t *e, int64_t *O, int64_t *I) {
    const char *why = NULL;
    const json_t *shape = json_object_get(e, "shape");
    const char *enc = json_string_value(json_object_get(e, "encoding"));
    const char *gran = json_string_value(json_object_get(e, "granularity"));
    const char *lay = json_string_value(json_object_get(e, "layout"));
    long gs = (long)json_integer_value(json_object_get(e, "group_size"));
    int bits = (int)json_integer_value(json_object_get(e, "bits"));
    char *mod = module_of(name);
    if (!enc || strcmp(enc, "quant") != 0) why = "is not plainly quantized (pruned, factored or N:M tensors have no compressed-tensors form)";
    else if (!mod) why = "is not named <module>.weight";
    else if (json_array_size(shape) != 2 || !lay || strcmp(lay, "oi") != 0) why = "is not a 2-D Linear weight (layout oi)";
    else if (!gran || (strcmp(gran, "channel") != 0 && strcmp(gran, "group") != 0)) why = "has a per-tensor scale; use per-channel or per-group";
    else if (bits < 2 || bits > 8) why = "has an unsupported bit width";
    free(mod);
    if (!why) {
        *O = (int64_t)json_integer_value(json_array_get(shape, 0));
        *I = (int64_t)json_integer_value(json_array_get(shape, 1));
        if (gs > 0 && (*I % gs) != 0) why = "has a group size that does not divide its input width";
    }
    if (why)
        return npuc_fail(w->ctx, NPUC_ERR_UNSUPPORTED,
                         "%s: compressed-tensors: tensor '%s' %s; leave it out with --exclude or write npuc's own format",
                         w->path, name, why);
    return NPUC_OK;
}

npuc_status npuc__ct_plan_build(npuc_writer *w, npuc__ct_plan *p) {
    memset(p, 0, sizeof *p);
    npuc_status st = NPUC_OK;
    const char *art = meta_get(w, "npuc");
    json_t *root = art ? json_loads(art, 0, NULL) : NULL;
    json_t *ents = json_object_get(root, "tensors");
    json_t *roles = json_object(), *groups = json_object(), *keys = json_object(), *ignore = json_array();
    p->first = calloc(w->n + 1, sizeof *p->first);
    p->count = calloc(w->n + 1, sizeof *p->count);
    if (!roles || !groups || !keys || !ignore || !p->first || !p->count) {
        st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (art && !json_is_object(ents)) {
        st = npuc_fail(w->ctx, NPUC_ERR_FORMAT, "%s: the artifact description (metadata 'npuc') is not readable", w->path);
        goto done;
    }
    /* part name -> [entry name, role] */
    const char *en;
    json_t *e;
    json_object_foreach(ents, en, e) {
        const char *parts[3] = {json_string_value(json_object_get(e, "codes")), json_string_value(json_object_get(e, "scale")),
                                json_string_value(json_object_get(e, "zero_point"))};
        const char *enc = json_string_value(json_object_get(e, "encoding"));
        if (enc && strcmp(enc, "fake_quant") == 0) continue; /* dense floats: stored as they are */
        int64_t O, I;
        if ((st = check_entry(w, en, e, &O, &I)) != NPUC_OK) goto done;
        for (int r = 0; r < 3; r++)
            if (parts[r] && json_object_set_new(roles, parts[r], json_pack("[s,i]", en, r))) {
                st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
                goto done;
            }
    }
    if ((st = check_fused(w, ents)) != NPUC_OK) goto done;
    int mixed = 0;
    const char *fmt0 = NULL;
    for (size_t i = 0; i < w->n && st == NPUC_OK; i++) {
        const npuc_tensor_info *t = &w->t[i];
        json_t *r = json_object_get(roles, t->name);
        p->first[i] = p->n;
        if (!r) {
            st = push(w, p, t, t->name, i, CT_COPY);
            char *mod = t->rank == 2 && npuc_dtype_is_float(t->dtype) ? module_of(t->name) : NULL;
            if (mod && json_array_append_new(ignore, json_string(mod))) st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            free(mod);
            p->count[i] = p->n - p->first[i];
            continue;
        }
        const char *ename = json_string_value(json_array_get(r, 0));
        int role = (int)json_integer_value(json_array_get(r, 1));
        const json_t *ent = json_object_get(ents, ename);
        int bits = (int)json_integer_value(json_object_get(ent, "bits"));
        int sym = json_is_true(json_object_get(ent, "symmetric"));
        int64_t O, I;
        check_entry(w, ename, ent, &O, &I);
        long gs = (long)json_integer_value(json_object_get(ent, "group_size"));
        int64_t G = gs > 0 ? I / gs : 1, pf = 32 / bits;
        char nm[1100];
        npuc_tensor_info ot = *t;
        if (role == 0) {
            snprintf(nm, sizeof nm, bits == 8 ? "%s" : "%s_packed", ename);
            set_shape(&ot, bits == 8 ? NPUC_DTYPE_I8 : NPUC_DTYPE_I32, 2, O, bits == 8 ? I : (I + pf - 1) / pf);
            if ((st = push(w, p, &ot, nm, i, CT_CODES)) != NPUC_OK) break;
            p->out[p->n - 1].packed_in = json_is_true(json_object_get(ent, "packed"));
            if (bits < 8) {
                snprintf(nm, sizeof nm, "%s_shape", ename);
                set_shape(&ot, NPUC_DTYPE_I64, 1, 2, 0);
                if ((st = push(w, p, &ot, nm, i, CT_SHAPE)) != NPUC_OK) break;
            }
            json_t *targets = group_for(groups, keys, ent, &mixed, &fmt0);
            char *mod = module_of(ename);
            if (!targets || !mod || json_array_append_new(targets, json_string(mod)))
                st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
            free(mod);
        } else if (role == 1) {
            snprintf(nm, sizeof nm, "%s_scale", ename);
            set_shape(&ot, NPUC_DTYPE_F32, 2, O, G);
            st = push(w, p, &ot, nm, i, CT_SCALE);
        } else {
            snprintf(nm, sizeof nm, "%s_zero_point", ename);
            set_shape(&ot, bits == 8 ? NPUC_DTYPE_I8 : NPUC_DTYPE_I32, 2, bits == 8 ? O : (O + pf - 1) / pf, G);
            st = push(w, p, &ot, nm, i, CT_ZP);
        }
        if (st == NPUC_OK) {
            for (size_t k = p->first[i]; k < p->n; k++) {
                p->out[k].bits = bits;
                p->out[k].symmetric = sym;
                p->out[k].rows = O;
                p->out[k].cols = role == 2 ? G : I;
            }
        }
        p->count[i] = p->n - p->first[i];
    }
    if (st != NPUC_OK) goto done;
    /* drop the private scheme keys; the format per group only when mixed */
    const char *gk;
    json_t *g;
    json_object_foreach(groups, gk, g) if (!mixed) json_object_del(g, "format");
    p->qconfig = json_object();
    if (!p->qconfig || json_object_set_new(p->qconfig, "quant_method", json_string("compressed-tensors")) ||
        json_object_set_new(p->qconfig, "format", json_string(mixed ? "mixed-precision" : fmt0 ? fmt0 : "int-quantized")) ||
        json_object_set_new(p->qconfig, "quantization_status", json_string("compressed")) ||
        json_object_set(p->qconfig, "config_groups", groups) || json_object_set(p->qconfig, "ignore", ignore) ||
        json_object_set_new(p->qconfig, "kv_cache_scheme", json_null()))
        st = npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
done:
    json_decref(root);
    json_decref(roles);
    json_decref(groups);
    json_decref(keys);
    json_decref(ignore);
    if (st != NPUC_OK) npuc__ct_plan_free(p);
    return st;
}

/* npuc's code v of declared codes data (bit-packed LSB-first or one byte
 * each), as a compressed-tensors signed code. */
static int code_at(const unsigned char *d, uint64_t v, int bits, int sym, int packed) {
    int u;
    if (packed) {
        uint64_t bit = v * (uint64_t)bits;
        unsigned x = d[bit / 8] | (unsigned)(bit / 8 + 1 < (bit + bits + 7) / 8 ? d[bit / 8 + 1] << 8 : 0);
        u = (int)((x >> (bit % 8)) & ((1u << bits) - 1));
        if (sym && (u & (1 << (bits - 1)))) u -= 1 << bits; /* two's complement */
    } else {
        u = sym ? (int)(signed char)d[v] : (int)d[v];
    }
    return sym ? u : u - (1 << (bits - 1));
}

npuc_status npuc__ct_encode(npuc_writer *w, const npuc__ct_out *o, const void *data, void **buf, uint64_t *n) {
    *buf = NULL;
    *n = o->t.nbytes;
    if (o->role == CT_COPY || o->role == CT_SCALE) return NPUC_OK; /* the declared bytes as they are */
    unsigned char *b = calloc(1, o->t.nbytes ? (size_t)o->t.nbytes : 1);
    if (!b) return npuc_fail(w->ctx, NPUC_ERR_NOMEM, "out of memory");
    const unsigned char *d = data;
    int bits = o->bits, off = 1 << (bits - 1);
    int64_t R = o->rows, C = o->cols;
    if (o->role == CT_SHAPE) {
        int64_t s[2] = {R, C};
        memcpy(b, s, sizeof s);
    } else if (o->role == CT_CODES && bits == 8) {
        for (int64_t i = 0; i < R * C; i++) b[i] = (unsigned char)(signed char)code_at(d, (uint64_t)i, 8, o->symmetric, o->packed_in);
    } else if (o->role == CT_CODES) { /* pack_to_int32 along dim 1 */
        int64_t pf = 32 / bits, P = (C + pf - 1) / pf;
        uint32_t *q = (uint32_t *)b;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                unsigned u = (unsigned)(code_at(d, (uint64_t)(r * C + c), bits, o->symmetric, o->packed_in) + off);
                q[r * P + c / pf] |= (u & ((1u << bits) - 1)) << (bits * (c % pf));
            }
    } else if (bits == 8) { /* zero points, int-quantized: npuc's U8 minus 128 */
        for (int64_t i = 0; i < R * C; i++) b[i] = (unsigned char)(signed char)((int)d[i] - off);
    } else { /* zero points, pack-quantized: pack_to_int32 along dim 0 */
        int64_t pf = 32 / bits;
        uint32_t *q = (uint32_t *)b;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                unsigned u = (unsigned)d[r * C + c]; /* z - 2^(b-1) + 2^(b-1) */
                q[(r / pf) * C + c] |= (u & ((1u << bits) - 1)) << (bits * (r % pf));
            }
    }
    *buf = b;
    return NPUC_OK;
}

npuc_status npuc__ct_config(npuc_ctx *ctx, const char *src_dir, const json_t *qconfig, char **text) {
    *text = NULL;
    json_t *cfg = NULL;
    if (src_dir) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/config.json", src_dir);
        if (stat(p, &sb) == 0) {
            if (sb.st_size > (16 << 20)) return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: over 16 MiB", p);
            json_error_t je;
            cfg = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
            if (!json_is_object(cfg)) {
                json_decref(cfg);
                return npuc_fail(ctx, NPUC_ERR_FORMAT, "%s: not a JSON object (%s)", p, je.text);
            }
        }
    }
    if (!cfg && !(cfg = json_object())) return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    json_t *q = qconfig ? json_deep_copy(qconfig) : NULL;
    if (!qconfig) json_object_del(cfg, "quantization_config"); /* a dense output of a compressed one */
    if ((qconfig && (!q || json_object_set_new(cfg, "quantization_config", q))) ||
        !(*text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)))) {
        json_decref(cfg);
        return npuc_fail(ctx, NPUC_ERR_NOMEM, "out of memory");
    }
    json_decref(cfg);
    return NPUC_OK;
}
