/*
 * st_format.h - what the safetensors reader and writer give the format's
 * registry row (st_format.c).
 */
#ifndef NPUC_ST_FORMAT_H
#define NPUC_ST_FORMAT_H

#include "format_row.h"

/* Opens a safetensors file (st_reader.c): header and tensor table, payloads
 * from an mmap. */
npuc_status npuc__st_open(npuc_ctx *ctx, const char *path, const npuc_open_opts *o, npuc_model **out);
/* The writer (st_writer.c). */
extern const npuc_writer_backend npuc__st_writer_backend;
/* The registry row (st_format.c). */
extern const npuc__format_row npuc__st_format;

#endif
