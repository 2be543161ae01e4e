/*
 * layout_rules.h - deciding a tensor's role and layout from evidence,
 * strongest first (library-private; docs/formats.md#layouts is the manual):
 *
 *   1. explicit: a --layout rule, a recorded "npuc.layout" entry (applied by
 *      model.c on top of what is decided here);
 *   2. the file's structure and metadata: the "format" metadata entry
 *      (safetensors' __metadata__, an HDF5 root attribute: "tf", "pt",
 *      "flax", "mlx", "np"), a Keras tree, Keras 2 model_config class names,
 *      Keras 3 layer paths (layers/<name>/vars/N);
 *   3. the naming conventions of each exporter family: PyTorch and Hugging
 *      Face transformers, Keras 2/3 and TF/tfjs, ONNX and Paddle;
 *   4. the shapes of the whole model, for the tensors no name settled
 *      (layout_shapes.c: npuc__layout_refine);
 *   5. shape plausibility.
 *
 * A decision carries a confidence (CERTAIN, CONVENTION, GUESS: tensor.h) and
 * a short evidence phrase.  The same inputs always give the same decision,
 * so a writer can record exactly the layouts a reader would not decide
 * (npuc__layout_meta_json).
 */
#ifndef NPUC_LAYOUT_RULES_H
#define NPUC_LAYOUT_RULES_H

#include "npuc_internal.h"

/* The exporter family a file's metadata or structure names. */
typedef enum npuc__family {
    NPUC__FAM_UNKNOWN = 0, /* no "format" entry, or "np" */
    NPUC__FAM_TF,          /* "tf", or a Keras tree: HWIO, HWIM, Dense [in,out] */
    NPUC__FAM_FLAX,        /* "flax": Flax kernels are laid out as TensorFlow's */
    NPUC__FAM_PT,          /* "pt": PyTorch/ONNX/Paddle: OIHW, Linear [out,in] */
    NPUC__FAM_MLX          /* "mlx": Linear [out,in], conv [out,*spatial,in] */
} npuc__family;

/* What the file says about its tensors as a whole. */
typedef struct npuc__layout_src {
    npuc__family fam;
    const char *fam_why;  /* "format=tf", "Keras file"...: static */
    int keras;            /* a Keras tree read with Keras rules */
    /* The "format" value when the file states one that names no family
     * ("np", anything unknown): names of a family then do not decide. */
    char stated[24];
    /* Keras model_config: layer name -> class_name (malloc'd strings). */
    char **layer, **cls;
    size_t nlayers;
} npuc__layout_src;

/* What a decision rests on, for the model-wide rules (layout_shapes.c):
 * only decisions no name settled are open to the shapes of the others. */
enum {
    NPUC__DEC_NAMED = 0, /* a naming rule, the file's structure, or no weight at all */
    NPUC__DEC_UNNAMED,   /* no telling name: the family's default or the rank */
    NPUC__DEC_DEMOTED    /* a family's name in a file whose stated format names no family */
};

/* One decision; evidence is written into ev (NUL-terminated). */
typedef struct npuc__layout_decision {
    npuc_role role;
    npuc_layout layout;
    npuc_confidence conf;
    int kind; /* NPUC__DEC_* */
    char ev[160];
} npuc__layout_decision;

/* Fills s from a file's facts: keras != 0 for a Keras tree whose weights
 * follow Keras rules, format the "format" metadata value or NULL,
 * model_config the Keras model_config JSON or NULL (unparsable JSON is
 * ignored: it is evidence, not a requirement).  Returns 0, or -1 when out of
 * memory (s is then empty and needs no free). */
int npuc__layout_src_init(npuc__layout_src *s, int keras, const char *format, const char *model_config);
/* The same from key/value metadata arrays (a writer's). */
int npuc__layout_src_from_meta(npuc__layout_src *s, int keras, char *const *k, char *const *v, size_t n);
void npuc__layout_src_free(npuc__layout_src *s);

/* Keras 3 variable paths: when name[0..n) is "<layer path>/vars/<digits>"
 * (the layer path non-empty) the offset of "vars", else 0.  Both the layout
 * rules and the graph's BatchNorm defaults (npuc__graph_is_keras3_var) ask
 * this one question. */
size_t npuc__keras3_var(const char *name, size_t n);

/* Decides tensor t's role and layout (t->name, rank, shape, group are read).
 * group: the Keras layer of the tensor, or NULL. */
void npuc__layout_decide(const npuc__layout_src *s, const npuc_tensor_info *t, npuc__layout_decision *d);

/* Model-wide shape evidence over the decisions d[0..n) of t[0..n) (each
 * from npuc__layout_decide), applied to the open ones (kind UNNAMED or
 * DEMOTED) only: the ONNX LSTM/GRU pattern (W/R [dirs,gates*hidden,in]
 * beside B [dirs,2*gates*hidden]) and, in a file that names no family, the
 * chain of 2-D weights whose dimensions connect only one way (and their
 * biases' lengths).  docs/formats.md#layouts lists the rules. */
void npuc__layout_refine(const npuc__layout_src *s, const npuc_tensor_info *t, size_t n, npuc__layout_decision *d);

/* Serialises the layouts of t[0..n) that differ from what npuc__layout_decide
 * and npuc__layout_refine give under s (NONE counts as unset) as the "npuc.layout" JSON object
 * {"name": "io", ...}; returns a malloc'd string, or NULL when every layout
 * equals its decision (*err set on allocation failure). */
char *npuc__layout_meta_json(const npuc_tensor_info *t, size_t n, const npuc__layout_src *s, int *err);

#endif
