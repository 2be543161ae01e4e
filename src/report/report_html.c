/*
 * report_html.c - the HTML report: one self-contained file (inline CSS, inline
 * SVG, a few lines of inline JavaScript to sort the table; nothing is fetched)
 * that a reviewer opens in any browser.  Sections, top to bottom:
 *
 *   summary     cards: bytes before/after, ratio, weighted SQNR, counts
 *   warnings    every warning of the document
 *   worst       the worst-K tensors by SQNR
 *   charts      SQNR per layer (file order; red below the warning level,
 *               amber within 6 dB of it), with --calib the weight error
 *               beside the output error per layer (chart-error), and bytes
 *               before/after per layer,
 *               horizontal bars with one row per tensor, so long models
 *               grow downwards and every name stays readable
 *   histograms  for the worst K layers that carry histogram data: the
 *               distribution of the original weights (bars) and the RMS error
 *               of the values in each bin (red line), which shows whether the
 *               error sits in the bulk or in clipped tails
 *   tensors     every record, sortable by any column (click a header)
 *   run         version, command, inputs with SHA-256, parameters, threads, time
 *
 * Every string from a file (tensor names, notes) is HTML-escaped.  Element
 * ids (chart-sqnr, chart-bytes, tensors, ...) are stable: tests look for them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "report/report_internal.h"

static void esc(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f) fputc('?', f);
            else fputc(*p, f);
        }
    }
}

/* A name shortened for a chart label (the full name goes into a <title>). */
static void esc_short(FILE *f, const char *s, size_t cols) {
    char buf[512];
    npuc__fmt_name(s ? s : "", cols, buf, sizeof buf);
    esc(f, buf);
}

/* A number for data-v sort keys: exact, with non-finite values ordered. */
static void sort_key(FILE *f, double v) {
    if (isnan(v)) fputs("-1e308", f);
    else if (isinf(v)) fputs(v > 0 ? "1e308" : "-1e308", f);
    else fprintf(f, "%.17g", v);
}

static const char CSS[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px 32px;color:#1d2330;"
    "background:#fff;max-width:1500px}\n"
    "h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:30px 0 10px;border-bottom:1px solid #dde2ea;"
    "padding-bottom:4px}\n"
    ".sub{color:#5a6475;margin:0 0 14px}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;"
    "font-size:12.5px}\n"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 9px;border-bottom:1px solid #edf0f4;"
    "text-align:left;white-space:nowrap}\n"
    "th{background:#f5f7fa;position:sticky;top:0}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\n"
    "th.sort{cursor:pointer;user-select:none}th.sort:after{content:' \\2195';color:#9aa4b2}\n"
    "th.asc:after{content:' \\2191';color:#1d2330}th.desc:after{content:' \\2193';color:#1d2330}\n"
    "tr.bad td{background:#fdecec}tr.warn td{background:#fff6e5}td.note{white-space:normal;color:#5a6475}\n"
    ".cards{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid #dde2ea;border-radius:8px;"
    "padding:8px 16px;min-width:110px}\n"
    ".card .v{font-size:21px;font-weight:600}.card .l{color:#5a6475;font-size:12px}\n"
    ".card.bad{border-color:#d9534f;background:#fdecec}\n"
    ".warning{background:#fff6e5;border-left:4px solid #e69500;padding:5px 12px;margin:4px 0}\n"
    ".ok{color:#2e7d32}svg{display:block}svg text{font:11px system-ui,sans-serif;fill:#1d2330}\n"
    "svg .lbl{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:10.5px}\n"
    ".hists{display:flex;flex-wrap:wrap;gap:18px}figure{margin:0;border:1px solid #dde2ea;border-radius:8px;"
    "padding:8px}\n"
    "figcaption{font-size:12px;color:#5a6475;max-width:330px;overflow-wrap:anywhere}\n"
    ".legend{font-size:12px;color:#5a6475;margin:4px 0 8px}.legend i{display:inline-block;width:11px;"
    "height:11px;margin:0 4px 0 14px;vertical-align:-1px}\n"
    "pre{background:#f5f7fa;padding:8px 12px;border-radius:6px;overflow:auto;font-size:12px}\n";

/* Sorts table.sortable by the clicked column: numbers by data-v, text by
 * content; a second click reverses. */
static const char JS[] =
    "(function(){document.querySelectorAll('table.sortable').forEach(function(t){\n"
    "var hs=t.tHead.rows[0].cells;Array.prototype.forEach.call(hs,function(h,i){h.classList.add('sort');\n"
    "h.addEventListener('click',function(){var d=h.classList.contains('asc')?'desc':'asc';\n"
    "Array.prototype.forEach.call(hs,function(o){o.classList.remove('asc','desc');});h.classList.add(d);\n"
    "var num=h.getAttribute('data-type')==='num',b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows);\n"
    "rows.sort(function(x,y){var a=x.cells[i],c=y.cells[i],r;\n"
    "if(num){var p=a.getAttribute('data-v'),q=c.getAttribute('data-v');\n"
    "p=p===null||p===''?NaN:parseFloat(p);q=q===null||q===''?NaN:parseFloat(q);\n"
    "if(isNaN(p)&&isNaN(q))r=0;else if(isNaN(p))return 1;else if(isNaN(q))return -1;else r=p-q;}\n"
    "else r=a.textContent.localeCompare(c.textContent);\n"
    "return d==='asc'?r:-r;});rows.forEach(function(r){b.appendChild(r);});});});});})();\n";

static const char *bar_color(double db, double warn) {
    if (isnan(warn)) return "#3b7dd8";
    if (db < warn) return "#d9534f";
    if (db < warn + 6) return "#f0ad4e";
    return "#4caf50";
}

static int bad_level(const npuc_tensor_record *r, double warn) {
    if (!r->has_error || isnan(warn)) return 0;
    double v = npuc__record_sqnr(r);
    return v < warn ? 2 : v < warn + 6 ? 1 : 0;
}

/* "nice" axis maximum: 1, 2 or 5 times a power of ten at or above v. */
static double nice_max(double v) {
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v)));
    for (int i = 0; i < 3; i++) {
        double m = (i == 0 ? 1 : i == 1 ? 2 : 5) * p;
        if (m >= v) return m;
    }
    return 10 * p;
}

