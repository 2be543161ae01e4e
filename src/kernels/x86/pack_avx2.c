/*
 * pack_avx2.c - AVX2 bit packing of 4- and 2-bit codes (the kernel table's
 * pack_bits; the reference is npuc_pack_bits in ref/qk_ref.c).
 *
 * Eight codes fill exactly `bits` bytes, so any block of codes whose length
 * is a multiple of 8 packs into whole bytes independently of the rest: the
 * bulk goes 64 codes (4 bits) or 128 codes (2 bits) at a time through
 * multiply-adds that merge neighbouring fields (VPMADDUBSW with 1 and 2^bits
 * merges pairs of bytes into words, VPMADDWD pairs of words into dwords),
 * saturating packs (no value saturates: every merged field fits a byte) and
 * a permutation that undoes the packs' lane interleaving; the rest, and every
 * other width, go to npuc_pack_bits.  Only the low `bits` bits of each code
 * are kept (the codes are masked first, as the reference does), so the bytes
 * are the reference's (tests/unit/test_qkernels.c compares them on every
 * length up to a few blocks).
 */
#include "kernels/npuc_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "kernels/x86/qk_x86.h"

#define NPUC_AVX2 __attribute__((target("avx2")))

NPUC_AVX2 void npuc__qk_pack_bits_avx2(const uint8_t *codes, size_t n, int bits, uint8_t *out) {
    size_t i = 0;
    if (bits == 4) {
        const __m256i lo4 = _mm256_set1_epi8(0x0F), pair = _mm256_set1_epi16(0x1001); /* c0 + 16*c1 */
        for (; i + 64 <= n; i += 64) {
            const __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(codes + i)), lo4);
            const __m256i b =
                _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(codes + i + 32)), lo4);
            /* Words of 0..255; the pack interleaves a and b by 128-bit lane. */
            const __m256i p = _mm256_packus_epi16(_mm256_maddubs_epi16(a, pair), _mm256_maddubs_epi16(b, pair));
            _mm256_storeu_si256((__m256i *)(void *)(out + i / 2), _mm256_permute4x64_epi64(p, 0xD8));
        }
    } else if (bits == 2) {
        const __m256i lo2 = _mm256_set1_epi8(0x03), pair = _mm256_set1_epi16(0x0401); /* c0 + 4*c1 */
        const __m256i quad = _mm256_set1_epi32(0x00100001);                            /* w0 + 16*w1 */
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (; i + 128 <= n; i += 128) {
            __m256i d[4];
            for (int k = 0; k < 4; k++) {
                const __m256i c = _mm256_and_si256(
                    _mm256_loadu_si256((const __m256i *)(const void *)(codes + i + 32 * (size_t)k)), lo2);
                d[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(c, pair), quad); /* dwords of 0..255 */
            }
            /* Lane l of the result holds d0, d1, d2, d3's lane l, 4 bytes each. */
            const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(d[0], d[1]), _mm256_packus_epi32(d[2], d[3]));
            _mm256_storeu_si256((__m256i *)(void *)(out + i / 4), _mm256_permutevar8x32_epi32(p, order));
        }
    }
    /* i is a multiple of 8, so the rest starts on a byte boundary. */
    npuc_pack_bits(codes + i, n - i, bits, out + i / 8 * (size_t)bits);
}

#endif
