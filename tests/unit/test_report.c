/*
 * test_report.c - the report writers, derived warnings, histograms and
 * baselines on summaries built by hand (so each case is known exactly):
 * hostile names are escaped in HTML and Markdown, non-finite numbers are
 * encoded as strings in JSON, the five formats are all written, and the
 * baseline rule flags exactly the growth beyond the allowed percentage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* A summary of four records: a 4-bit first layer, a kept bias, a factored
 * tensor that saves nothing, and a last layer with a NaN SQNR and a name
 * that tries to break HTML and Markdown. */
static void make_summary(npuc_summary *s) {
    assert_int_equal(npuc_summary_init(s, "test", 4), NPUC_OK);
    static const char *const NAMES[4] = {"conv.weight", "conv.bias", "lr.weight", "<script>x|y`z</script>"};
    for (int i = 0; i < 4; i++) {
        npuc_tensor_record *r = &s->records[i];
        npuc_tensor_info t;
        memset(&t, 0, sizeof t);
        t.name = NAMES[i];
        t.dtype = NPUC_DTYPE_F32;
        t.rank = i == 1 ? 1 : 2;
        t.shape[0] = 8;
        t.shape[1] = 8;
        t.numel = i == 1 ? 8 : 64;
        t.nbytes = t.numel * 4;
        assert_int_equal(npuc_record_from_tensor(r, &t), NPUC_OK);
    }
    npuc_tensor_record *r = &s->records[0];
    r->action = NPUC_ACTION_QUANTIZED;
    snprintf(r->scheme, sizeof r->scheme, "int4/ch");
    npuc_record_set(r, "bits", 4);
    r->bytes_after = 40;
    r->has_error = 1;
    npuc_error_from_sums(&r->err, 64, 1.0, 0.01, 0.99, 1.0, 0.05, 0, 0); /* 20 dB */
    r = &s->records[2];
    r->action = NPUC_ACTION_FACTORED;
    snprintf(r->scheme, sizeof r->scheme, "r=8");
    r->bytes_after = 512; /* 2 * 8 * 8 * 4: no saving */
    r->has_error = 1;
    npuc_error_from_sums(&r->err, 64, 1.0, 0.001, 0.999, 1.0, 0.01, 0, 0); /* 30 dB */
    r = &s->records[3];
    r->action = NPUC_ACTION_QUANTIZED;
    snprintf(r->scheme, sizeof r->scheme, "int8/ch");
    npuc_record_set(r, "bits", 8);
    r->bytes_after = 72;
    r->has_error = 1;
    npuc_error_from_sums(&r->err, 64, 1.0, 0.0001, 1, 1, 0.001, 0, 0);
    r->err.sqnr_db = NAN;
    r->err.mse = INFINITY;
    snprintf(r->note, sizeof r->note, "a <note> & | pipe");
    float w[64], a[64];
    for (int i = 0; i < 64; i++) {
        w[i] = (float)(i - 32) / 32.0f;
        a[i] = w[i] + (i >= 60 ? 0.25f : 0.0f); /* error only in the top bins */
    }
    assert_int_equal(npuc_record_measure_hist(r, w, a, 64), NPUC_OK);
    npuc_summary_finish(s);
}

/* The whole report in one format, as a malloc'd string. */
static char *render(npuc_summary *s, npuc_report_format fmt, const npuc_report_info *info) {
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *path = npuc_test_path("r.out");
    assert_int_equal(npuc_report_write_file(ctx, path, fmt, s, info), NPUC_OK);
    npuc_ctx_free(ctx);
    size_t n;
    char *buf = npuc_test_read_file(path, &n);
    assert_non_null(buf);
    char *z = realloc(buf, n + 1);
    assert_non_null(z);
    z[n] = 0;
    return z;
}

