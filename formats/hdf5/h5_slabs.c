/*
 * h5_slabs.c - moving one dataset's data in pieces along its first
 * dimension (h5_common.h: npuc__h5_xfer_slabs), so that reading or writing a
 * large tensor can report progress between the pieces.
 *
 * A piece is a hyperslab of whole "rows" of the split axis (the first
 * dimension longer than 1; the ones before it are 1): all trailing
 * dimensions in full, about NPUC_PROGRESS_STEP bytes, and for a chunked
 * dataset a whole number of chunks along the split axis.  Whole chunks
 * matter twice: a read decompresses each chunk once (a piece boundary
 * inside a chunk would decompress it for both pieces unless the chunk cache
 * kept it), and a write never writes part of a chunk, so HDF5 never reads a
 * chunk back to merge a second part into it; chunks are written whole, in
 * the order one H5Dwrite writes them, and the file's bytes are the same as
 * with a single call (tests/cli/h5_progress.sh compares them).  Contiguous
 * data is one byte range either way.  The memory side is the buffer at the
 * piece's offset: rows are contiguous in C order.
 */
#include "h5_common.h"

/* The split axis of t: the first dimension longer than 1 (-1: none). */
static int split_axis(const npuc_tensor_info *t) {
    for (int k = 0; k < t->rank; k++)
        if (t->shape[k] > 1) return k;
    return -1;
}

/* Rows of the split axis per piece: about step bytes, a multiple of the
 * chunk's extent along the axis for chunked data. */
static uint64_t piece_rows(hid_t d, int axis, uint64_t row_bytes, uint64_t step) {
    uint64_t rows = row_bytes >= step ? 1 : step / row_bytes;
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        if (cr > axis && cd[axis] > 0) {
            const uint64_t c = (uint64_t)cd[axis];
            rows = rows / c * c;
            if (rows == 0) rows = c;
        }
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    return rows;
}

/* One H5Dread or H5Dwrite of the selection (ms, fs); HDF5's message goes to
 * err right away (the next HDF5 call clears it). */
static int xfer(hid_t d, hid_t mtype, hid_t ms, hid_t fs, void *p, int write, char *err, size_t errn) {
    herr_t r = write ? H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, p) : H5Dread(d, mtype, ms, fs, H5P_DEFAULT, p);
    if (r >= 0) return 0;
    npuc__h5_errtext(err, errn);
    return -1;
}

int npuc__h5_xfer_slabs(hid_t d, hid_t mtype, const npuc_tensor_info *t, void *buf, int write,
                        npuc_h5_progress_fn fn, void *user, char *err, size_t errn) {
    const int axis = split_axis(t);
    if (!fn || t->nbytes < NPUC_PROGRESS_MIN || axis < 0) return xfer(d, mtype, H5S_ALL, H5S_ALL, buf, write, err, errn);
    const uint64_t n = (uint64_t)t->shape[axis], row_bytes = t->nbytes / n;
    const uint64_t rows = piece_rows(d, axis, row_bytes, NPUC_PROGRESS_STEP);
    hsize_t start[NPUC_MAX_RANK], count[NPUC_MAX_RANK];
    for (int k = 0; k < t->rank; k++) {
        start[k] = 0;
        count[k] = (hsize_t)t->shape[k];
    }
    hid_t fs = H5Dget_space(d);
    if (fs < 0) {
        npuc__h5_errtext(err, errn);
        return -1;
    }
    int rc = 0;
    for (uint64_t r0 = 0; r0 < n && rc == 0; r0 += rows) {
        const uint64_t cnt = n - r0 < rows ? n - r0 : rows;
        start[axis] = (hsize_t)r0;
        count[axis] = (hsize_t)cnt;
        hid_t ms = H5Screate_simple(t->rank, count, NULL);
        unsigned char *p = (unsigned char *)buf + r0 * row_bytes; /* r0 * row_bytes < nbytes */
        if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0) {
            npuc__h5_errtext(err, errn);
            rc = -1;
        } else {
            rc = xfer(d, mtype, ms, fs, p, write, err, errn);
        }
        if (ms >= 0) H5Sclose(ms);
        if (rc == 0) fn(user, (r0 + cnt) * row_bytes, t->nbytes);
    }
    H5Sclose(fs);
    return rc;
}
