/*
 * onnx_edit.h - the stored ONNX graph entry opened once for the graph_write
 * edits (onnx_edit.c): its bytes, the parsed model, every weight's ONNX
 * data_type and the weights the edited network graph still holds.
 */
#ifndef NPUC_ONNX_EDIT_H
#define NPUC_ONNX_EDIT_H

#include "onnx_format.h"
#include "onnx_model.h"
#include "strmap.h"

typedef struct npuc__ox_edit {
    unsigned char *skel; /* the entry, decoded from base64 */
    size_t nskel;
    npuc__onnx_model *om; /* its graph, parsed */
    npuc__strmap wtype;   /* weight of the file -> ONNX data_type */
    npuc__strmap gw;      /* weight names g still holds -> node */
} npuc__ox_edit;

/* Opens `stored` (label names it in errors) for an edit to g.  On failure
 * e still needs npuc__ox_edit_close. */
npuc_status npuc__ox_edit_open(npuc_ctx *ctx, const char *label, const char *stored, const npuc_graph *g,
                               npuc__ox_edit *e);
void npuc__ox_edit_close(npuc__ox_edit *e);
/* A walk's meta hook that keeps every metadata entry. */
npuc_status npuc__ox_keep_meta(npuc__ox_walk *wk, const char *k, const char *v, int *keep);
/* 1 when field f is the string s (wire type 2). */
int npuc__ox_field_is(const npuc__ox_field *f, const char *s);
/* The string field's copy (malloc'd; NULL: out of memory, not a string,
 * or a string holding a NUL). */
char *npuc__ox_field_dup(const npuc__ox_field *f);
/* For a GraphProto field that is a graph input (11) or a value_info (13):
 * its ValueInfoProto's name in *name (malloc'd) and 1; 0 for another field
 * or one without a name; -1 out of memory (or a name holding a NUL). */
int npuc__ox_value_info_name(const npuc__ox_field *f, char **name);

#endif