enum { LABEL_W = 250, PLOT_W = 560, ROW_H = 15, TOP = 40, VALUE_W = 170 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The SQNR axis end: the largest finite SQNR that is not an outlier by
 * Tukey's fence (above Q3 + 1.5 IQR, quartiles by nearest rank), so one
 * near-lossless tensor (a quantized bias at 155 dB) does not squash every
 * other bar; the bars beyond it are drawn clipped.  0 when there is none. */
static double sqnr_axis_max(const npuc_summary *s) {
    size_t n = 0, k = 0;
    for (size_t i = 0; i < s->nrecords; i++) n += s->records[i].has_error && isfinite(s->records[i].err.sqnr_db);
    if (!n) return 0;
    double *v = malloc(n * sizeof *v); /* n <= nrecords: no overflow */
    if (!v) { /* no room to sort: the plain maximum */
        double mx = 0;
        for (size_t i = 0; i < s->nrecords; i++)
            if (s->records[i].has_error && isfinite(s->records[i].err.sqnr_db) && s->records[i].err.sqnr_db > mx)
                mx = s->records[i].err.sqnr_db;
        return mx;
    }
    for (size_t i = 0; i < s->nrecords; i++)
        if (s->records[i].has_error && isfinite(s->records[i].err.sqnr_db)) v[k++] = s->records[i].err.sqnr_db;
    qsort(v, n, sizeof *v, cmp_double);
    double q1 = v[(n - 1) / 4], q3 = v[(3 * (n - 1)) / 4], fence = q3 + 1.5 * (q3 - q1), mx = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] <= fence && v[i] > mx) mx = v[i];
    free(v);
    return mx;
}

/* quantize under a budget (summary budget_json, docs/budget.md): the
 * predicted distortion against the quantized tensors' bytes, the optimum's
 * curve as a line, every uniform scheme as a grey dot with its name, the
 * chosen point red; log y.  Each point carries its figures as data-bytes and
 * data-distortion. */
static void chart_budget(FILE *f, const char *js) {
    json_t *d = json_loads(js, 0, NULL), *curve = json_object_get(d, "curve"), *uni = json_object_get(d, "uniform"),
           *ch = json_object_get(d, "chosen");
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    json_t *all[2] = {curve, uni};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < json_array_size(all[k]); i++) {
            json_t *e = json_array_get(all[k], i);
            const double x = json_number_value(json_object_get(e, "bytes")),
                         y = json_number_value(json_object_get(e, "distortion"));
            if (x < x0) x0 = x;
            if (x > x1) x1 = x;
            if (y > 0 && y < y0) y0 = y;
            if (y > y1) y1 = y;
        }
    if (!json_is_object(ch) || !(x1 > x0) || !(y1 > y0) || !(y0 > 0)) {
        fputs("<p>No size/loss curve in this summary.</p>\n", f);
        json_decref(d);
        return;
    }
    const int W = 640, H = 300, L = 70, R = 110, T = 12, B = 36;
    const double ly0 = log10(y0) - 0.05, ly1 = log10(y1) + 0.05;
