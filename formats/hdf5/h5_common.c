/*
 * h5_common.c - helpers both HDF5 halves need: the one HDF5 lock, error
 * silencing and capture,
 * the dtype <-> HDF5 type table, string attributes, a string map.
 *
 * Float types.  HDF5 describes a float by its size and bit fields (sign
 * position, exponent position and width, mantissa position and width) and
 * exponent bias; float16 (h5py), bfloat16 and the OCP fp8 formats are such
 * custom floats.  We identify a stored float by exactly those fields, so a
 * file written by h5py, by Keras or by us maps back to the same dtype.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5_common.h"

/* ------------------------------------------------------------ library */

/* HDF5 1.10 (Debian's serial build) is not thread-safe: every HDF5 call in
 * the process goes through this one lock, taken by npuc__h5_quiet_begin.
 * It is recursive so that an entry point may call another.  Besides this
 * lock and its once-flag the backend keeps no mutable global state: what
 * quiet_begin saves lives in the caller's npuc_h5_quiet. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock;

/* HDF5 1.10 closes whatever is still open from an atexit() handler, and
 * crashes there (H5F__close_cb) on a file whose write failed, for example
 * on a full disk or past a file-size limit: the failure npuc reported
 * cleanly would end in a segfault.  npuc closes every object it opens, so
 * the handler has nothing to do for npuc and we decline it.  This used to
 * be a constructor, which declined it for every host process that merely
 * linked libnpuc; now it happens once, under pthread_once, right before
 * npuc's own first HDF5 call.  It has no effect when the host initialised
 * HDF5 itself before that (the handler is registered at library init), so
 * a host that relies on HDF5's exit-time cleanup of its own files should
 * call H5open() before handing npuc an HDF5 file.  The contained reader's
 * child (h5_worker.c) leaves with _exit and never runs atexit handlers. */
static void init_once(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &a);
    pthread_mutexattr_destroy(&a);
    H5dont_atexit();
}

/* ------------------------------------------------------------ quiet */

void npuc__h5_quiet_begin(npuc_h5_quiet *q) {
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_lock);
    /* H5Eget_auto2 fails when the application installed a handler with the
     * old H5Eset_auto1; then there is nothing we could restore faithfully,
     * so we silence anyway and leave the stack handler off afterwards.  A
     * nested call saves "none" (the outer one silenced) and restores it. */
    q->saved = H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data) >= 0;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void npuc__h5_quiet_end(npuc_h5_quiet *q) {
    if (q->saved) H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
    q->saved = 0;
    pthread_mutex_unlock(&g_lock);
}

pid_t npuc__h5_fork(void) {
    pthread_once(&g_once, init_once);
    /* Holding the lock across fork(): no other thread is inside HDF5, so the
     * child's copy of the library's state is consistent.  The child is single
     * threaded and starts with a fresh lock (the copy is owned by a thread
     * that does not exist there). */
    pthread_mutex_lock(&g_lock);
    pid_t pid = fork();
    if (pid == 0) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&g_lock, &a);
        pthread_mutexattr_destroy(&a);
        return 0;
    }
    pthread_mutex_unlock(&g_lock);
    return pid;
}

typedef struct errbuf {
    char *buf;
    size_t n;
    int done;
} errbuf;

static herr_t err_walk(unsigned idx, const H5E_error2_t *e, void *data) {
    errbuf *eb = data;
    (void)idx;
    if (eb->done) return 0;
    if (e->desc && *e->desc) {
        snprintf(eb->buf, eb->n, "%s", e->desc);
        eb->done = 1;
    } else {
        char m[128];
        if (H5Eget_msg(e->min_num, NULL, m, sizeof m) > 0) {
            snprintf(eb->buf, eb->n, "%s", m);
            eb->done = 1;
        }
    }
    return 0;
}

