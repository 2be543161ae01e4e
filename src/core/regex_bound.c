/*
 * regex_bound.c - compiling the regular expressions users and recipes hand
 * to npuc without letting one of them take the machine.
 *
 * glibc's regcomp expands counted repetition: "((x{1000}){1000}){1000}"
 * (58 bytes in a recipe) asks it for 3.8 GB.  Before compiling, a pattern's
 * expanded size is estimated the way regcomp builds it (each atom one node,
 * a group the sum of its parts, "{m,n}" repeating what precedes it
 * max(m, n) times, "*", "+" and "?" twice) and refused above
 * NPUC_REGEX_MAX_COST nodes, which keeps compiling under a few MB.
 */
#include <ctype.h>
#include <string.h>

#include "npuc_internal.h"

#define NPUC_REGEX_MAX_LEN 1024
#define NPUC_REGEX_MAX_COST 20000u
#define NPUC_REGEX_MAX_NEST 32

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return npuc_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* The estimate, or UINT64_MAX when the nesting is too deep to judge. */
static uint64_t estimate(const char *p) {
    uint64_t sum[NPUC_REGEX_MAX_NEST + 1] = {0}; /* per open group */
    uint64_t last = 0;                           /* the atom a repetition applies to */
    int depth = 0;
    while (*p) {
        if (*p == '\\' && p[1]) {
            sum[depth] = sat_add(sum[depth], last = 1);
            p += 2;
        } else if (*p == '[') { /* a bracket expression is one atom */
            const char *q = p + 1;
            if (*q == '^') q++;
            if (*q == ']') q++;
            while (*q && *q != ']') q += (*q == '[' && (q[1] == ':' || q[1] == '.' || q[1] == '=') &&
                                          strchr(q + 2, ']')) ? (strchr(q + 2, ']') - q) + 1 : 1;
            p = *q ? q + 1 : q;
            sum[depth] = sat_add(sum[depth], last = 1);
        } else if (*p == '(') {
            if (depth == NPUC_REGEX_MAX_NEST) return UINT64_MAX;
            sum[++depth] = 0;
            last = 0;
            p++;
        } else if (*p == ')') {
            if (depth == 0) { sum[0] = sat_add(sum[0], last = 1); p++; continue; }
            last = sat_add(sum[depth--], 1);
            sum[depth] = sat_add(sum[depth], last);
            p++;
        } else if (*p == '{' && isdigit((unsigned char)p[1])) {
            uint64_t m = 0, n = 0;
            const char *q = p + 1;
            while (isdigit((unsigned char)*q)) m = sat_add(sat_mul(m, 10), (uint64_t)(*q++ - '0'));
            n = m;
            if (*q == ',') {
                q++;
                if (isdigit((unsigned char)*q)) {
                    n = 0;
                    while (isdigit((unsigned char)*q)) n = sat_add(sat_mul(n, 10), (uint64_t)(*q++ - '0'));
                } else {
                    n = sat_add(m, 1);
                }
            }
            const uint64_t times = n > m ? n : m;
            /* The atom is already counted once: add the other copies. */
            const uint64_t more = sat_mul(last, times ? times - 1 : 0);
            sum[depth] = sat_add(sum[depth], more);
            last = sat_add(last, more);
            p = *q == '}' ? q + 1 : q;
        } else if (*p == '*' || *p == '+' || *p == '?') {
            sum[depth] = sat_add(sum[depth], last);
            last = sat_mul(last, 2);
            p++;
        } else {
            sum[depth] = sat_add(sum[depth], last = 1);
            p++;
        }
    }
    while (depth > 0) sum[depth - 1] = sat_add(sum[depth - 1], sum[depth]), depth--;
    return sum[0];
}

int npuc__regcomp(regex_t *re, const char *pat) {
    if (strlen(pat) > NPUC_REGEX_MAX_LEN || estimate(pat) > NPUC_REGEX_MAX_COST) return REG_ESIZE;
    return regcomp(re, pat, REG_EXTENDED | REG_NOSUB);
}
