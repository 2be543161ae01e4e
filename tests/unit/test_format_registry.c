/*
 * test_format_registry.c - the format registry (src/core/format_row.h,
 * formats/format_registry.c) walked row by row.
 *
 *   - every row is complete: a name that npuc_format_find/npuc_format_name
 *     map to and from its id, extensions that npuc_format_from_path maps to
 *     it, a sniff and an open, and write options whose declarations are
 *     usable (bounds in order, defaults that npuc_write_opts_set accepts);
 *   - the pinned ids stay pinned (safetensors 1, hdf5 2);
 *   - each writable row's sniff accepts a file its own writer wrote and
 *     every other row's sniff rejects it, and such a file opens as its
 *     format under a name with no known extension;
 *   - npuc_write_opts_set refuses a key no format declares and values out
 *     of the declared bounds, leaving the options unchanged, and the writer
 *     checks options against the output format only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_row.h"
#include "testutil.h"

static npuc_ctx *ctx;

static int setup(void **state) { (void)state; return npuc_ctx_new(&ctx) == NPUC_OK ? 0 : -1; }
static int teardown(void **state) { (void)state; npuc_ctx_free(ctx); return 0; }

static void test_rows_are_complete(void **state) {
    (void)state;
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    assert_true(n >= 2);
    for (size_t i = 0; i < n; i++) {
        const npuc__format_row *r = t[i];
        const npuc_format id = (npuc_format)(i + 1);
        assert_non_null(r->name);
        assert_true(r->name[0] != 0);
        assert_int_equal(npuc_format_find(r->name), id);
        assert_string_equal(npuc_format_name(id), r->name);
        assert_ptr_equal(npuc__format_by_id(id), r);
        assert_int_equal(npuc__format_id(r), id);
        assert_non_null(r->ext);
        /* A directory format (a sharded checkpoint) has no extension. */
        if (!r->writes_dir) assert_non_null(r->ext[0]);
        for (const char *const *e = r->ext; *e; e++) {
            char path[64];
            assert_true((*e)[0] == '.');
            snprintf(path, sizeof path, "dir/model%s", *e);
            assert_int_equal(npuc_format_from_path(path), id);
        }
        assert_non_null(r->sniff);
        assert_non_null(r->open);
        for (size_t k = 0; k < r->nopts; k++) {
            const npuc__opt_decl *d = &r->opts[k];
            assert_non_null(d->key);
            assert_true(d->key[0] != 0 && strlen(d->key) < NPUC_WRITE_OPT_KEY_MAX);
            assert_non_null(d->label);
            assert_non_null(d->help);
            assert_true(npuc_format_accepts(id, d->key));
            assert_ptr_equal(npuc__format_opt_decl(r, d->key), d);
            if (d->type == NPUC__OPT_INT) assert_true(d->min <= d->max);
            else if (d->type == NPUC__OPT_NAME || d->type == NPUC__OPT_PATH || d->type == NPUC__OPT_TEXT)
                assert_true(d->min >= 1 && d->min <= d->max && d->max < NPUC_WRITE_OPT_VALUE_MAX);
            else assert_true(d->choices && d->choices[0]);
            if (!d->dflt) assert_non_null(r->derive); /* someone decides the default */
            npuc_write_opts o = npuc_write_opts_defaults();
            if (d->dflt) assert_int_equal(npuc_write_opts_set(ctx, &o, d->key, d->dflt), NPUC_OK);
        }
    }
    assert_int_equal(npuc_format_find("safetensors"), NPUC_FORMAT_SAFETENSORS);
    assert_int_equal(npuc_format_find("hdf5"), NPUC_FORMAT_HDF5);
    assert_int_equal(npuc_format_find("gguf-not-yet"), NPUC_FORMAT_AUTO);
    assert_string_equal(npuc_format_name(NPUC_FORMAT_AUTO), "auto");
    assert_string_equal(npuc_format_name((npuc_format)(n + 1)), "auto");
    assert_int_equal(npuc_format_from_path("model.bin"), NPUC_FORMAT_AUTO);
    assert_int_equal(npuc_format_from_path("dir.h5/model"), NPUC_FORMAT_AUTO);
}

