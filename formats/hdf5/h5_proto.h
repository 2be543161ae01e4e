/*
 * h5_proto.h - the wire protocol between npuc and its contained HDF5 reader
 * (h5_worker.c): framed messages over a stream socket, a file descriptor
 * passed alongside (SCM_RIGHTS), and a bounds-checked encoder/decoder for
 * the payloads.
 *
 * A message is a 24-byte header followed by len payload bytes:
 *     u32 magic 'nH5P' | u32 type | i32 status | u32 zero | u64 len
 * in host byte order (both ends are the same process image).  The parent
 * treats every byte from the child as untrusted: recv checks the magic, the
 * type and len against a cap before allocating, and the decoder never reads
 * past the payload.
 */
#ifndef NPUC_H5_PROTO_H
#define NPUC_H5_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define NPUC_H5P_MAGIC 0x6e483550u

typedef enum npuc_h5p_type {
    NPUC_H5P_OPEN_OK = 1, /* child -> parent: the model description */
    NPUC_H5P_ERR = 2,     /* child -> parent: status + one-line message */
    NPUC_H5P_LOAD = 3,    /* parent -> child: u64 index, nbytes, buffer id, buffer size,
                             progress (0/1); a new buffer's memfd travels with it */
    NPUC_H5P_LOAD_OK = 4, /* child -> parent: the buffer holds the tensor */
    NPUC_H5P_DROP = 5,    /* parent -> child: u64 buffer id, no longer used (no reply) */
    NPUC_H5P_PROGRESS = 6 /* child -> parent, between LOAD and its reply when LOAD asked
                             for it: u64 bytes of the tensor in the buffer so far */
} npuc_h5p_type;

typedef struct npuc_h5p_hdr {
    uint32_t magic, type;
    int32_t status;
    uint32_t zero;
    uint64_t len;
} npuc_h5p_hdr;

/* CLOCK_MONOTONIC in milliseconds (the clock recv's timeouts use). */
int64_t npuc__h5p_now_ms(void);

/* Sends one message; passfd >= 0 travels with it.  0, or -1 with errno
 * (EPIPE when the peer is gone: never SIGPIPE). */
int npuc__h5p_send(int sock, uint32_t type, int32_t status, const void *p, uint64_t len, int passfd);

/* Receives one message, waiting at most timeout_ms in all (-1: forever).
 * Returns 0 with *h, *payload (malloc'd, NUL-terminated, NULL when len is 0)
 * and *rxfd (a passed descriptor or -1; rxfd may be NULL, then any passed
 * descriptor is closed).  Returns -1 with errno: 0 for end of file,
 * ETIMEDOUT, EPROTO for a bad magic or a len above cap, ENOMEM, or the
 * socket's error. */
int npuc__h5p_recv(int sock, int timeout_ms, uint64_t cap, npuc_h5p_hdr *h, unsigned char **payload,
                   int *rxfd);

/* A growing encode buffer; oom latches on allocation failure. */
typedef struct npuc_h5p_enc {
    unsigned char *p;
    size_t n, cap;
    int oom;
} npuc_h5p_enc;

void npuc__h5p_put_u64(npuc_h5p_enc *e, uint64_t v);
/* u64 length, the bytes, a NUL. */
void npuc__h5p_put_str(npuc_h5p_enc *e, const char *s);

/* A decoder over untrusted bytes; bad latches on any overrun or malformed
 * string, after which every get returns 0 / "". */
typedef struct npuc_h5p_dec {
    const unsigned char *p;
    size_t n, off;
    int bad;
} npuc_h5p_dec;

uint64_t npuc__h5p_get_u64(npuc_h5p_dec *d);
/* A string encoded by put_str: length within the payload, NUL-terminated,
 * no NUL inside.  Points into the payload. */
const char *npuc__h5p_get_str(npuc_h5p_dec *d);
/* A count of items each at least min_item bytes long: more than the bytes
 * left can hold marks the decoder bad (so no loop runs on a forged count). */
uint64_t npuc__h5p_get_count(npuc_h5p_dec *d, size_t min_item);

#endif