static void test_hist(void **state) {
    (void)state;
    npuc_summary s;
    make_summary(&s);
    const npuc_tensor_hist *h = s.records[3].hist;
    assert_non_null(h);
    assert_close(h->w_min, -1.0, 0, 0);
    assert_close(h->w_max, 31.0 / 32.0, 0, 1e-7);
    uint64_t tot = 0, etot = 0;
    for (int b = 0; b < NPUC_HIST_BINS; b++) { tot += h->w_count[b]; etot += h->e_count[b]; }
    assert_int_equal(tot, 64);
    assert_int_equal(etot, 64);
    /* The four shifted values are the largest: the last bin holds the error. */
    assert_close(h->e_rms[NPUC_HIST_BINS - 1], 0.25, 1e-6, 0);
    assert_close(h->e_rms[0], 0.0, 0, 0);
    assert_int_equal(h->e_count[NPUC_HIST_BINS - 1], 4);
    assert_int_equal(h->e_count[0], 60);
    npuc_summary_free(&s); /* frees the histogram (ASan checks) */
}

static void test_formats_and_escaping(void **state) {
    (void)state;
    npuc_summary s;
    make_summary(&s);
    npuc_report_info info = npuc_report_info_defaults();
    info.command_line = "npuc test";
    info.warn_sqnr_db = 25;
    char *html = render(&s, NPUC_REPORT_HTML, &info);
    assert_null(strstr(html, "<script>x"));
    assert_non_null(strstr(html, "&lt;script&gt;x|y`z&lt;/script&gt;"));
    assert_non_null(strstr(html, "a &lt;note&gt; &amp; | pipe"));
    assert_non_null(strstr(html, "id=\"chart-sqnr\""));
    assert_non_null(strstr(html, "id=\"chart-bytes\""));
    assert_non_null(strstr(html, "<svg class=\"hist\""));
    assert_null(strstr(html, "http"));
    free(html);
    char *md = render(&s, NPUC_REPORT_MD, &info);
    assert_non_null(strstr(md, "``<script>x\\|y`z</script>``"));
    assert_non_null(strstr(md, "a \\<note\\> & \\| pipe"));
    assert_non_null(strstr(md, "### Worst 3 tensors by SQNR"));
    free(md);
    char *js = render(&s, NPUC_REPORT_JSON, &info);
    assert_non_null(strstr(js, "\"sqnr_db\": \"nan\""));
    assert_non_null(strstr(js, "\"mse\": \"inf\""));
    assert_non_null(strstr(js, "\"warn_sqnr_db\": 25.0"));
    free(js);
    char *txt = render(&s, NPUC_REPORT_TEXT, &info);
    const char *last = strrchr(txt, '\n');
    while (last > txt && last[-1] != '\n') last--; /* start of the last line */
    assert_true(strncmp(last, "total: 4 tensors", 16) == 0);
    free(txt);
    char *csv = render(&s, NPUC_REPORT_CSV, &info);
    assert_non_null(strstr(csv, "\"<script>x|y`z</script>\",F32,\"[8,8]\",quantized,int8/ch,256,72,64,64,inf,"));
    free(csv);
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    assert_int_equal(npuc_report_write(ctx, stdout, (npuc_report_format)9, &s, &info), NPUC_ERR_ARG);
    npuc_ctx_free(ctx);
    npuc_summary_free(&s);
}

static void test_derived_warnings(void **state) {
    (void)state;
    npuc_summary s;
    make_summary(&s);
    npuc_report_info info = npuc_report_info_defaults(); /* 20 dB */
    info.warn_sqnr_db = 25;
    char *txt = render(&s, NPUC_REPORT_TEXT, &info);
    assert_non_null(strstr(txt, "warning: first weight layer 'conv.weight' is quantized to 4 bits"));
    assert_null(strstr(txt, "last weight layer")); /* the last one is at 8 bits */
    assert_non_null(strstr(txt, "warning: factored tensor 'lr.weight' saves nothing (256 bytes -> 512 bytes)"));
    /* NaN SQNR counts as the worst; conv.weight is 20 dB; lr.weight 30 dB is above 25. */
    assert_non_null(strstr(txt, "warning: 2 tensors below the SQNR warning level of 25.0 dB: '<script>x|y`z</script>' nan dB, 'conv.weight' 20.0 dB"));
    free(txt);
    info.warn_sqnr_db = NAN;
    txt = render(&s, NPUC_REPORT_TEXT, &info);
    assert_null(strstr(txt, "below the SQNR warning level"));
    free(txt);
    npuc_summary_free(&s);
}