/* Writes two small tensors with row id's writer to path. */
static void write_small(npuc_format id, const char *path) {
    npuc_write_opts o = npuc_write_opts_defaults();
    o.format = id;
    o.overwrite = 1;
    npuc_writer *w;
    assert_int_equal(npuc_writer_open(ctx, path, &o, &w), NPUC_OK);
    assert_int_equal(npuc_writer_meta(w, "k", "v"), NPUC_OK);
    npuc_tensor_info t = {.name = "fc.weight", .dtype = NPUC_DTYPE_F32, .rank = 2, .shape = {3, 4}};
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    t.name = "fc.bias";
    t.rank = 1;
    assert_int_equal(npuc_writer_declare(w, &t), NPUC_OK);
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i - 5.5f;
    assert_int_equal(npuc_writer_write(w, v, sizeof v), NPUC_OK);
    assert_int_equal(npuc_writer_write(w, v, 3 * sizeof *v), NPUC_OK);
    assert_int_equal(npuc_writer_finish(w), NPUC_OK);
}

static void test_sniff_own_files(void **state) {
    (void)state;
    size_t n;
    const npuc__format_row *const *t = npuc__format_table(&n);
    for (size_t i = 0; i < n; i++) {
        if (!t[i]->writer) continue;
        const npuc_format id = (npuc_format)(i + 1);
        char name[64], path[1200], bare[1200];
        if (t[i]->writes_dir) { /* a directory: only its own row claims it surely */
            snprintf(name, sizeof name, "own%zu", i);
            snprintf(path, sizeof path, "%s", npuc_test_path(name));
            write_small(id, path);
            for (size_t j = 0; j < n; j++) {
                int s = t[j]->sniff(path);
                if (j == i) assert_int_equal(s, NPUC__SNIFF_SIGNATURE);
                else assert_int_equal(s, NPUC__SNIFF_NO);
            }
            npuc_model *m;
            assert_int_equal(npuc_model_open(ctx, path, NULL, &m), NPUC_OK);
            assert_int_equal(npuc_model_format(m), id);
            assert_int_equal(npuc_model_count(m), 2);
            npuc_model_close(m);
            continue;
        }
        snprintf(name, sizeof name, "own%zu%s", i, t[i]->ext[0]);
        snprintf(path, sizeof path, "%s", npuc_test_path(name));
        write_small(id, path);
        for (size_t j = 0; j < n; j++) {
            int s = t[j]->sniff(path);
            if (j == i) assert_true(s > NPUC__SNIFF_NO);
            else assert_int_equal(s, NPUC__SNIFF_NO);
        }
        /* Without a telling extension the sniff decides. */
        snprintf(name, sizeof name, "own%zu.bin", i);
        snprintf(bare, sizeof bare, "%s", npuc_test_path(name));
        size_t len;
        void *bytes = npuc_test_read_file(path, &len);
        assert_non_null(bytes);
        npuc_test_write_file(bare, bytes, len);
        free(bytes);
        npuc_model *m;
        assert_int_equal(npuc_model_open(ctx, bare, NULL, &m), NPUC_OK);
        assert_int_equal(npuc_model_format(m), id);
        assert_int_equal(npuc_model_count(m), 2);
        npuc_model_close(m);
    }
    /* Nothing recognised: the first row's reader says what is wrong. */
    const char *junk = npuc_test_path("junk.bin");
    npuc_test_write_file(junk, "not a weight file", 17);
    for (size_t j = 0; j < n; j++) assert_int_equal(t[j]->sniff(junk), NPUC__SNIFF_NO);
    npuc_model *m = NULL;
    assert_int_not_equal(npuc_model_open(ctx, junk, NULL, &m), NPUC_OK);
    assert_null(m);
}

static void test_write_opts_set(void **state) {
    (void)state;
    npuc_write_opts o = npuc_write_opts_defaults();
    assert_int_equal(o.nopt, 0);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "no-such-option", "1"), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "no-such-option"));
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", "10"), NPUC_ERR_ARG);
    assert_string_equal(npuc_ctx_errmsg(ctx), "deflate level 10 is outside 0..9");
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", "-1"), NPUC_ERR_ARG);
    assert_string_equal(npuc_ctx_errmsg(ctx), "deflate level -1 is outside 0..9");
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", "4x"), NPUC_ERR_ARG);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", ""), NPUC_ERR_ARG);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "structure", "keras4"), NPUC_ERR_ARG);
    assert_string_equal(npuc_ctx_errmsg(ctx), "structure 'keras4': expected plain, keras2 or keras3");
    assert_int_equal(npuc_write_opts_set(NULL, &o, "deflate", "99"), NPUC_ERR_ARG); /* ctx may be NULL */
    assert_int_equal(o.nopt, 0); /* failures leave o unchanged */

    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", "3"), NPUC_OK);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "structure", "keras3"), NPUC_OK);
    assert_int_equal(npuc_write_opts_set(ctx, &o, "deflate", "9"), NPUC_OK); /* replaces */
    assert_int_equal(o.nopt, 2);
    assert_string_equal(npuc__write_opts_get(&o, "deflate"), "9");
    assert_string_equal(npuc__write_opts_get(&o, "structure"), "keras3");
    npuc_write_opts copy = o; /* plain data */
    assert_string_equal(npuc__write_opts_get(&copy, "structure"), "keras3");
}

