/*
 * status.c - status names and the context that owns error messages.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npuc_internal.h"

#ifndef NPUC_VERSION_STRING
#define NPUC_VERSION_STRING "0.1.0"
#endif

const char *npuc_version(void) { return NPUC_VERSION_STRING; }

const char *npuc_status_str(npuc_status st) {
    switch (st) {
    case NPUC_OK: return "ok";
    case NPUC_ERR_IO: return "I/O error";
    case NPUC_ERR_FORMAT: return "malformed file";
    case NPUC_ERR_UNSUPPORTED: return "unsupported";
    case NPUC_ERR_ARG: return "invalid argument";
    case NPUC_ERR_NOMEM: return "out of memory";
    case NPUC_ERR_OVERFLOW: return "size overflow";
    case NPUC_ERR_NOT_FOUND: return "not found";
    case NPUC_ERR_VALUE: return "invalid values";
    case NPUC_ERR_EXISTS: return "already exists";
    case NPUC_ERR_NUMERIC: return "numerical failure";
    case NPUC_ERR_INTERNAL: return "internal error";
    case NPUC_ERR_GUESS: return "refused guess";
    case NPUC_ERR_GATE: return "quality gate failed";
    }
    return "unknown status";
}

int npuc_status_is_input_error(npuc_status st) {
    switch (st) {
    case NPUC_ERR_FORMAT:
    case NPUC_ERR_UNSUPPORTED:
    case NPUC_ERR_ARG:
    case NPUC_ERR_OVERFLOW:
    case NPUC_ERR_NOT_FOUND:
    case NPUC_ERR_VALUE:
    case NPUC_ERR_EXISTS:
    case NPUC_ERR_GUESS:
        return 1;
    default:
        return 0;
    }
}

npuc_policy npuc_policy_defaults(void) {
    npuc_policy p = {0, 0, NAN, NAN, NAN};
    return p;
}

npuc_status npuc_ctx_new(npuc_ctx **out) {
    npuc_ctx *c = calloc(1, sizeof *c);
    *out = c;
    if (!c) return NPUC_ERR_NOMEM;
    c->policy = npuc_policy_defaults();
    return NPUC_OK;
}

void npuc_ctx_set_max_memory(npuc_ctx *ctx, uint64_t bytes) { ctx->max_memory = bytes; }
uint64_t npuc_ctx_max_memory(const npuc_ctx *ctx) {
    return ctx && ctx->max_memory ? ctx->max_memory : NPUC_DECODE_BUDGET_DEFAULT;
}

void npuc_ctx_set_policy(npuc_ctx *ctx, const npuc_policy *p) { ctx->policy = *p; }
const npuc_policy *npuc_ctx_policy(const npuc_ctx *ctx) { return ctx ? &ctx->policy : NULL; }

void npuc_ctx_free(npuc_ctx *ctx) { free(ctx); }

const char *npuc_ctx_errmsg(const npuc_ctx *ctx) { return ctx ? ctx->msg : ""; }
npuc_status npuc_ctx_errcode(const npuc_ctx *ctx) { return ctx ? ctx->code : NPUC_OK; }

void npuc_ctx_clear(npuc_ctx *ctx) {
    if (!ctx) return;
    ctx->code = NPUC_OK;
    ctx->msg[0] = 0;
}

void npuc_ctx_set_threads(npuc_ctx *ctx, int n) { ctx->nthreads = n < 0 ? 0 : n; }
void npuc_ctx_set_progress(npuc_ctx *ctx, npuc_progress_fn fn, void *user) {
    ctx->progress = fn;
    ctx->progress_user = user;
}
int npuc_ctx_threads(const npuc_ctx *ctx) { return ctx->nthreads; }

size_t npuc_ctx_warning_count(const npuc_ctx *ctx) { return ctx ? ctx->nwarn : 0; }
const char *npuc_ctx_warning(const npuc_ctx *ctx, size_t i) {
    return ctx && i < ctx->nwarn && i < NPUC_CTX_WARN_MAX ? ctx->warn[i] : NULL;
}

/* Makes a message one line and safe to print on a terminal: control
 * characters a name from a file may have brought in (newlines, escape
 * sequences) become '?', except newline and tab which become spaces. */
static void one_line(char *p) {
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\n' || c == '\r' || c == '\t') *p = ' ';
        else if (c < 0x20 || c == 0x7f) *p = '?';
    }
}

void npuc__ctx_warn(npuc_ctx *ctx, const char *fmt, ...) {
    if (!ctx) return;
    if (ctx->nwarn < NPUC_CTX_WARN_MAX) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->warn[ctx->nwarn], sizeof ctx->warn[0], fmt, ap);
        va_end(ap);
        one_line(ctx->warn[ctx->nwarn]);
    }
    ctx->nwarn++;
}

npuc_status npuc_vfail(npuc_ctx *ctx, npuc_status st, const char *fmt, va_list ap) {
    if (!ctx) return st;
    ctx->code = st;
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    one_line(ctx->msg);
    return st;
}

npuc_status npuc_fail(npuc_ctx *ctx, npuc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    npuc_vfail(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}