#define BX(x) (L + (double)(W - L - R) * ((x) - x0) / (x1 - x0))
#define BY(y) (T + (double)(H - T - B) * (ly1 - log10((y) > y0 ? (y) : y0)) / (ly1 - ly0))
    fputs("<div class=\"legend\"><i style=\"background:#4a78c2\"></i>least predicted loss at each size"
          "<i style=\"background:#999\"></i>uniform schemes<i style=\"background:#d9534f\"></i>chosen</div>\n", f);
    fprintf(f, "<svg id=\"chart-budget\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"predicted loss against bytes\">\n", W, H, W, H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", L, T, L, H - B);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%.0f</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>"
               "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">bytes of the quantized tensors</text>\n",
            L, H - B + 14, x0, W - R, H - B + 14, x1, (L + W - R) / 2, H - 6);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.3g</text><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">"
               "%.3g</text><text x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">predicted "
               "loss (log)</text>\n", L - 4, T + 10, y1, L - 4, BY(y0), y0, (T + H - B) / 2, (T + H - B) / 2);
    fputs("<polyline id=\"budget-curve\" fill=\"none\" stroke=\"#4a78c2\" stroke-width=\"1.5\" points=\"", f);
    for (size_t i = 0; i < json_array_size(curve); i++) {
        json_t *e = json_array_get(curve, i);
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", BX(json_number_value(json_object_get(e, "bytes"))),
                BY(json_number_value(json_object_get(e, "distortion"))));
    }
    fputs("\"/>\n", f);
    for (size_t i = 0; i < json_array_size(uni); i++) {
        json_t *e = json_array_get(uni, i);
        const double x = json_number_value(json_object_get(e, "bytes")),
                     y = json_number_value(json_object_get(e, "distortion"));
        fprintf(f, "<g class=\"uniform\"><title>");
        esc(f, json_string_value(json_object_get(e, "scheme")));
        fprintf(f, ": %.0f bytes, %.4g</title><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#999\" "
                   "data-bytes=\"%.0f\" data-distortion=\"%.17g\"/></g>\n", x, y, BX(x), BY(y), x, y);
    }
    const double cx = json_number_value(json_object_get(ch, "bytes")),
                 cy = json_number_value(json_object_get(ch, "distortion"));
    fprintf(f, "<g id=\"budget-chosen\"><title>chosen: %.0f bytes, %.4g</title><circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" "
               "fill=\"#d9534f\" data-bytes=\"%.0f\" data-distortion=\"%.17g\"/></g>\n</svg>\n",
            cx, cy, BX(cx), BY(cy), cx, cy);
#undef BX
#undef BY
    json_decref(d);
}

/* Opens a bar chart's <svg> (id, aria label) of W x H with a linear axis
 * from 0 to mx in five steps and its title. */
static void svg_axis(FILE *f, const char *id, const char *aria, const char *title, double mx, int W, int H) {
    fprintf(f, "<svg id=\"%s\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"%s\">\n", id, W, H, W, H, aria);
    for (int t = 0; t <= 5; t++) {
        double v = mx * t / 5, x = LABEL_W + PLOT_W * v / mx;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e3e7ee\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                x, TOP - 4, x, H - 6, x, TOP - 8, v);
    }
    fprintf(f, "<text x=\"%d\" y=\"13\" style=\"font-weight:600\">%s</text>\n", LABEL_W, title);
}

static void chart_sqnr(FILE *f, const npuc_summary *s, const npuc_report_info *info) {
    size_t rows = 0, nclipped = 0;
    const double warn = info->warn_sqnr_db;
    for (size_t i = 0; i < s->nrecords; i++) rows += s->records[i].has_error;
    if (!rows) {
        fputs("<p>No tensor has an error figure.</p>\n", f);
        return;
    }
    double mx = sqnr_axis_max(s);
    if (!isnan(warn) && warn > mx) mx = warn;
    mx = 10 * ceil(mx / 10);
    if (mx <= 0) mx = 10;
    const int W = LABEL_W + PLOT_W + VALUE_W, H = TOP + (int)rows * ROW_H + 8;
    fprintf(f,
            "<div class=\"legend\"><i style=\"background:#d9534f\"></i>below %g dB"
            "<i style=\"background:#f0ad4e\"></i>within 6 dB of it<i style=\"background:#4caf50\"></i>above</div>\n",
            isnan(warn) ? 0.0 : warn);
    svg_axis(f, "chart-sqnr", "SQNR per layer in dB", "SQNR (dB), higher is better", mx, W, H);
    size_t row = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (!r->has_error) continue;
        double v = r->err.sqnr_db, y = TOP + (double)row * ROW_H;
        double len = isnan(v) ? 0 : v >= mx ? PLOT_W : v <= 0 ? 0 : PLOT_W * v / mx;
        int clip = isfinite(v) && v > mx;
        nclipped += clip;
        char db[32];
        npuc__fmt_db(v, db, sizeof db);
        fprintf(f, "<g class=\"row\"><title>");
        esc(f, r->name);
        fprintf(f, ": %s dB</title><text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", db, LABEL_W - 6,
                y + 11);
        esc_short(f, r->name, 38);
        fprintf(f, "</text><rect%s x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>",
                clip ? " class=\"clipped\"" : "", LABEL_W, y + 2, len, ROW_H - 4,
                bar_color(isnan(v) ? -INFINITY : v, warn));
        /* A clipped bar ends in a white break mark; its label keeps the value. */
        if (clip)
            fprintf(f, "<path d=\"M%.1f %.1f l6 -%d M%.1f %.1f l6 -%d\" stroke=\"#fff\" stroke-width=\"2\"/>",
                    LABEL_W + len - 14, y + ROW_H - 2, ROW_H - 4, LABEL_W + len - 9, y + ROW_H - 2, ROW_H - 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s%s</text></g>\n", LABEL_W + len + 4, y + 11, clip ? "&gt; axis: " : "",
                db);
        row++;
    }
    if (!isnan(warn) && warn > 0 && warn <= mx) {
        double x = LABEL_W + PLOT_W * warn / mx;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d9534f\" stroke-dasharray=\"4 3\"/>\n",
                x, TOP - 4, x, H - 6);
    }
    fputs("</svg>\n", f);
    if (nclipped)
        fprintf(f, "<p class=\"sub\" id=\"sqnr-clipped\">The axis ends at %g dB: %zu bar%s beyond it (outliers above "
                   "Q3 + 1.5 IQR) %s drawn clipped, with %s value.</p>\n",
                mx, nclipped, nclipped == 1 ? "" : "s", nclipped == 1 ? "is" : "are", nclipped == 1 ? "its" : "their");
}