void npuc__h5_errtext(char *buf, size_t n) {
    if (!n) return;
    errbuf eb = {buf, n, 0};
    buf[0] = 0;
    /* Upward = innermost first: the function that detected the problem says
     * the most ("inflate() failed", "truncated file: eof = ..."). */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, err_walk, &eb);
    if (!eb.done) snprintf(buf, n, "unknown HDF5 error");
    /* The sec2 driver's I/O failures read "file write failed: time = ...,
     * filename = ..., errno = 28, error message = 'No space left on
     * device', buf = ..."; keep what failed and the system's reason. */
    const char *em = strstr(buf, "error message = '");
    const char *colon = strchr(buf, ':');
    if (em && colon && colon < em) {
        const char *a = em + strlen("error message = '"), *b = strchr(a, '\'');
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%.*s: %.*s", (int)(colon - buf), buf, (int)(b ? b - a : (ptrdiff_t)strlen(a)), a);
        snprintf(buf, n, "%s", tmp);
    }
    /* One line: HDF5 descriptions occasionally carry newlines. */
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* ------------------------------------------------------------ types */

typedef struct float_fields {
    npuc_dtype dt;
    size_t size, spos, epos, esize, mpos, msize, ebias;
} float_fields;

static const float_fields FLOATS[] = {
    {NPUC_DTYPE_F64, 8, 63, 52, 11, 0, 52, 1023},
    {NPUC_DTYPE_F32, 4, 31, 23, 8, 0, 23, 127},
    {NPUC_DTYPE_F16, 2, 15, 10, 5, 0, 10, 15},
    {NPUC_DTYPE_BF16, 2, 15, 7, 8, 0, 7, 127},
    {NPUC_DTYPE_F8_E4M3, 1, 7, 3, 4, 0, 3, 7},
    {NPUC_DTYPE_F8_E5M2, 1, 7, 2, 5, 0, 2, 15},
};
#define NFLOATS (sizeof FLOATS / sizeof FLOATS[0])

static const float_fields *float_of(npuc_dtype dt) {
    for (size_t i = 0; i < NFLOATS; i++)
        if (FLOATS[i].dt == dt) return &FLOATS[i];
    return NULL;
}

static hid_t std_int(npuc_dtype dt) {
    switch (dt) {
    case NPUC_DTYPE_I8: return H5T_STD_I8LE;
    case NPUC_DTYPE_I16: return H5T_STD_I16LE;
    case NPUC_DTYPE_I32: return H5T_STD_I32LE;
    case NPUC_DTYPE_I64: return H5T_STD_I64LE;
    case NPUC_DTYPE_U8: return H5T_STD_U8LE;
    case NPUC_DTYPE_U16: return H5T_STD_U16LE;
    case NPUC_DTYPE_U32: return H5T_STD_U32LE;
    case NPUC_DTYPE_U64: return H5T_STD_U64LE;
    default: return H5I_INVALID_HID;
    }
}

