/*
 * pass_guard.c - never silently wrong: the check a pass makes before it
 * relies on a tensor's layout (per-channel scales, structured pruning, N:M
 * groups along the reduction axis, folding along the output axis).
 *
 * A layout decision that rests on a guess, or one that is not certain and
 * puts a large tensor's channels on an axis of length <= 4 (a TensorFlow
 * kernel [kh,kw,in,out] read as OIHW puts them on kh), is said out loud: a
 * summary warning naming the tensor, the choice and its evidence, the
 * alternative and the flag that states the layout.  Under a strict policy it
 * is NPUC_ERR_GUESS instead, raised before the output is opened.  A layout
 * that is certain (stated with --layout or recorded, or implied by the file's
 * own structure) is trusted even when its channel axis is short: a last
 * convolution with 3 output channels is real.
 */
#include <stdio.h>
#include <string.h>

#include "pass_driver.h"

#define GUARD_SHORT_AXIS 4
#define GUARD_MIN_NUMEL 256

static uint64_t channels_of(const npuc_tensor_info *t, npuc_layout l) {
    npuc_tensor_info v = *t;
    uint64_t o, c, k;
    v.layout = l;
    return npuc_layout_view(&v, &o, &c, &k) == NPUC_OK ? c : 0;
}

npuc_status npuc__drive_guard(npuc__drive *d, size_t i, const char *what) {
    const npuc_tensor_info *t = npuc_model_tensor(d->m, i);
    if (!t || t->layout == NPUC_LAYOUT_NONE || t->confidence == NPUC_CONF_CERTAIN) return NPUC_OK;
    const uint64_t c = channels_of(t, t->layout);
    const int guess = t->confidence == NPUC_CONF_GUESS;
    const int short_axis = c <= GUARD_SHORT_AXIS && t->numel >= GUARD_MIN_NUMEL;
    if (!guess && !short_axis) return NPUC_OK;

    char why[160], alt[96] = "";
    if (guess)
        snprintf(why, sizeof why, "the layout is a guess");
    else
        snprintf(why, sizeof why, "its channel axis has length %llu for %llu elements", (unsigned long long)c,
                 (unsigned long long)t->numel);
    const npuc_layout a = npuc__layout_other_family(t->layout);
    const uint64_t ac = a != NPUC_LAYOUT_NONE ? channels_of(t, a) : 0;
    if (ac) snprintf(alt, sizeof alt, "; the alternative is %s (%llu channels)", npuc_layout_name(a),
                     (unsigned long long)ac);
    const char *path = npuc_model_path(d->m);
    if (npuc_ctx_policy(d->ctx)->strict)
        return npuc_fail(d->ctx, NPUC_ERR_GUESS,
                         "%s: tensor '%s': %s along layout %s (%llu channels; %s): %s%s; refused by --strict: "
                         "state it with --layout 'REGEX=LAYOUT'",
                         path, t->name, what, npuc_layout_name(t->layout), (unsigned long long)c,
                         t->evidence ? t->evidence : "no evidence recorded", why, alt);
    if (npuc_summary_warn(d->sum,
                          "tensor '%s': %s along layout %s (%llu channels; %s): %s%s; state it with --layout "
                          "'REGEX=LAYOUT' (--strict refuses this)",
                          t->name, what, npuc_layout_name(t->layout), (unsigned long long)c,
                          t->evidence ? t->evidence : "no evidence recorded", why, alt) != NPUC_OK)
        return npuc_fail(d->ctx, NPUC_ERR_NOMEM, "out of memory");
    return NPUC_OK;
}