static void chart_bytes(FILE *f, const npuc_summary *s) {
    size_t rows = 0, kept = 0;
    uint64_t mx = 0, kept_bytes = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (r->action == NPUC_ACTION_KEPT) { kept++; kept_bytes += r->bytes_before; continue; }
        rows++;
        if (r->bytes_before > mx) mx = r->bytes_before;
        if (r->bytes_after > mx) mx = r->bytes_after;
    }
    if (!rows) {
        fputs("<p>Every tensor was kept unchanged.</p>\n", f);
        return;
    }
    /* A round axis end in binary units: 1, 2 or 5 KiB/MiB/GiB times a power of ten. */
    double unit = 1;
    while ((double)mx / unit >= 1024 && unit < 1099511627776.0) unit *= 1024;
    double top = nice_max((double)mx / unit) * unit, lead = top / unit / pow(10, floor(log10(top / unit)));
    const int divs = lead > 1.5 && lead < 2.5 ? 4 : 5;
    const int W = LABEL_W + PLOT_W + VALUE_W, H = TOP + (int)rows * ROW_H + 8;
    fputs("<div class=\"legend\"><i style=\"background:#b8c2cc\"></i>before<i style=\"background:#3b7dd8\"></i>"
          "after</div>\n", f);
    fprintf(f, "<svg id=\"chart-bytes\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"bytes per layer before and after\">\n", W, H, W, H);
    for (int t = 0; t <= divs; t++) {
        double v = top * t / divs, x = LABEL_W + PLOT_W * v / top;
        char b[32];
        npuc__fmt_size((uint64_t)v, b, sizeof b);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e3e7ee\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                x, TOP - 4, x, H - 6, x, TOP - 8, b);
    }
    fprintf(f, "<text x=\"%d\" y=\"13\" style=\"font-weight:600\">bytes in the file</text>\n", LABEL_W);
    size_t row = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (r->action == NPUC_ACTION_KEPT) continue;
        double y = TOP + (double)row * ROW_H;
        double l1 = PLOT_W * (double)r->bytes_before / top, l2 = PLOT_W * (double)r->bytes_after / top;
        char b1[32], b2[32];
        npuc__fmt_size(r->bytes_before, b1, sizeof b1);
        npuc__fmt_size(r->bytes_after, b2, sizeof b2);
        fputs("<g class=\"row\"><title>", f);
        esc(f, r->name);
        fprintf(f, ": %s \xe2\x86\x92 %s (%s)</title><text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", b1,
                b2, npuc_action_name(r->action), LABEL_W - 6, y + 11);
        esc_short(f, r->name, 38);
        fprintf(f, "</text><rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"6\" fill=\"#b8c2cc\"/>"
                   "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"6\" fill=\"#3b7dd8\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">%s \xe2\x86\x92 %s</text></g>\n",
                LABEL_W, y + 1, l1, LABEL_W, y + 7, l2, LABEL_W + (l1 > l2 ? l1 : l2) + 4, y + 11, b1, b2);
        row++;
    }
    fputs("</svg>\n", f);
    if (kept) {
        char b[32];
        npuc__fmt_size(kept_bytes, b, sizeof b);
        fprintf(f, "<p class=\"sub\">%zu tensor%s kept unchanged (%s) not shown.</p>\n", kept, kept == 1 ? "" : "s", b);
    }
}

/* Weight error and output error per layer (records with an output error,
 * --calib): two bars per row on one linear axis of relative error, the
 * weight's ||W - W'|| / ||W|| (grey) and the output's ||(W - W')X|| / ||WX||
 * (blue), so a layer whose output suffers more than its weights shows at a
 * glance.  Nothing is drawn without output errors. */