static void test_baseline(void **state) {
    (void)state;
    npuc_summary s;
    make_summary(&s);
    s.records[3].err.mse = 0.5; /* finite, so growth can be measured */
    npuc_report_info info = npuc_report_info_defaults();
    npuc_ctx *ctx;
    assert_int_equal(npuc_ctx_new(&ctx), NPUC_OK);
    const char *base = npuc_test_path("base.json");
    assert_int_equal(npuc_report_write_file(ctx, base, NPUC_REPORT_JSON, &s, &info), NPUC_OK);
    npuc_baseline_result r;
    assert_int_equal(npuc_report_baseline_check(ctx, base, &s, 5, &r), NPUC_OK);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.matched, 4);
    npuc_baseline_result_free(&r);

    /* conv.weight's MSE grows by 10 %: a regression at 5 %, not at 20 %. */
    double mse0 = s.records[0].err.mse;
    s.records[0].err.mse = mse0 * 1.10;
    assert_int_equal(npuc_report_baseline_check(ctx, base, &s, 5, &r), NPUC_OK);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.items[0].name, "conv.weight");
    assert_int_equal(r.items[0].kind, NPUC_REGRESS_ERROR);
    assert_close(r.items[0].before, mse0, 1e-15, 0);
    assert_non_null(strstr(r.items[0].text, "(+10%)"));
    npuc_baseline_result_free(&r);
    assert_int_equal(npuc_report_baseline_check(ctx, base, &s, 20, &r), NPUC_OK);
    assert_int_equal(r.n, 0);
    npuc_baseline_result_free(&r);
    s.records[0].err.mse = mse0;

    /* The kept bias becomes lossy (any error from an exact tensor), and the
     * factored tensor grows: two regressions, plus the total size. */
    s.records[1].has_error = 1;
    npuc_error_from_sums(&s.records[1].err, 8, 1, 1e-9, 1, 1, 1e-5, 0, 0);
    s.records[2].bytes_after = 600;
    npuc_summary_finish(&s);
    assert_int_equal(npuc_report_baseline_check(ctx, base, &s, 5, &r), NPUC_OK);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.items[0].name, "conv.bias");
    assert_int_equal(r.items[0].kind, NPUC_REGRESS_ERROR);
    assert_string_equal(r.items[1].name, "lr.weight");
    assert_int_equal(r.items[1].kind, NPUC_REGRESS_SIZE);
    assert_null(r.items[2].name);
    assert_int_equal(r.items[2].kind, NPUC_REGRESS_SIZE);
    npuc_baseline_result_free(&r);

    /* Bad inputs. */
    const char *bad = npuc_test_path("bad.json");
    npuc_test_write_file(bad, "{\"schema\": \"npuc.report/2\"}", 27);
    assert_int_equal(npuc_report_baseline_check(ctx, bad, &s, 5, &r), NPUC_ERR_FORMAT);
    npuc_test_write_file(bad, "{not json", 9);
    assert_int_equal(npuc_report_baseline_check(ctx, bad, &s, 5, &r), NPUC_ERR_FORMAT);
    assert_int_equal(npuc_report_baseline_check(ctx, npuc_test_path("none.json"), &s, 5, &r), NPUC_ERR_NOT_FOUND);
    assert_int_equal(npuc_report_baseline_check(ctx, base, &s, -1, &r), NPUC_ERR_ARG);
    assert_int_equal(r.n, 0);
    npuc_ctx_free(ctx);
    npuc_summary_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist),
        cmocka_unit_test(test_formats_and_escaping),
        cmocka_unit_test(test_derived_warnings),
        cmocka_unit_test(test_baseline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
