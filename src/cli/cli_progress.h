/*
 * cli_progress.h - progress on stderr: when it is drawn, how a line is
 * erased, and the bar with bytes/s and the time left that batch runs and
 * pass runs over large tensors show.
 *
 * Progress goes to stderr only, and only when stderr is a terminal; -q
 * silences it and --progress draws it anyway (logs, tests).  On a terminal
 * without NO_COLOR (https://no-color.org) and with TERM other than "dumb" a
 * line is erased with the ANSI erase-line sequence; otherwise with a
 * carriage return and spaces, so a log holds no escape sequences.
 *
 *     cli_bar b;
 *     cli_bar_start(&b, &a, total_bytes, nfiles);
 *     for each file done: cli_bar_update(&b, k, bytes_so_far, name);
 *     cli_bar_clear(&b);
 */
#ifndef NPUC_CLI_PROGRESS_H
#define NPUC_CLI_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "cli_common.h"

/* Tensors at least this large get the byte bar in a pass run. */
#define CLI_BAR_MIN_TENSOR (64ull << 20)

/* Erases the progress line on stderr (nothing when none is drawn). */
void cli_progress_erase(void);
/* Draws line as the progress line on stderr, replacing the last one. */
void cli_progress_draw(const char *line);

typedef struct cli_bar {
    int enabled;
    double t0;         /* start, seconds (CLOCK_MONOTONIC) */
    uint64_t total;    /* bytes of the whole run, 0 when unknown */
    size_t n;          /* items of the whole run */
} cli_bar;

void cli_bar_start(cli_bar *b, const cli_args *a, uint64_t total_bytes, size_t n);
/* "[=====>    ] 12/24  3.20 MiB/s  ETA 0:04  label": done items and bytes so far. */
void cli_bar_update(cli_bar *b, size_t done, uint64_t bytes_done, const char *label);
void cli_bar_clear(cli_bar *b);

#endif