static void chart_error(FILE *f, const npuc_summary *s) {
    size_t rows = 0;
    double mx = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (!r->has_out_error) continue;
        rows++;
        if (isfinite(r->out_rel_error) && r->out_rel_error > mx) mx = r->out_rel_error;
        if (r->has_error && isfinite(r->err.rel_fro) && r->err.rel_fro > mx) mx = r->err.rel_fro;
    }
    const double top = nice_max(mx);
    const int W = LABEL_W + PLOT_W + VALUE_W, H = TOP + (int)rows * ROW_H + 8;
    fputs("<div class=\"legend\"><i style=\"background:#b8c2cc\"></i>weight error ||W-W'||/||W||"
          "<i style=\"background:#3b7dd8\"></i>output error ||(W-W')X||/||WX||</div>\n", f);
    svg_axis(f, "chart-error", "weight and output error per layer", "relative error, lower is better", top, W, H);
    size_t row = 0;
    for (size_t i = 0; i < s->nrecords; i++) {
        const npuc_tensor_record *r = &s->records[i];
        if (!r->has_out_error) continue;
        const double we = r->has_error ? r->err.rel_fro : NAN, oe = r->out_rel_error, y = TOP + (double)row * ROW_H;
        const double l1 = isfinite(we) ? PLOT_W * fmin(we / top, 1) : 0, l2 = isfinite(oe) ? PLOT_W * fmin(oe / top, 1) : 0;
        char b1[32], b2[32];
        if (r->has_error) npuc__fmt_g(we, b1, sizeof b1);
        else snprintf(b1, sizeof b1, "-");
        npuc__fmt_g(oe, b2, sizeof b2);
        fputs("<g class=\"row\"><title>", f);
        esc(f, r->name);
        fprintf(f, ": weight %s, output %s</title><text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", b1, b2,
                LABEL_W - 6, y + 11);
        esc_short(f, r->name, 38);
        fprintf(f, "</text><rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"6\" fill=\"#b8c2cc\"/>"
                   "<rect class=\"out\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"6\" fill=\"#3b7dd8\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">%s / %s</text></g>\n",
                LABEL_W, y + 1, l1, LABEL_W, y + 7, l2, LABEL_W + (l1 > l2 ? l1 : l2) + 4, y + 11, b1, b2);
        row++;
    }
    fputs("</svg>\n", f);
}

/* One weight-vs-error histogram: bars for the original values per bin, a red
 * line for the RMS error of the values in each bin. */
static void hist_svg(FILE *f, const npuc_tensor_record *r, size_t rank) {
    const npuc_tensor_hist *h = r->hist;
    enum { HW = 340, HH = 175, PL = 50, PR = 48, PT = 12, PB = 30 };
    const double pw = HW - PL - PR, ph = HH - PT - PB, bw = pw / NPUC_HIST_BINS;
    uint64_t cmax = 1;
    double emax = 0;
    for (int b = 0; b < NPUC_HIST_BINS; b++) {
        if (h->w_count[b] > cmax) cmax = h->w_count[b];
        if (h->e_rms[b] > emax) emax = h->e_rms[b];
    }
    double etop = nice_max(emax);
    char db[32], mx[32], lo[32], hi[32], et[32];
    npuc__fmt_db(r->err.sqnr_db, db, sizeof db);
    npuc__fmt_g(r->err.max_abs, mx, sizeof mx);
    npuc__fmt_g(h->w_min, lo, sizeof lo);
    npuc__fmt_g(h->w_max, hi, sizeof hi);
    npuc__fmt_g(etop, et, sizeof et);
    fprintf(f, "<figure><svg class=\"hist\" id=\"hist-%zu\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"weights and error\">\n", rank, HW, HH, HW, HH);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafbfc\" stroke=\"#dde2ea\"/>\n", PL, PT,
            pw, ph);
    /* Counts on a log scale, so the tails (where clipping happens) stay visible. */
    for (int b = 0; b < NPUC_HIST_BINS; b++) {
        double bh = ph * log1p((double)h->w_count[b]) / log1p((double)cmax);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#8fb3e8\"><title>%llu values"
                   "</title></rect>\n",
                PL + b * bw + 0.5, PT + ph - bh, bw - 1, bh, (unsigned long long)h->w_count[b]);
    }
    if (h->w_min < 0 && h->w_max > 0) {
        double x0 = PL + pw * (0 - h->w_min) / (h->w_max - h->w_min);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#5a6475\" stroke-dasharray=\"2 2\"/>\n",
                x0, PT, x0, PT + ph);
        if (x0 > PL + 40 && x0 < PL + pw - 40) /* clear of the range labels */
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">0</text>\n", x0, HH - PB + 14);
    }
    fputs("<polyline fill=\"none\" stroke=\"#d9534f\" stroke-width=\"1.8\" points=\"", f);
    for (int b = 0; b < NPUC_HIST_BINS; b++)
        if (h->w_count[b])
            fprintf(f, "%.1f,%.1f ", PL + (b + 0.5) * bw, PT + ph - ph * (etop > 0 ? h->e_rms[b] / etop : 0));
    fputs("\"/>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text><text x=\"%.1f\" y=\"%d\" text-anchor=\"end\">%s</text>\n", PL,
            HH - PB + 14, lo, PL + pw, HH - PB + 14, hi);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">weight value</text>\n", PL + pw / 2, HH - 4);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%llu</text><text x=\"%d\" y=\"%d\" "
               "text-anchor=\"end\">log</text>\n", PL - 3, PT + 9, (unsigned long long)cmax, PL - 3, PT + 22);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"#d9534f\" style=\"fill:#d9534f\">%s</text>\n", PL + pw + 3, PT + 9, et);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" style=\"fill:#d9534f\">rms err</text>\n", PL + pw + 3, PT + 22.0);
    fputs("</svg><figcaption><b>", f);
    esc(f, r->name);
    fprintf(f, "</b><br>SQNR %s dB, max |error| %s, %llu clipped</figcaption></figure>\n", db, mx,
            (unsigned long long)r->err.clipped);
}