static hid_t bool_type(void) {
    hid_t t = H5Tenum_create(H5T_STD_I8LE);
    if (t < 0) return H5I_INVALID_HID;
    signed char f = 0, tr = 1;
    if (H5Tenum_insert(t, "FALSE", &f) < 0 || H5Tenum_insert(t, "TRUE", &tr) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

hid_t npuc__h5_type_create_keras3(npuc_dtype dt) {
    if (dt != NPUC_DTYPE_BF16) return npuc__h5_type_create(dt);
    return H5Tcreate(H5T_OPAQUE, 2);
}

hid_t npuc__h5_type_create(npuc_dtype dt) {
    if (dt == NPUC_DTYPE_F64) return H5Tcopy(H5T_IEEE_F64LE);
    if (dt == NPUC_DTYPE_F32) return H5Tcopy(H5T_IEEE_F32LE);
    if (dt == NPUC_DTYPE_BOOL) return bool_type();
    const float_fields *f = float_of(dt);
    if (!f) {
        hid_t base = std_int(dt);
        return base < 0 ? H5I_INVALID_HID : H5Tcopy(base);
    }
    /* The order h5py uses for float16: fields first (they must fit the
     * current 32-bit size), then shrink, then the bias. */
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return H5I_INVALID_HID;
    if (H5Tset_fields(t, f->spos, f->epos, f->esize, f->mpos, f->msize) < 0 ||
        H5Tset_size(t, f->size) < 0 || H5Tset_precision(t, 8 * f->size) < 0 ||
        H5Tset_ebias(t, f->ebias) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* 1 if t is h5py's bool: an enum over a 1-byte integer with exactly the
 * members FALSE=0 and TRUE=1; 0 if not; -1 if HDF5 fails. */
static int is_h5py_bool(hid_t t) {
    if (H5Tget_nmembers(t) != 2) return 0;
    hid_t base = H5Tget_super(t);
    if (base < 0) return -1;
    int ok = H5Tget_class(base) == H5T_INTEGER && H5Tget_size(base) == 1;
    H5Tclose(base);
    if (!ok) return 0;
    int seen = 0;
    for (unsigned i = 0; i < 2; i++) {
        char *name = H5Tget_member_name(t, i);
        unsigned char v = 0xff;
        if (!name) return -1;
        if (H5Tget_member_value(t, i, &v) < 0) { H5free_memory(name); return -1; }
        if (strcmp(name, "FALSE") == 0 && v == 0) seen |= 1;
        else if (strcmp(name, "TRUE") == 0 && v == 1) seen |= 2;
        H5free_memory(name);
    }
    return seen == 3;
}

static const char *class_name(H5T_class_t c) {
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

static int is_int_dtype(npuc_dtype dt) { return std_int(dt) >= 0; }
static int is_signed_dtype(npuc_dtype dt) {
    return dt == NPUC_DTYPE_I8 || dt == NPUC_DTYPE_I16 || dt == NPUC_DTYPE_I32 || dt == NPUC_DTYPE_I64;
}

/* The float in FLOATS whose fields t has exactly, or NULL. */
static const float_fields *match_float(hid_t t, size_t size) {
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return NULL;
    size_t prec = H5Tget_precision(t), ebias = H5Tget_ebias(t);
    int off = H5Tget_offset(t);
    if (prec != 8 * size || off != 0) return NULL;
    for (size_t i = 0; i < NFLOATS; i++) {
        const float_fields *f = &FLOATS[i];
        if (f->size == size && f->spos == spos && f->epos == epos && f->esize == esize &&
            f->mpos == mpos && f->msize == msize && f->ebias == ebias)
            return f;
    }
    return NULL;
}

npuc_h5_typecheck npuc__h5_type_classify(hid_t t, const char *hint, npuc_dtype *dt, char *why,
                                         size_t n) {
    H5T_class_t c = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    if (c == H5T_NO_CLASS || size == 0) {
        snprintf(why, n, "HDF5 cannot describe its type");
        return NPUC_H5_TYPE_ERROR;
    }
    npuc_dtype hd = NPUC_DTYPE_COUNT;
    if (hint && npuc_dtype_parse(hint, &hd) != 0) {
        snprintf(why, n, "attribute npuc_dtype '%.40s' names no dtype", hint);
        return NPUC_H5_TYPE_MISMATCH;
    }
    if (c == H5T_FLOAT) {
        H5T_order_t o = H5Tget_order(t);
        if (size > 1 && o != H5T_ORDER_LE && o != H5T_ORDER_BE) {
            snprintf(why, n, "float byte order %d is not supported", (int)o);
            return NPUC_H5_TYPE_UNSUPPORTED;
        }
        if (hint) {
            if (!npuc_dtype_is_float(hd) || npuc_dtype_size(hd) != size) goto mismatch;
            *dt = hd;
            return NPUC_H5_TYPE_OK;
        }
        const float_fields *f = match_float(t, size);
        if (!f) {
            snprintf(why, n, "%zu-byte float with unknown bit fields is not supported", size);
            return NPUC_H5_TYPE_UNSUPPORTED;
        }
        *dt = f->dt;
        return NPUC_H5_TYPE_OK;
    }
    if (c == H5T_INTEGER) {
        if (size != 1 && size != 2 && size != 4 && size != 8) {
            snprintf(why, n, "%zu-byte integers are not supported", size);
            return NPUC_H5_TYPE_UNSUPPORTED;
        }
        H5T_sign_t s = H5Tget_sign(t);
        if (s == H5T_SGN_ERROR) {
            snprintf(why, n, "HDF5 cannot describe its type");
            return NPUC_H5_TYPE_ERROR;
        }
        int sgn = s == H5T_SGN_2;
        if (hint) {
            if (hd == NPUC_DTYPE_BOOL && size == 1) { *dt = hd; return NPUC_H5_TYPE_OK; }
            if (!is_int_dtype(hd) || npuc_dtype_size(hd) != size || is_signed_dtype(hd) != sgn)
                goto mismatch;
            *dt = hd;
            return NPUC_H5_TYPE_OK;
        }
        static const npuc_dtype S[9] = {0, NPUC_DTYPE_I8, NPUC_DTYPE_I16, 0, NPUC_DTYPE_I32,
                                        0, 0, 0, NPUC_DTYPE_I64};
        static const npuc_dtype U[9] = {0, NPUC_DTYPE_U8, NPUC_DTYPE_U16, 0, NPUC_DTYPE_U32,
                                        0, 0, 0, NPUC_DTYPE_U64};
        *dt = sgn ? S[size] : U[size];
        return NPUC_H5_TYPE_OK;
    }
    if (c == H5T_ENUM) {
        int b = is_h5py_bool(t);
        if (b < 0) {
            snprintf(why, n, "HDF5 cannot describe its enum type");
            return NPUC_H5_TYPE_ERROR;
        }
        if (!b) {
            snprintf(why, n, "enum types other than h5py's bool are not supported");
            return NPUC_H5_TYPE_UNSUPPORTED;
        }
        if (hint && hd != NPUC_DTYPE_BOOL) goto mismatch;
        *dt = NPUC_DTYPE_BOOL;
        return NPUC_H5_TYPE_OK;
    }
    if (c == H5T_OPAQUE) {
        /* Keras 3 stores bfloat16 (a NumPy void type to h5py) as 2-byte
         * opaque data marked by the dataset attribute dtype = "bfloat16",
         * which the reader passes on as the hint BF16. */
        if (hint && hd == NPUC_DTYPE_BF16 && size == 2) {
            *dt = hd;
            return NPUC_H5_TYPE_OK;
        }
        if (hint) goto mismatch;
        snprintf(why, n, "HDF5 opaque type is not supported (only Keras 3 bfloat16, marked by a dtype "
                         "attribute, is read)");
        return NPUC_H5_TYPE_UNSUPPORTED;
    }
    snprintf(why, n, "HDF5 %s type is not supported", class_name(c));
    return NPUC_H5_TYPE_UNSUPPORTED;
mismatch:
    snprintf(why, n, "attribute npuc_dtype '%s' contradicts the stored %zu-byte %s type", hint,
             size, class_name(c));
    return NPUC_H5_TYPE_MISMATCH;
}

hid_t npuc__h5_memtype(hid_t ftype, npuc_dtype dt) {
    /* Opaque bytes (Keras 3 bfloat16) have no byte order: read them as they are. */
    if (H5Tget_class(ftype) == H5T_OPAQUE) return H5Tcopy(ftype);
    if (npuc_dtype_is_float(dt)) {
        hid_t t = H5Tcopy(ftype);
        if (t < 0) return H5I_INVALID_HID;
        if (H5Tget_size(t) > 1 && H5Tset_order(t, H5T_ORDER_LE) < 0) {
            H5Tclose(t);
            return H5I_INVALID_HID;
        }
        return t;
    }
    if (dt == NPUC_DTYPE_BOOL)
        return H5Tget_class(ftype) == H5T_ENUM ? H5Tcopy(ftype) : H5Tcopy(H5T_STD_U8LE);
    hid_t base = std_int(dt);
    return base < 0 ? H5I_INVALID_HID : H5Tcopy(base);
}

/* ------------------------------------------------------------ strings */

void npuc__h5_strlist_free(npuc_h5_strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

int npuc__h5_strlist_push(npuc_h5_strlist *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, nc * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = nc;
    }
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, s, len);
    c[len] = 0;
    l->v[l->n++] = c;
    return 0;
}

/* Pushes one fixed-length element: up to the first NUL, trailing spaces
 * dropped for space-padded strings. */
static int push_fixed(npuc_h5_strlist *l, const char *p, size_t size, int spacepad) {
    const char *z = memchr(p, 0, size);
    size_t len = z ? (size_t)(z - p) : size;
    if (spacepad)
        while (len && p[len - 1] == ' ') len--;
    return npuc__h5_strlist_push(l, p, len);
}

/* Reads every element of string attribute a into out.  scalar_only: accept
 * only a scalar; otherwise only rank 1 (empty arrays of any type pass). */
static npuc_h5_attr read_attr(hid_t a, int scalar_only, npuc_h5_strlist *out) {
    npuc_h5_attr r = NPUC_H5_ATTR_ERROR;
    hid_t type = H5Aget_type(a), space = H5Aget_space(a), mt = H5I_INVALID_HID;
    char *buf = NULL;
    char **ptrs = NULL;
    if (type < 0 || space < 0) goto done;
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    hssize_t np = H5Sget_simple_extent_npoints(space);
    if (sc == H5S_NO_CLASS || np < 0) goto done;
    if (scalar_only ? sc != H5S_SCALAR
                    : (sc != H5S_SIMPLE || H5Sget_simple_extent_ndims(space) != 1)) {
        /* An empty array of any type is an empty list. */
        r = !scalar_only && (sc == H5S_NULL || np == 0) ? NPUC_H5_ATTR_OK : NPUC_H5_ATTR_WRONG;
        goto done;
    }
    size_t count = (size_t)np;
    if (count == 0) { r = NPUC_H5_ATTR_OK; goto done; }
    if (H5Tget_class(type) != H5T_STRING) { r = NPUC_H5_ATTR_WRONG; goto done; }
    if (count > NPUC_H5_MAX_LIST) { r = NPUC_H5_ATTR_TOOBIG; goto done; }
    htri_t vl = H5Tis_variable_str(type);
    if (vl < 0) goto done;
    if (!vl) {
        size_t size = H5Tget_size(type);
        uint64_t total;
        if (size == 0) goto done;
        if (npuc_mul_overflow(count, size, &total) || total > NPUC_H5_MAX_ATTR_BYTES) {
            r = NPUC_H5_ATTR_TOOBIG;
            goto done;
        }
        if (!(buf = malloc((size_t)total))) { r = NPUC_H5_ATTR_NOMEM; goto done; }
        /* The file's own fixed-length type is a valid memory type: reading
         * with it copies the bytes without HDF5 re-padding them. */
        if (H5Aread(a, type, buf) < 0) goto done;
        int spacepad = H5Tget_strpad(type) == H5T_STR_SPACEPAD;
        for (size_t i = 0; i < count; i++)
            if (push_fixed(out, buf + i * size, size, spacepad) != 0) { r = NPUC_H5_ATTR_NOMEM; goto done; }
        r = NPUC_H5_ATTR_OK;
        goto done;
    }
    H5T_cset_t cs = H5Tget_cset(type);
    mt = H5Tcopy(H5T_C_S1);
    if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 || cs < 0 || H5Tset_cset(mt, cs) < 0) goto done;
    if (!(ptrs = calloc(count, sizeof *ptrs))) { r = NPUC_H5_ATTR_NOMEM; goto done; }
    if (H5Aread(a, mt, ptrs) < 0) {
        free(ptrs);
        ptrs = NULL;
        goto done;
    }
    r = NPUC_H5_ATTR_OK;
    for (size_t i = 0; i < count && r == NPUC_H5_ATTR_OK; i++) {
        const char *s = ptrs[i] ? ptrs[i] : "";
        size_t len = strnlen(s, NPUC_H5_MAX_ATTR_BYTES + 1);
        if (len > NPUC_H5_MAX_ATTR_BYTES) r = NPUC_H5_ATTR_TOOBIG;
        else if (npuc__h5_strlist_push(out, s, len) != 0) r = NPUC_H5_ATTR_NOMEM;
    }
    H5Dvlen_reclaim(mt, space, H5P_DEFAULT, ptrs);
done:
    free(buf);
    free(ptrs);
    if (mt >= 0) H5Tclose(mt);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return r;
}

static npuc_h5_attr open_attr(hid_t obj, const char *name, hid_t *a) {
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0) return NPUC_H5_ATTR_ERROR;
    if (!ex) return NPUC_H5_ATTR_ABSENT;
    *a = H5Aopen(obj, name, H5P_DEFAULT);
    return *a < 0 ? NPUC_H5_ATTR_ERROR : NPUC_H5_ATTR_OK;
}

npuc_h5_attr npuc__h5_attr_read_string(hid_t a, char **out) {
    npuc_h5_strlist l = {0};
    npuc_h5_attr r = read_attr(a, 1, &l);
    *out = NULL;
    if (r == NPUC_H5_ATTR_OK) {
        if (l.n == 1) { *out = l.v[0]; l.n = 0; }
        else r = NPUC_H5_ATTR_WRONG;
    }
    npuc__h5_strlist_free(&l);
    return r;
}

npuc_h5_attr npuc__h5_attr_string(hid_t obj, const char *name, char **out) {
    hid_t a;
    *out = NULL;
    npuc_h5_attr r = open_attr(obj, name, &a);
    if (r != NPUC_H5_ATTR_OK) return r;
    r = npuc__h5_attr_read_string(a, out);
    H5Aclose(a);
    return r;
}

npuc_h5_attr npuc__h5_attr_strlist(hid_t obj, const char *name, npuc_h5_strlist *out) {
    hid_t a;
    npuc_h5_attr r = open_attr(obj, name, &a);
    if (r != NPUC_H5_ATTR_OK) return r;
    r = read_attr(a, 0, out);
    H5Aclose(a);
    return r;
}

int npuc__h5_write_str_attr(hid_t obj, const char *name, const char *value) {
    int rc = -1;
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR), a = H5I_INVALID_HID;
    if (t < 0 || s < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
        goto done;
    a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) goto done;
    if (H5Awrite(a, t, &value) < 0) goto done;
    rc = 0;
done:
    if (a >= 0 && H5Aclose(a) < 0) rc = -1;
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    return rc;
}

int npuc__h5_write_str_array_attr(hid_t obj, const char *name, const char *const *v, size_t n) {
    int rc = -1, ascii = 1;
    size_t w = 1;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        if (l > w) w = l;
        for (const unsigned char *p = (const unsigned char *)v[i]; *p; p++)
            if (*p >= 0x80) ascii = 0;
    }
    uint64_t total;
    if (npuc_mul_overflow(w, n ? n : 1, &total) || total > SIZE_MAX) return -1;
    /* calloc: the padding bytes go to the file and must be deterministic. */
    char *buf = calloc((size_t)total, 1);
    if (!buf) return -1;
    for (size_t i = 0; i < n; i++) memcpy(buf + i * w, v[i], strlen(v[i]));
    hsize_t dim = n;
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate_simple(1, &dim, NULL), a = H5I_INVALID_HID;
    if (t < 0 || s < 0 || H5Tset_size(t, w) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, ascii ? H5T_CSET_ASCII : H5T_CSET_UTF8) < 0)
        goto done;
    a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) goto done;
    if (H5Awrite(a, t, buf) < 0) goto done;
    rc = 0;
done:
    if (a >= 0 && H5Aclose(a) < 0) rc = -1;
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    free(buf);
    return rc;
}
