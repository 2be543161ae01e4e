/*
 * st_format.c - safetensors' row in the format registry.
 *
 * safetensors has no magic number: a file is an 8-byte little-endian header
 * length N and then N bytes of JSON.  The sniff therefore only finds the
 * file plausible (N fits the file and the JSON starts with '{'), which loses
 * to a real signature such as HDF5's; and a file whose name says
 * .safetensors goes straight to the reader, whose messages say exactly what
 * is wrong with it.  The format takes no write options.
 */
#include <stdio.h>
#include <sys/stat.h>

#include "st_format.h"

static int st_sniff(const char *path) {
    unsigned char b[9];
    struct stat sb;
    FILE *f = fopen(path, "rb");
    if (!f) return NPUC__SNIFF_NO;
    int ok = fstat(fileno(f), &sb) == 0 && fread(b, 1, sizeof b, f) == sizeof b;
    fclose(f);
    if (!ok) return NPUC__SNIFF_NO;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n >= 2 && n <= (uint64_t)sb.st_size - 8 && b[8] == '{' ? NPUC__SNIFF_PLAUSIBLE : NPUC__SNIFF_NO;
}

static const char *const ST_EXT[] = {".safetensors", ".st", NULL};

const npuc__format_row npuc__st_format = {
    .name = "safetensors",
    .ext = ST_EXT,
    .sniff = st_sniff,
    .no_signature = NULL,
    .open = npuc__st_open,
    .writer = &npuc__st_writer_backend,
    /* A Keras model_config a converter or npuc carried into __metadata__. */
    .graph_meta = "model_config",
    .graph_write = npuc__kconfig_graph_write,
};
