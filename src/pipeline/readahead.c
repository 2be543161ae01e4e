/*
 * readahead.c - the read-ahead helper thread (see readahead.h).
 *
 * One mutex and one condition variable: the helper takes the next wanted
 * tensor while it is within `ahead` of the pass's position, else waits; the
 * pass wakes it when it moves on and when it stops.  The helper holds the
 * lock only to pick its next tensor, never while prefetching.
 */
#include "pipeline/readahead.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct npuc__readahead {
    npuc_model *m;
    unsigned char *want;
    size_t n, ahead;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t cur;     /* the pass's position */
    size_t next;    /* the helper's next candidate */
    size_t done;    /* tensors prefetched */
    int stopping;
};

static void *helper(void *arg) {
    npuc__readahead *ra = arg;
    pthread_mutex_lock(&ra->mu);
    for (;;) {
        while (ra->next < ra->n && !ra->want[ra->next]) ra->next++;
        if (ra->next >= ra->n) break;
        if (ra->next > ra->cur + ra->ahead) {
            if (ra->stopping) break; /* the window of the last position is done */
            pthread_cond_wait(&ra->cv, &ra->mu);
            continue;
        }
        const size_t i = ra->next++;
        pthread_mutex_unlock(&ra->mu);
        npuc__model_prefetch(ra->m, i);
        pthread_mutex_lock(&ra->mu);
        ra->done++;
    }
    pthread_mutex_unlock(&ra->mu);
    return NULL;
}

static long online_cores(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? c : 1;
}

npuc__readahead *npuc__readahead_start(npuc_model *m, const unsigned char *want, size_t ahead,
                                       int threads, int force) {
    const size_t n = npuc_model_count(m);
    if (!npuc__model_can_prefetch(m) || n == 0) return NULL;
    if (!force) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++)
            if (!want || want[i]) bytes += npuc_model_tensor(m, i)->nbytes;
        if ((long)threads >= online_cores() || bytes < NPUC_READAHEAD_MIN) return NULL;
    }
    npuc__readahead *ra = calloc(1, sizeof *ra);
    if (!ra) return NULL;
    ra->want = malloc(n);
    if (!ra->want) {
        free(ra);
        return NULL;
    }
    if (want)
        memcpy(ra->want, want, n);
    else
        memset(ra->want, 1, n);
    ra->m = m;
    ra->n = n;
    ra->ahead = ahead;
    if (pthread_mutex_init(&ra->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&ra->cv, NULL) != 0) goto fail_cv;
    if (pthread_create(&ra->thr, NULL, helper, ra) != 0) goto fail_thr;
    return ra;
fail_thr:
    pthread_cond_destroy(&ra->cv);
fail_cv:
    pthread_mutex_destroy(&ra->mu);
fail_mu:
    free(ra->want);
    free(ra);
    return NULL;
}

void npuc__readahead_at(npuc__readahead *ra, size_t i) {
    if (!ra) return;
    pthread_mutex_lock(&ra->mu);
    if (i > ra->cur) {
        ra->cur = i;
        pthread_cond_signal(&ra->cv);
    }
    pthread_mutex_unlock(&ra->mu);
}

size_t npuc__readahead_stop(npuc__readahead *ra) {
    if (!ra) return 0;
    pthread_mutex_lock(&ra->mu);
    ra->stopping = 1;
    pthread_cond_signal(&ra->cv);
    pthread_mutex_unlock(&ra->mu);
    pthread_join(ra->thr, NULL);
    const size_t done = ra->done;
    pthread_cond_destroy(&ra->cv);
    pthread_mutex_destroy(&ra->mu);
    free(ra->want);
    free(ra);
    return done;
}