static void card(FILE *f, const char *value, const char *label, int bad) {
    fprintf(f, "<div class=\"card%s\"><div class=\"v\">", bad ? " bad" : "");
    esc(f, value);
    fputs("</div><div class=\"l\">", f);
    esc(f, label);
    fputs("</div></div>\n", f);
}

static void num_cell(FILE *f, double v, const char *text) {
    fputs("<td class=\"n\" data-v=\"", f);
    sort_key(f, v);
    fputs("\">", f);
    esc(f, text);
    fputs("</td>", f);
}

static void tensor_table(FILE *f, const npuc_summary *s, const npuc_report_info *info, const npuc__report_doc *d) {
    fputs("<table id=\"tensors\" class=\"sortable\"><thead><tr>"
          "<th class=\"n\" data-type=\"num\">#</th><th>tensor</th><th>shape</th><th>dtype</th><th>action</th>"
          "<th>scheme</th><th class=\"n\" data-type=\"num\">bytes before</th><th class=\"n\" data-type=\"num\">bytes "
          "after</th><th class=\"n\" data-type=\"num\">ratio</th><th class=\"n\" data-type=\"num\">SQNR dB</th>"
          "<th class=\"n\" data-type=\"num\">MSE</th><th class=\"n\" data-type=\"num\">max |err|</th>"
          "<th class=\"n\" data-type=\"num\">cosine</th>", f);
    if (s->n_out_error) fputs("<th class=\"n\" data-type=\"num\">output error</th>", f);
    fputs("<th>compared</th><th>note</th></tr></thead>\n<tbody>\n", f);
    for (size_t k = 0; k < s->nrecords; k++) {
        size_t i = d->order[k];
        const npuc_tensor_record *r = &s->records[i];
        char shape[160], dt[16], b[32], t[32];
        int lvl = bad_level(r, info->warn_sqnr_db);
        fprintf(f, "<tr%s>", lvl == 2 ? " class=\"bad\"" : lvl == 1 ? " class=\"warn\"" : "");
        snprintf(t, sizeof t, "%zu", i + 1);
        num_cell(f, (double)(i + 1), t);
        fputs("<td class=\"mono\">", f);
        esc(f, r->name);
        npuc__fmt_shape(r, shape, sizeof shape);
        fprintf(f, "</td><td class=\"mono\">%s</td><td>%s</td><td>%s</td><td>", shape, npuc__dtype_lower(r->dtype, dt),
                npuc_action_name(r->action));
        esc(f, r->scheme);
        fputs("</td>", f);
        npuc__fmt_size(r->bytes_before, b, sizeof b);
        num_cell(f, (double)r->bytes_before, b);
        npuc__fmt_size(r->bytes_after, b, sizeof b);
        num_cell(f, (double)r->bytes_after, b);
        double ratio = npuc__ratio(r->bytes_before, r->bytes_after);
        if (isnan(ratio)) snprintf(t, sizeof t, "-");
        else snprintf(t, sizeof t, "%.2fx", ratio);
        num_cell(f, ratio, t);
        if (r->has_error) {
            npuc__fmt_db(r->err.sqnr_db, t, sizeof t);
            num_cell(f, r->err.sqnr_db, t);
            npuc__fmt_g(r->err.mse, t, sizeof t);
            num_cell(f, r->err.mse, t);
            npuc__fmt_g(r->err.max_abs, t, sizeof t);
            num_cell(f, r->err.max_abs, t);
            snprintf(t, sizeof t, "%.6f", r->err.cosine);
            num_cell(f, r->err.cosine, t);
        } else {
            fputs("<td class=\"n\" data-v=\"\"></td><td class=\"n\" data-v=\"\"></td><td class=\"n\" data-v=\"\"></td>"
                  "<td class=\"n\" data-v=\"\"></td>", f);
        }
        if (s->n_out_error) {
            if (r->has_out_error) {
                npuc__fmt_g(r->out_rel_error, t, sizeof t);
                num_cell(f, r->out_rel_error, t);
            } else {
                fputs("<td class=\"n\" data-v=\"\">-</td>", f);
            }
        }
        fputs("<td>", f);
        esc(f, r->compared[0] ? r->compared : "-");
        fputs("</td><td class=\"note\">", f);
        esc(f, r->note);
        fputs("</td></tr>\n", f);
    }
    fputs("</tbody></table>\n", f);
}