/* The writer checks the options again, against the output's format only. */
static void test_writer_checks_options(void **state) {
    (void)state;
    npuc_write_opts o = npuc_write_opts_defaults();
    o.overwrite = 1;
    o.nopt = 1; /* what npuc_write_opts_set would have refused */
    snprintf(o.opt[0].key, sizeof o.opt[0].key, "deflate");
    snprintf(o.opt[0].value, sizeof o.opt[0].value, "12");
    npuc_writer *w = NULL;
    assert_int_equal(npuc_writer_open(ctx, npuc_test_path("bad.h5"), &o, &w), NPUC_ERR_ARG);
    assert_string_equal(npuc_ctx_errmsg(ctx), "deflate level 12 is outside 0..9");
    assert_null(w);
    /* An option of another format is ignored. */
    assert_int_equal(npuc_writer_open(ctx, npuc_test_path("ok.safetensors"), &o, &w), NPUC_OK);
    npuc_writer_abort(w);
    w = NULL;
    snprintf(o.opt[0].key, sizeof o.opt[0].key, "bogus");
    assert_int_equal(npuc_writer_open(ctx, npuc_test_path("bad.safetensors"), &o, &w), NPUC_ERR_ARG);
    assert_null(w);
    o.nopt = 0;
    assert_int_equal(npuc_writer_open(ctx, npuc_test_path("model.xyz"), &o, &w), NPUC_ERR_ARG);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "model.xyz: cannot tell the output format from the "
                                                 "name (use .safetensors, .h5, .gguf, .keras or .onnx)"));
}

/* How a model is stored reads back through the row's describe hook. */
static void test_describe(void **state) {
    (void)state;
    const char *h5 = npuc_test_path("k3.h5"), *st = npuc_test_path("d.safetensors");
    write_small(NPUC_FORMAT_SAFETENSORS, st);
    npuc_model *m;
    assert_int_equal(npuc_model_open(ctx, st, NULL, &m), NPUC_OK);
    assert_null(npuc_model_format_opt(m, "structure"));
    assert_int_equal(npuc_model_is_keras(m), 0);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_PLAIN);
    npuc_write_opts o = npuc_write_opts_defaults();
    assert_int_equal(npuc_write_opts_set(ctx, &o, "structure", "keras3"), NPUC_OK);
    assert_int_equal(npuc_model_convert(ctx, m, h5, &o, 0, NPUC_DTYPE_F32), NPUC_OK);
    npuc_model_close(m);
    assert_int_equal(npuc_model_open(ctx, h5, NULL, &m), NPUC_OK);
    assert_string_equal(npuc_model_format_opt(m, "structure"), "keras3");
    assert_null(npuc_model_format_opt(m, "deflate"));
    assert_int_equal(npuc_model_is_keras(m), 1);
    assert_int_equal(npuc_model_h5_style(m), NPUC_H5_KERAS3);
    /* An HDF5 -> HDF5 copy keeps the structure unless told otherwise. */
    const char *h5b = npuc_test_path("k3b.h5");
    assert_int_equal(npuc_model_convert(ctx, m, h5b, NULL, 0, NPUC_DTYPE_F32), NPUC_OK);
    npuc_model_close(m);
    assert_int_equal(npuc_model_open(ctx, h5b, NULL, &m), NPUC_OK);
    assert_string_equal(npuc_model_format_opt(m, "structure"), "keras3");
    npuc_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_are_complete),
        cmocka_unit_test(test_sniff_own_files),
        cmocka_unit_test(test_write_opts_set),
        cmocka_unit_test(test_writer_checks_options),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
