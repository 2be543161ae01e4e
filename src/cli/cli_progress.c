/*
 * cli_progress.c - the progress line and bar (cli_progress.h).
 */
#include "cli_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Columns of the line drawn last: what plain erasing has to cover. */
static size_t g_drawn;

/* Escape sequences only on a terminal that wants them. */
static int fancy(void) {
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    return isatty(STDERR_FILENO) && !(nc && *nc) && !(term && strcmp(term, "dumb") == 0);
}

void cli_progress_erase(void) {
    if (!g_drawn) return;
    if (fancy()) fputs("\r\033[K", stderr);
    else fprintf(stderr, "\r%*s\r", (int)g_drawn, "");
    g_drawn = 0;
    fflush(stderr);
}

void cli_progress_draw(const char *line) {
    size_t w = cli_width(line);
    if (fancy()) fprintf(stderr, "\r\033[K%s", line);
    else fprintf(stderr, "\r%s%*s", line, (int)(g_drawn > w ? g_drawn - w : 0), "");
    g_drawn = w ? w : 1;
    fflush(stderr);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_bar_start(cli_bar *b, const cli_args *a, uint64_t total_bytes, size_t n) {
    b->enabled = cli_progress_enabled(a);
    b->t0 = now();
    b->total = total_bytes;
    b->n = n;
}

void cli_bar_update(cli_bar *b, size_t done, uint64_t bytes_done, const char *label) {
    if (!b->enabled) return;
    enum { W = 24 };
    double frac = b->total ? (double)bytes_done / (double)b->total : b->n ? (double)done / (double)b->n : 1;
    if (frac > 1) frac = 1;
    char bar[W + 1];
    int fill = (int)(frac * W);
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = 0;
    double dt = now() - b->t0, rate = dt > 0 ? (double)bytes_done / dt : 0;
    char sz[CLI_FMT_MAX], eta[32] = "--:--";
    if (rate > 0 && b->total >= bytes_done) {
        double left = (double)(b->total - bytes_done) / rate;
        if (left < 360000) snprintf(eta, sizeof eta, "%d:%02d", (int)left / 60, (int)left % 60);
    }
    char nm[80], line[256];
    cli_fmt_oneline(label ? label : "", 40, nm, sizeof nm, NULL);
    snprintf(line, sizeof line, "[%s] %zu/%zu  %s/s  ETA %s  %s", bar, done, b->n, cli_fmt_size((uint64_t)rate, sz),
             eta, nm);
    cli_progress_draw(line);
}

void cli_bar_clear(cli_bar *b) {
    if (b->enabled) cli_progress_erase();
}