static void run_section(FILE *f, const npuc_report_info *info, const npuc__report_doc *d) {
    fputs("<table id=\"run\">\n", f);
    fprintf(f, "<tr><th>npuc</th><td>%s, commit %s</td></tr>\n", npuc_version(), d->commit ? d->commit : "unknown");
    if (info->command_line) {
        fputs("<tr><th>command</th><td class=\"mono\">", f);
        esc(f, info->command_line);
        fputs("</td></tr>\n", f);
    }
    for (size_t i = 0; i < d->ninputs; i++) {
        fputs("<tr><th>input</th><td class=\"mono\">", f);
        esc(f, d->inputs[i].path);
        if (d->inputs[i].ok)
            fprintf(f, "<br>%llu bytes, sha256 %s", (unsigned long long)d->inputs[i].size, d->inputs[i].sha256);
        else
            fputs("<br>unreadable", f);
        fputs("</td></tr>\n", f);
    }
    if (info->output) {
        fputs("<tr><th>output</th><td class=\"mono\">", f);
        esc(f, info->output);
        fputs("</td></tr>\n", f);
    }
    if (info->threads) fprintf(f, "<tr><th>threads</th><td>%d</td></tr>\n", info->threads);
    if (d->timestamp[0]) fprintf(f, "<tr><th>time (UTC)</th><td>%s</td></tr>\n", d->timestamp);
    fputs("</table>\n", f);
    if (info->params_json) {
        fputs("<h3>Parameters</h3>\n<pre id=\"params\">", f);
        esc(f, info->params_json);
        fputs("</pre>\n", f);
    }
}

npuc_status npuc__report_html(npuc_ctx *ctx, FILE *f, const npuc_summary *s, const npuc_report_info *info,
                              const npuc__report_doc *d) {
    (void)ctx;
    char v[96], w[32];
    const double warn = info->warn_sqnr_db;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
               "<meta name=\"generator\" content=\"npuc %s\">\n<title>npuc report: %s</title>\n<style>\n%s</style>\n"
               "</head>\n<body>\n",
            npuc_version(), s->pass, CSS);
    fprintf(f, "<h1>npuc report: %s</h1>\n<p class=\"sub\">", s->pass);
    if (d->ninputs >= 2) {
        esc(f, d->inputs[1].path);
        fputs(" against ", f);
        esc(f, d->inputs[0].path);
    } else if (d->ninputs == 1) {
        esc(f, d->inputs[0].path);
        if (info->output) {
            fputs(" \xe2\x86\x92 ", f);
            esc(f, info->output);
        }
    }
    fprintf(f, " &middot; npuc %s, commit %s", npuc_version(), d->commit ? d->commit : "unknown");
    if (d->timestamp[0]) fprintf(f, " &middot; %s", d->timestamp);
    fputs("</p>\n", f);

    /* Summary cards. */
    fputs("<h2 id=\"summary\">Summary</h2>\n<div class=\"cards\">\n", f);
    npuc__fmt_size(s->bytes_before, v, sizeof v);
    card(f, v, "bytes before", 0);
    npuc__fmt_size(s->bytes_after, v, sizeof v);
    card(f, v, "bytes after", 0);
    double ratio = npuc__ratio(s->bytes_before, s->bytes_after);
    if (isnan(ratio)) snprintf(v, sizeof v, "-");
    else snprintf(v, sizeof v, "%.2fx", ratio);
    card(f, v, "compression", 0);
    npuc__fmt_db(s->weighted_sqnr_db, w, sizeof w);
    if (isnan(s->weighted_sqnr_db)) snprintf(v, sizeof v, "-");
    else snprintf(v, sizeof v, "%s dB", w);
    card(f, v, "weighted SQNR", !isnan(warn) && s->weighted_sqnr_db < warn);
    if (s->n_out_error) {
        npuc__fmt_g(s->out_rel_error, v, sizeof v);
        card(f, v, "output error (pooled)", 0);
        npuc__fmt_g(s->max_out_rel_error, v, sizeof v);
        card(f, v, "worst layer output error", 0);
    }
    snprintf(v, sizeof v, "%zu", s->nrecords);
    card(f, v, "tensors", 0);
    for (int a = 0; a < NPUC_ACTION_COUNT; a++)
        if (s->count[a]) {
            snprintf(v, sizeof v, "%zu", s->count[a]);
            card(f, v, npuc_action_name((npuc_action)a), 0);
        }
    if (!isnan(warn)) {
        size_t below = 0;
        while (below < d->nworst && npuc__record_sqnr(&s->records[d->worst[below]]) < warn) below++;
        snprintf(v, sizeof v, "%zu", below);
        npuc__fmt_db(warn, w, sizeof w);
        char l[96];
        snprintf(l, sizeof l, "below %s dB SQNR", w);
        card(f, v, l, below > 0);
    }
    fputs("</div>\n", f);

    fprintf(f, "<h2 id=\"warnings\">Warnings (%zu)</h2>\n", d->nwarnings);
    if (!d->nwarnings) fputs("<p class=\"ok\">None.</p>\n", f);
    for (size_t i = 0; i < d->nwarnings; i++) {
        fputs("<div class=\"warning\">", f);
        esc(f, d->warnings[i]);
        fputs("</div>\n", f);
    }

    size_t k = info->worst_k > 0 ? (size_t)info->worst_k : 0;
    if (k > d->nworst) k = d->nworst;
    fprintf(f, "<h2 id=\"worst\">Worst %zu tensor%s by SQNR</h2>\n", k, k == 1 ? "" : "s");
    if (k) {
        fputs("<table id=\"worst-table\"><thead><tr><th class=\"n\">rank</th><th>tensor</th><th>shape</th>"
              "<th>scheme</th><th>compared</th><th class=\"n\">SQNR dB</th><th class=\"n\">rel. error</th>"
              "<th class=\"n\">max |err|</th>"
              "<th class=\"n\">bytes</th></tr></thead><tbody>\n", f);
        for (size_t i = 0; i < k; i++) {
            const npuc_tensor_record *r = &s->records[d->worst[i]];
            char shape[160], db[32], rel[32], mx[32], b1[32], b2[32];
            npuc__fmt_shape(r, shape, sizeof shape);
            npuc__fmt_db(r->err.sqnr_db, db, sizeof db);
            npuc__fmt_g(r->err.rel_fro, rel, sizeof rel);
            npuc__fmt_g(r->err.max_abs, mx, sizeof mx);
            npuc__fmt_size(r->bytes_before, b1, sizeof b1);
            npuc__fmt_size(r->bytes_after, b2, sizeof b2);
            int lvl = bad_level(r, warn);
            fprintf(f, "<tr%s><td class=\"n\">%zu</td><td class=\"mono\">", lvl == 2 ? " class=\"bad\"" :
                       lvl == 1 ? " class=\"warn\"" : "", i + 1);
            esc(f, r->name);
            fprintf(f, "</td><td class=\"mono\">%s</td><td>", shape);
            esc(f, r->scheme);
            fputs("</td><td>", f);
            esc(f, r->compared[0] ? r->compared : "-");
            fprintf(f, "</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td>"
                       "<td class=\"n\">%s \xe2\x86\x92 %s</td></tr>\n", db, rel, mx, b1, b2);
        }
        fputs("</tbody></table>\n", f);
    } else {
        fputs("<p>No tensor has an error figure.</p>\n", f);
    }

    fputs("<h2 id=\"sqnr\">SQNR per layer</h2>\n", f);
    chart_sqnr(f, s, info);
    if (s->n_out_error) {
        fputs("<h2 id=\"output-error\">Weight and output error per layer</h2>\n", f);
        chart_error(f, s);
    }
    fputs("<h2 id=\"bytes\">Bytes per layer, before and after</h2>\n", f);
    chart_bytes(f, s);
    if (s->budget_json) {
        fputs("<h2 id=\"budget\">Size against predicted loss (budget)</h2>\n", f);
        chart_budget(f, s->budget_json);
    }

    fprintf(f, "<h2 id=\"histograms\">Weights and error, worst %zu layer%s</h2>\n", k, k == 1 ? "" : "s");
    size_t nh = 0;
    for (size_t i = 0; i < k; i++)
        if (s->records[d->worst[i]].hist) nh++;
    if (nh) {
        fputs("<div class=\"legend\"><i style=\"background:#8fb3e8\"></i>original values per bin (count, log scale)"
              "<i style=\"background:#d9534f\"></i>RMS error of the values in the bin</div>\n<div class=\"hists\">\n", f);
        for (size_t i = 0; i < k; i++)
            if (s->records[d->worst[i]].hist) hist_svg(f, &s->records[d->worst[i]], i + 1);
        fputs("</div>\n", f);
    } else {
        fputs("<p class=\"sub\">No histogram data in this summary: <code>npuc report ORIGINAL COMPRESSED</code> "
              "measures it.</p>\n", f);
    }

    fprintf(f, "<h2 id=\"all\">All %zu tensors</h2>\n<p class=\"sub\">Click a column header to sort.</p>\n",
            s->nrecords);
    tensor_table(f, s, info, d);
    fputs("<h2 id=\"totals\">Totals</h2>\n<p class=\"mono\">", f);
    char line[1024];
    npuc_report_totals_line(s, line, sizeof line);
    esc(f, line);
    fputs("</p>\n<h2 id=\"run-info\">Run</h2>\n", f);
    run_section(f, info, d);
    fprintf(f, "<script>\n%s</script>\n</body>\n</html>\n", JS);
    return NPUC_OK;
}
