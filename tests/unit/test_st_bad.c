/*
 * test_st_bad.c - the safetensors reader on malformed and hostile files.
 *
 * Every case is a file built byte by byte here (the 8-byte little-endian
 * header length, the header bytes, then zero-filled payload), independently
 * of npuc's writer.  Each must make npuc_model_open() return one specific
 * status with *out NULL and a one-line message that names the file, the
 * problem and, where there is one, the tensor.  After every failure the same
 * context must still open a valid file, and the failed open must leave no
 * file, no descriptor and no mapping behind.  ASan/UBSan builds run the same
 * cases for crashes and leaks.
 *
 * Expected fragments quote the reader's messages (formats/safetensors/
 * st_reader.c); "header JSON:" messages quote jansson 2.14's error text.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npuc_internal.h" /* NPUC_MSG_MAX: a message that fills it was cut */
#include "testutil.h"

static npuc_ctx *ctx;
static char g_good[1024]; /* a valid file, reopened after every failure */
static char g_bad_dir[1024];

#define FMT NPUC_ERR_FORMAT
#define OVF NPUC_ERR_OVERFLOW
#define UNS NPUC_ERR_UNSUPPORTED

/* One malformed file.  By default the file is the 8-byte length of hdr, hdr
 * itself (hdr_n bytes when it holds a NUL, else strlen) and data_n zero
 * bytes; set_len writes len as the length prefix instead; raw replaces the
 * whole file with raw_n bytes. */
typedef struct bad_case {
    const char *id;
    const char *hdr;
    size_t hdr_n;
    int set_len;
    uint64_t len;
    size_t data_n;
    int is_raw;
    const char *raw;
    size_t raw_n;
    uint64_t max_header; /* npuc_open_opts.max_header_bytes; 0: opts NULL */
    npuc_status want;
    const char *frag;    /* the message must contain this */
    const char *name;    /* ...and this (the tensor or key), when non-NULL */
} bad_case;

#define RAW(s, n) .is_raw = 1, .raw = (s), .raw_n = (n)
#define LEN(n) .set_len = 1, .len = (n)

/* A well-formed tensor entry, as a JSON member. */
#define T(name, dt, shape, b, e)                                                              \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"
#define W T("w", "F32", "[2]", "0", "8") /* 8 bytes at 0 */

static const bad_case CASES[] = {
    /* ---- the length prefix against the file */
    {"file_0_bytes", RAW("", 0), .want = FMT, .frag = "file is 0 bytes, too short"},
    {"file_1_byte", RAW("\x02", 1), .want = FMT, .frag = "file is 1 bytes, too short"},
    {"file_7_bytes", RAW("\x02\0\0\0\0\0\0", 7), .want = FMT, .frag = "file is 7 bytes, too short"},
    {"len_past_eof", "{}", LEN(3), .want = FMT, .frag = "header length 3 exceeds the file (10 bytes)"},
    {"len_past_eof_by_data", "{" W "}", LEN(2000), .data_n = 8, .want = FMT,
     .frag = "header length 2000 exceeds the file"},
    {"len_over_limit", "{}", LEN(100000001), .want = FMT,
     .frag = "header length 100000001 exceeds the 100000000-byte limit"},
    {"len_u64_max", "{}", LEN(UINT64_MAX), .want = FMT,
     .frag = "header length 18446744073709551615 exceeds the 100000000-byte limit"},
    {"len_over_custom_limit", "{" W "}", .data_n = 8, .max_header = 16, .want = FMT,
     .frag = "header length 54 exceeds the 16-byte limit"},
    {"len_u64_max_no_limit", "{}", LEN(UINT64_MAX), .max_header = UINT64_MAX, .want = FMT,
     .frag = "header length 18446744073709551615 exceeds the file (10 bytes)"},
    {"len_2pow63", "{}", LEN(UINT64_C(1) << 63), .max_header = UINT64_MAX, .want = FMT,
     .frag = "exceeds the file (10 bytes)"},
    {"len_zero", "", .want = FMT, .frag = "header is empty (length 0)"},
    {"len_zero_then_json", "{}", LEN(0), .want = FMT, .frag = "header is empty"},

    /* ---- the header must be a JSON object starting at its first byte */
    {"hdr_array", "[]", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_string", "\"{}\"", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_number", "12", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_null", "null", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_space_first", " {}", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_newline_first", "\n{}", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_bom_first", "\xef\xbb\xbf{}", .want = FMT, .frag = "header does not start with a JSON object"},
    {"hdr_one_brace", "{", .want = FMT, .frag = "header JSON: "},

    /* ---- invalid JSON */
    {"json_truncated", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", .data_n = 8,
     .want = FMT, .frag = "header JSON: '}' expected near end of file"},
    {"json_trailing_garbage", "{" W "}x", .data_n = 8, .want = FMT,
     .frag = "header JSON: end of file expected near 'x'"},
    {"json_second_object", "{" W "}{}", .data_n = 8, .want = FMT,
     .frag = "header JSON: end of file expected"},
    {"json_trailing_comma", "{" W ",}", .data_n = 8, .want = FMT,
     .frag = "header JSON: string or '}' expected near '}'"},
    {"json_trailing_comma_shape", "{" T("w", "F32", "[2,]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "header JSON: "},
    {"json_single_quotes", "{'w':{}}", .want = FMT, .frag = "header JSON: "},
    {"json_bare_key", "{w:{}}", .want = FMT, .frag = "header JSON: "},
    {"json_deep_unclosed", "{\"w\":[[[[[[[[[[", .want = FMT, .frag = "header JSON: "},

    /* ---- bytes that are not valid UTF-8, and NULs */
    {"utf8_bad_key", "{\"w\xff\":{}}", .want = FMT, .frag = "header is not valid UTF-8"},
    {"utf8_truncated_in_meta", "{\"__metadata__\":{\"k\":\"v\xc3\"}}", .want = FMT,
     .frag = "header is not valid UTF-8"},
    {"utf8_overlong_2", "{\"a\xc0\xaf\":{}}", .want = FMT, .frag = "header is not valid UTF-8"},
    {"utf8_overlong_3", "{\"a\xe0\x80\xaf\":{}}", .want = FMT, .frag = "header is not valid UTF-8"},
    {"utf8_cesu_surrogate", "{\"a\xed\xa0\x80\xed\xb0\x80\":{}}", .want = FMT,
     .frag = "header is not valid UTF-8"},
    {"utf8_above_10ffff", "{\"a\xf4\x90\x80\x80\":{}}", .want = FMT, .frag = "header is not valid UTF-8"},
    {"utf8_lone_continuation", "{\"__metadata__\":{\"k\":\"\x80\"}}", .want = FMT,
     .frag = "header is not valid UTF-8"},
    {"utf8_in_padding", "{}\xa0", .want = FMT, .frag = "header is not valid UTF-8"},
    {"escaped_lone_surrogate", "{\"a\\ud800\":{}}", .want = FMT, .frag = "header JSON: invalid Unicode"},
    {"escaped_nul_in_name", "{\"a\\u0000b\":{}}", .want = FMT,
     .frag = "header JSON: NUL byte in object key not supported"},
    {"escaped_nul_in_meta", "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", .want = FMT,
     .frag = "header JSON: \\u0000 is not allowed without JSON_ALLOW_NUL"},
    {"escaped_lone_low_surrogate", "{\"__metadata__\":{\"k\":\"\\udc00\"}}", .want = FMT,
     .frag = "header JSON: invalid Unicode '\\uDC00'"},
    {"raw_nul_in_name", "{\"a" "\0" "b\":{}}", 10, .want = FMT, .frag = "header JSON: control character 0x0"},
    {"raw_nul_padding", "{" W "}" "\0", 55, .data_n = 8, .want = FMT,
     .frag = "header JSON: end of file expected"},
    {"raw_control_in_name", "{\"a\x01z\":{}}", .want = FMT, .frag = "header JSON: control character 0x1"},

    /* ---- duplicate keys (jansson's JSON_REJECT_DUPLICATES) */
    {"dup_tensor", "{" T("enc.w", "F32", "[1]", "0", "4") "," T("enc.w", "F32", "[1]", "4", "8") "}",
     .data_n = 8, .want = FMT, .frag = "header JSON: duplicate object key", .name = "enc.w"},
    {"dup_tensor_escaped", "{" T("enc.w", "F32", "[1]", "0", "4") "," T("enc\\u002ew", "F32", "[1]", "4", "8") "}",
     .data_n = 8, .want = FMT, .frag = "header JSON: duplicate object key"},
    {"dup_metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", .want = FMT,
     .frag = "header JSON: duplicate object key", .name = "__metadata__"},
    {"dup_metadata_escaped", "{\"__metadata__\":{},\"\\u005f_metadata__\":{}}", .want = FMT,
     .frag = "header JSON: duplicate object key"},
    {"dup_metadata_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", .want = FMT,
     .frag = "header JSON: duplicate object key"},
    {"dup_field", "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     .data_n = 8, .want = FMT, .frag = "header JSON: duplicate object key", .name = "dtype"},

    /* ---- __metadata__ */
    {"meta_array", "{\"__metadata__\":[\"a\"]}", .want = FMT, .frag = "__metadata__ is not a JSON object"},
    {"meta_string", "{\"__metadata__\":\"pt\"}", .want = FMT, .frag = "__metadata__ is not a JSON object"},
    {"meta_null", "{\"__metadata__\":null}", .want = FMT, .frag = "__metadata__ is not a JSON object"},
    {"meta_value_number", "{\"__metadata__\":{\"epoch\":3}}", .want = FMT,
     .frag = "__metadata__ 'epoch' is not a string"},
    {"meta_value_null", "{\"__metadata__\":{\"format\":null}}", .want = FMT,
     .frag = "__metadata__ 'format' is not a string"},
    {"meta_value_object", "{\"__metadata__\":{\"cfg\":{\"a\":\"b\"}}}", .want = FMT,
     .frag = "__metadata__ 'cfg' is not a string"},
    {"meta_value_array", "{\"__metadata__\":{\"tags\":[\"a\"]}}", .want = FMT,
     .frag = "__metadata__ 'tags' is not a string"},
    {"meta_value_bool", "{\"__metadata__\":{\"ok\":true}}", .want = FMT,
     .frag = "__metadata__ 'ok' is not a string"},
    /* A tensor spelled "__metadata__" is read as the metadata and fails there. */
    {"tensor_named_metadata", "{" T("__metadata__", "F32", "[2]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "__metadata__ 'shape' is not a string"},

    /* ---- the tensor entry */
    {"entry_array", "{\"enc.w\":[1,2]}", .want = FMT, .frag = "entry is not a JSON object", .name = "'enc.w'"},
    {"entry_string", "{\"enc.w\":\"F32\"}", .want = FMT, .frag = "entry is not a JSON object", .name = "'enc.w'"},
    {"entry_null", "{\"enc.w\":null}", .want = FMT, .frag = "entry is not a JSON object", .name = "'enc.w'"},
    {"entry_empty", "{\"enc.w\":{}}", .want = FMT, .frag = "missing field 'dtype'", .name = "'enc.w'"},
    {"missing_dtype", "{\"enc.w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", .data_n = 8, .want = FMT,
     .frag = "missing field 'dtype'", .name = "'enc.w'"},
    {"missing_shape", "{\"enc.w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", .data_n = 8, .want = FMT,
     .frag = "missing field 'shape'", .name = "'enc.w'"},
    {"missing_offsets", "{\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2]}}", .want = FMT,
     .frag = "missing field 'data_offsets'", .name = "'enc.w'"},
    {"extra_field", "{\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"align\":8}}",
     .data_n = 8, .want = FMT, .frag = "unknown field 'align'", .name = "'enc.w'"},
    {"misspelled_field", "{\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offset\":[0,8]}}", .data_n = 8,
     .want = FMT, .frag = "unknown field 'data_offset'", .name = "'enc.w'"},

    /* ---- dtype */
    {"dtype_f128", "{" T("enc.w", "F128", "[1]", "0", "16") "}", .data_n = 16, .want = FMT,
     .frag = "unknown dtype 'F128'", .name = "'enc.w'"},
    {"dtype_lowercase", "{" T("enc.w", "f32", "[2]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "unknown dtype 'f32'", .name = "'enc.w'"},
    {"dtype_alias", "{" T("enc.w", "float32", "[2]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "unknown dtype 'float32'", .name = "'enc.w'"},
    {"dtype_empty", "{" T("enc.w", "", "[2]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "unknown dtype ''", .name = "'enc.w'"},
    {"dtype_trailing_space", "{" T("enc.w", "F32 ", "[2]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "unknown dtype 'F32 '", .name = "'enc.w'"},
    {"dtype_number", "{\"enc.w\":{\"dtype\":1,\"shape\":[2],\"data_offsets\":[0,8]}}", .data_n = 8, .want = FMT,
     .frag = "dtype is not a string", .name = "'enc.w'"},
    {"dtype_null", "{\"enc.w\":{\"dtype\":null,\"shape\":[2],\"data_offsets\":[0,8]}}", .data_n = 8,
     .want = FMT, .frag = "dtype is not a string", .name = "'enc.w'"},
    /* Real safetensors dtypes npuc does not handle: well-formed, unsupported. */
    {"dtype_c64", "{" T("enc.w", "C64", "[1]", "0", "8") "}", .data_n = 8, .want = UNS,
     .frag = "dtype 'C64' is not supported", .name = "'enc.w'"},
    {"dtype_f8_e8m0", "{" T("enc.w", "F8_E8M0", "[4]", "0", "4") "}", .data_n = 4, .want = UNS,
     .frag = "dtype 'F8_E8M0' is not supported", .name = "'enc.w'"},

    /* ---- shape */
    {"shape_string", "{" T("enc.w", "F32", "\"[2]\"", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape is not an array", .name = "'enc.w'"},
    {"shape_number", "{" T("enc.w", "F32", "2", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape is not an array", .name = "'enc.w'"},
    {"shape_object", "{" T("enc.w", "F32", "{}", "0", "4") "}", .data_n = 4, .want = FMT,
     .frag = "shape is not an array", .name = "'enc.w'"},
    {"shape_negative_dim", "{" T("enc.w", "F32", "[2,-1]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape[1] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_float_dim", "{" T("enc.w", "F32", "[2.0]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape[0] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_exponent_dim", "{" T("enc.w", "U8", "[2e0]", "0", "2") "}", .data_n = 2, .want = FMT,
     .frag = "shape[0] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_string_dim", "{" T("enc.w", "F32", "[1,\"2\"]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape[1] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_bool_dim", "{" T("enc.w", "F32", "[true]", "0", "4") "}", .data_n = 4, .want = FMT,
     .frag = "shape[0] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_nested_dim", "{" T("enc.w", "F32", "[[2]]", "0", "8") "}", .data_n = 8, .want = FMT,
     .frag = "shape[0] is not a non-negative integer", .name = "'enc.w'"},
    {"shape_dim_over_int64", "{" T("enc.w", "U8", "[9223372036854775808]", "0", "1") "}", .data_n = 1,
     .want = FMT, .frag = "header JSON: too big integer"},
    {"shape_dim_under_int64", "{" T("enc.w", "U8", "[-9223372036854775809]", "0", "1") "}", .data_n = 1,
     .want = FMT, .frag = "header JSON: too big negative integer"},
    {"shape_rank_9", "{" T("enc.w", "U8", "[1,1,1,1,1,1,1,1,1]", "0", "1") "}", .data_n = 1, .want = UNS,
     .frag = "rank 9 exceeds 8", .name = "'enc.w'"},
    {"shape_rank_9_zero", "{" T("enc.w", "U8", "[0,0,0,0,0,0,0,0,0]", "0", "0") "}", .want = UNS,
     .frag = "rank 9 exceeds 8", .name = "'enc.w'"},
    {"shape_numel_overflow", "{" T("enc.w", "U8", "[4294967296,4294967296]", "0", "0") "}", .want = OVF,
     .frag = "shape overflows 64-bit sizes", .name = "'enc.w'"},
    /* Checked left to right, as the reference implementation does: the
     * product overflows before the 0 is reached. */
    {"shape_numel_overflow_then_0", "{" T("enc.w", "U8", "[4294967296,4294967296,0]", "0", "0") "}",
     .want = OVF, .frag = "shape overflows 64-bit sizes", .name = "'enc.w'"},
    {"shape_numel_over_int64", "{" T("enc.w", "BOOL", "[4294967296,2147483648]", "0", "0") "}",
     .want = OVF, .frag = "shape overflows 64-bit sizes", .name = "'enc.w'"},
    {"shape_nbytes_overflow", "{" T("enc.w", "F64", "[2305843009213693952]", "0", "0") "}", .want = OVF,
     .frag = "shape overflows 64-bit sizes", .name = "'enc.w'"},
    {"shape_nbytes_over_int64", "{" T("enc.w", "F32", "[2305843009213693952]", "0", "0") "}", .want = OVF,
     .frag = "shape overflows 64-bit sizes", .name = "'enc.w'"},

    /* ---- data_offsets */
    {"offsets_one", "{" "\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}" "}", .data_n = 8,
     .want = FMT, .frag = "data_offsets is not [begin, end]", .name = "'enc.w'"},
    {"offsets_three", "{" "\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}" "}",
     .data_n = 8, .want = FMT, .frag = "data_offsets is not [begin, end]", .name = "'enc.w'"},
    {"offsets_empty", "{" "\"enc.w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[]}" "}", .want = FMT,
     .frag = "data_offsets is not [begin, end]", .name = "'enc.w'"},
    {"offsets_object", "{" "\"enc.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"0\":8}}" "}",
     .data_n = 8, .want = FMT, .frag = "data_offsets is not [begin, end]", .name = "'enc.w'"},
    {"offsets_negative_begin", "{" T("enc.w", "F32", "[2]", "-8", "0") "}", .want = FMT,
     .frag = "data_offsets is not [begin, end] of non-negative integers", .name = "'enc.w'"},
    {"offsets_negative_end", "{" T("enc.w", "F32", "[0]", "0", "-4") "}", .want = FMT,
     .frag = "data_offsets is not [begin, end] of non-negative integers", .name = "'enc.w'"},
    {"offsets_float", "{" T("enc.w", "F32", "[2]", "0", "8.0") "}", .data_n = 8, .want = FMT,
     .frag = "data_offsets is not [begin, end] of non-negative integers", .name = "'enc.w'"},
    {"offsets_strings", "{" T("enc.w", "F32", "[2]", "\"0\"", "\"8\"") "}", .data_n = 8, .want = FMT,
     .frag = "data_offsets is not [begin, end] of non-negative integers", .name = "'enc.w'"},
    {"offsets_over_int64", "{" T("enc.w", "F32", "[0]", "18446744073709551615", "18446744073709551615") "}",
     .want = FMT, .frag = "header JSON: too big integer"},
    {"offsets_begin_after_end", "{" T("enc.w", "F32", "[1]", "8", "4") "}", .data_n = 8, .want = FMT,
     .frag = "data_offsets [8,4) end before begin", .name = "'enc.w'"},
    {"offsets_too_small", "{" T("enc.w", "F32", "[2]", "0", "4") "}", .data_n = 4, .want = FMT,
     .frag = "data_offsets [0,4) hold 4 bytes, F32 shape needs 8", .name = "'enc.w'"},
    {"offsets_too_large", "{" T("enc.w", "F32", "[2]", "0", "12") "}", .data_n = 12, .want = FMT,
     .frag = "data_offsets [0,12) hold 12 bytes, F32 shape needs 8", .name = "'enc.w'"},
    {"offsets_scalar_empty", "{" T("enc.w", "F16", "[]", "0", "0") "}", .want = FMT,
     .frag = "data_offsets [0,0) hold 0 bytes, F16 shape needs 2", .name = "'enc.w'"},
    {"offsets_near_max_size", "{" T("enc.w", "F32", "[2]", "9223372036854775800", "9223372036854775807") "}",
     .want = FMT, .frag = "hold 7 bytes, F32 shape needs 8", .name = "'enc.w'"},

    /* ---- tiling the buffer */
    {"tile_first_not_at_0", "{" T("enc.w", "F32", "[1]", "4", "8") "}", .data_n = 8, .want = FMT,
     .frag = "data_offsets begin at 4, expected 0 (gap in the buffer)", .name = "'enc.w'"},
    {"tile_gap", "{" T("a", "F32", "[1]", "0", "4") "," T("enc.b", "F32", "[1]", "8", "12") "}", .data_n = 12,
     .want = FMT, .frag = "data_offsets begin at 8, expected 4 (gap in the buffer)", .name = "'enc.b'"},
    {"tile_overlap", "{" T("a", "F32", "[2]", "0", "8") "," T("enc.b", "F32", "[2]", "4", "12") "}",
     .data_n = 12, .want = FMT, .frag = "data_offsets begin at 4, expected 8 (overlaps the previous tensor)",
     .name = "'enc.b'"},
    {"tile_same_range", "{" T("a", "F32", "[1]", "0", "4") "," T("enc.b", "F32", "[1]", "0", "4") "}",
     .data_n = 4, .want = FMT, .frag = "begin at 0, expected 4 (overlaps the previous tensor)",
     .name = "'enc.b'"},
    {"tile_empty_inside", "{" T("a", "F32", "[2]", "0", "8") "," T("enc.z", "F32", "[0]", "4", "4") "}",
     .data_n = 8, .want = FMT, .frag = "begin at 4, expected 8 (overlaps the previous tensor)",
     .name = "'enc.z'"},
    {"tile_empty_at_int64_max",
     "{" T("enc.z", "F32", "[0]", "9223372036854775807", "9223372036854775807") "}", .want = FMT,
     .frag = "data_offsets begin at 9223372036854775807, expected 0 (gap in the buffer)", .name = "'enc.z'"},
    {"tile_empty_at_int64_max_after",
     "{" W "," T("enc.z", "F32", "[0]", "9223372036854775807", "9223372036854775807") "}", .data_n = 8,
     .want = FMT, .frag = "begin at 9223372036854775807, expected 8 (gap in the buffer)", .name = "'enc.z'"},

    /* ---- the file must end exactly at 8 + N + the last end */
    {"file_trailing_bytes", "{" W "}", .data_n = 9, .want = FMT,
     .frag = "file is 71 bytes but the header describes 70 (8 + 54 header + 8 data)"},
    {"file_truncated_payload", "{" W "}", .data_n = 7, .want = FMT,
     .frag = "file is 69 bytes but the header describes 70 (8 + 54 header + 8 data)"},
    {"file_no_payload", "{" W "}", .want = FMT, .frag = "file is 62 bytes but the header describes 70"},
    {"file_empties_then_truncated",
     "{" T("z1", "F32", "[0]", "0", "0") "," T("z2", "I8", "[3,0]", "0", "0") "," T("a", "F32", "[4]", "0", "16") "}",
     .data_n = 8, .want = FMT, .frag = "but the header describes"},
    {"file_empty_header_extra", "{}", .data_n = 4, .want = FMT,
     .frag = "file is 14 bytes but the header describes 10 (8 + 2 header + 0 data)"},
    {"file_claims_int64_max", "{" T("enc.w", "U8", "[9223372036854775807]", "0", "9223372036854775807") "}",
     .data_n = 16, .want = FMT, .frag = "9223372036854775807 data)"},

    /* ---- npuc's own "npuc.layout" metadata, read back by the model */
    {"layout_meta_not_json", "{\"__metadata__\":{\"npuc.layout\":\"oi\"}," W "}", .data_n = 8, .want = FMT,
     .frag = "metadata 'npuc.layout' is not a JSON object"},
    {"layout_meta_unknown_tensor", "{\"__metadata__\":{\"npuc.layout\":\"{\\\"nope\\\":\\\"io\\\"}\"}," W "}",
     .data_n = 8, .want = FMT, .frag = "metadata 'npuc.layout': bad entry for tensor 'nope'"},
    {"layout_meta_rank_mismatch", "{\"__metadata__\":{\"npuc.layout\":\"{\\\"w\\\":\\\"oihw\\\"}\"}," W "}",
     .data_n = 8, .want = FMT, .frag = "metadata 'npuc.layout': bad entry for tensor 'w'"},
};

#define NCASES (sizeof CASES / sizeof CASES[0])

/* Stores v as 8 little-endian bytes at out. */
static void put_u64(unsigned char *out, uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* Builds "length + header + zeros" into a malloc'd buffer. */
static unsigned char *build(const char *hdr, size_t hn, int set_len, uint64_t len, size_t dn, size_t *n) {
    unsigned char *b = calloc(8 + hn + dn + 1, 1);
    assert_non_null(b);
    put_u64(b, set_len ? len : (uint64_t)hn);
    memcpy(b + 8, hdr, hn);
    *n = 8 + hn + dn;
    return b;
}

static int count_dir(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

/* Open descriptors of this process: a failed open must not leak one. */
static int count_fds(void) { return count_dir("/proc/self/fd"); }

/* 1 if path is still mapped into this process. */
static int is_mapped(const char *path) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, path) != NULL;
    fclose(f);
    return found;
}

/* Writes bytes as <g_bad_dir>/<id>.safetensors, opens it expecting `want`,
 * checks the message, then checks that nothing was left behind and that the
 * context still opens a valid file. */
static void expect_failure(const char *id, const void *bytes, size_t n, const npuc_open_opts *opts,
                           npuc_status want, const char *frag, const char *name) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.safetensors", g_bad_dir, id);
    npuc_test_write_file(path, bytes, n);
    int fds = count_fds();

    npuc_model *m = (npuc_model *)&m; /* any non-NULL value: open must reset it */
    npuc_status st = npuc_model_open(ctx, path, opts, &m);
    const char *msg = npuc_ctx_errmsg(ctx);
    if (st != want || (frag && !strstr(msg, frag)) || (name && !strstr(msg, name)))
        print_error("case %s: status %d (%s), want %d; message: %s\n", id, (int)st,
                    npuc_status_str(st), (int)want, msg);
    if (getenv("NPUC_TEST_VERBOSE")) print_message("%-32s %s\n", id, msg);
    if (st == NPUC_OK) npuc_model_close(m);
    /* Look for leftovers, then remove the file before any assertion can
     * return early, so one failing case does not fail the next. */
    int fds_after = count_fds(), mapped = is_mapped(path), files = count_dir(g_bad_dir);
    assert_int_equal(unlink(path), 0);

    assert_int_equal(st, want);
    assert_null(m);
    assert_int_equal(npuc_ctx_errcode(ctx), want);
    assert_null(strchr(msg, '\n'));
    assert_null(strchr(msg, '\r'));
    assert_true(strlen(msg) < NPUC_MSG_MAX - 1); /* not cut at the buffer's end */
    assert_true(npuc__utf8_valid(msg, strlen(msg)));
    assert_non_null(strstr(msg, path));
    if (frag) assert_non_null(strstr(msg, frag));
    if (name) assert_non_null(strstr(msg, name));
    assert_int_equal(fds_after, fds);
    assert_false(mapped);
    assert_int_equal(files, 1); /* only the file itself: nothing created beside it */

    /* The context is reusable: a valid file opens on it at once. */
    assert_int_equal(npuc_model_open(ctx, g_good, NULL, &m), NPUC_OK);
    assert_non_null(m);
    assert_int_equal(npuc_model_count(m), 1);
    npuc_model_close(m);
    assert_int_equal(count_fds(), fds);
    assert_false(is_mapped(g_good));
}

static void run_case(void **state) {
    const bad_case *c = *state;
    size_t n;
    unsigned char *b;
    if (c->is_raw) {
        n = c->raw_n;
        b = malloc(n + 1);
        assert_non_null(b);
        memcpy(b, c->raw, n);
    } else {
        size_t hn = c->hdr_n ? c->hdr_n : strlen(c->hdr);
        b = build(c->hdr, hn, c->set_len, c->len, c->data_n, &n);
    }
    npuc_open_opts o = npuc_open_opts_defaults();
    o.max_header_bytes = c->max_header;
    expect_failure(c->id, b, n, c->max_header ? &o : NULL, c->want, c->frag, c->name);
    free(b);
}

/* ------------------------------------------------------- generated cases */

/* Nesting far past jansson's parser depth limit must fail, not recurse. */
static void test_deep_nesting(void **state) {
    (void)state;
    size_t depth = 100000;
    const char *pre = "{\"__metadata__\":";
    size_t hn = strlen(pre) + 2 * depth + 1;
    char *h = malloc(hn + 1);
    assert_non_null(h);
    strcpy(h, pre);
    memset(h + strlen(pre), '[', depth);
    memset(h + strlen(pre) + depth, ']', depth);
    h[hn - 1] = '}';
    h[hn] = 0;
    size_t n;
    unsigned char *b = build(h, hn, 0, 0, 0, &n);
    expect_failure("deep_nesting", b, n, NULL, FMT, "header JSON: maximum parsing depth reached", NULL);
    free(b);
    free(h);
}

/* A tensor name longer than the message buffer must not push the problem
 * out of the message. */
static void test_long_name(void **state) {
    (void)state;
    size_t nl = 5000;
    char *h = malloc(nl + 128);
    assert_non_null(h);
    strcpy(h, "{\"");
    memset(h + 2, 'n', nl);
    strcpy(h + 2 + nl, "\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,1]}}");
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 1, &n);
    expect_failure("long_name", b, n, NULL, FMT, "nnn...': unknown dtype 'Q4'", "'nnnnnnnn");
    free(b);
    free(h);
}

/* The same with a multi-byte name: where it is shortened it is shortened on a
 * character boundary, so the message stays valid UTF-8. */
static void test_long_utf8_name(void **state) {
    (void)state;
    size_t nc = 1500; /* U+00E9, two bytes each */
    char *h = malloc(2 * nc + 128);
    assert_non_null(h);
    strcpy(h, "{\"x");
    for (size_t i = 0; i < nc; i++) memcpy(h + 3 + 2 * i, "\xc3\xa9", 2);
    strcpy(h + 3 + 2 * nc, "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}");
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 4, &n);
    expect_failure("long_utf8_name", b, n, NULL, FMT, "\xc3\xa9...': data_offsets [0,4) hold 4 bytes",
                   "'x\xc3\xa9");
    free(b);
    free(h);
}

/* A long multi-byte duplicate key: jansson quotes only short tokens in its
 * error text, so the message names the problem without the key, and stays
 * valid UTF-8 (jansson's text is cut at 160 bytes). */
static void test_long_duplicate_key(void **state) {
    (void)state;
    size_t nc = 200; /* U+20AC, three bytes each */
    char *key = malloc(3 * nc + 1);
    assert_non_null(key);
    for (size_t i = 0; i < nc; i++) memcpy(key + 3 * i, "\xe2\x82\xac", 3);
    key[3 * nc] = 0;
    char *h = malloc(2 * strlen(key) + 64);
    assert_non_null(h);
    sprintf(h, "{\"%s\":{},\"%s\":{}}", key, key);
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 0, &n);
    expect_failure("long_duplicate_key", b, n, NULL, FMT, "header JSON: duplicate object key", NULL);
    free(b);
    free(h);
    free(key);
}

/* A name with a newline: the message stays on one line. */
static void test_newline_in_name(void **state) {
    (void)state;
    const char *h = "{" T("enc\\nw\\r", "F99", "[2]", "0", "8") "}";
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 8, &n);
    expect_failure("newline_in_name", b, n, NULL, FMT, "unknown dtype 'F99'", "'enc w '");
    free(b);
}

/* Other control characters (a tab, a terminal escape) reach the message
 * as they are; it still is one line naming the problem. */
static void test_control_chars_in_name(void **state) {
    (void)state;
    const char *h = "{" T("enc\\tw\\u001b[2J", "F32", "[2]", "0", "4") "}";
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 4, &n);
    expect_failure("control_chars_in_name", b, n, NULL, FMT, "hold 4 bytes, F32 shape needs 8", "'enc");
    free(b);
}

/* ---------------------------------------------------- the other outcomes */

/* Controls: files one step away from the bad cases above open fine, so the
 * failures are caused by what each case changed. */
static void test_near_misses_open(void **state) {
    (void)state;
    static const struct {
        const char *hdr;
        size_t data_n;
        uint64_t max_header;
    } OK[] = {
        {"{}", 0, 0},
        {"{" W "}   ", 8, 0},                             /* space padding after the object */
        {"{" W "}", 8, 54},                               /* header exactly at the limit */
        {"{" T("z1", "F32", "[0]", "0", "0") "," T("z2", "I8", "[3,0]", "0", "0") ","
         T("a", "F32", "[4]", "0", "16") "}", 16, 0},     /* empties share offset 0 */
        {"{" T("a", "F32", "[2]", "0", "8") "," T("z", "F32", "[0]", "8", "8") "}", 8, 0},
        {"{" T("z", "U8", "[0,4294967296,4294967296]", "0", "0") "}", 0, 0}, /* 0 first: no overflow */
        {"{" T("r8", "U8", "[1,1,1,1,1,1,1,1]", "0", "1") "}", 1, 0},        /* rank 8 is the limit */
        {"{\"__metadata__\":{}," W "}", 8, 0},
        {"{\"__METADATA__\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0},
        {"{\"\\u00e9\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0},
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        size_t n;
        unsigned char *b = build(OK[i].hdr, strlen(OK[i].hdr), 0, 0, OK[i].data_n, &n);
        const char *p = npuc_test_path("near_miss.safetensors");
        npuc_test_write_file(p, b, n);
        free(b);
        npuc_open_opts o = npuc_open_opts_defaults();
        o.max_header_bytes = OK[i].max_header;
        npuc_model *m;
        npuc_status st = npuc_model_open(ctx, p, OK[i].max_header ? &o : NULL, &m);
        if (st != NPUC_OK) print_error("control %zu: %s\n", i, npuc_ctx_errmsg(ctx));
        assert_int_equal(st, NPUC_OK);
        npuc_model_close(m);
        assert_int_equal(unlink(p), 0);
    }
}

static void test_missing_and_directory(void **state) {
    (void)state;
    npuc_model *m = (npuc_model *)&m;
    const char *p = npuc_test_path("absent.safetensors");
    assert_int_equal(npuc_model_open(ctx, p, NULL, &m), NPUC_ERR_NOT_FOUND);
    assert_null(m);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), p));
    assert_false(npuc_test_exists(p)); /* opening never creates */

    m = (npuc_model *)&m;
    const char *d = npuc_test_path("dir.safetensors");
    assert_int_equal(mkdir(d, 0700), 0);
    assert_int_equal(npuc_model_open(ctx, d, NULL, &m), NPUC_ERR_ARG);
    assert_null(m);
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), d));
    assert_non_null(strstr(npuc_ctx_errmsg(ctx), "not a regular file"));
    assert_int_equal(rmdir(d), 0);
}

static int setup(void **state) {
    (void)state;
    if (npuc_ctx_new(&ctx) != NPUC_OK) return -1;
    snprintf(g_bad_dir, sizeof g_bad_dir, "%s", npuc_test_path("bad"));
    if (mkdir(g_bad_dir, 0700) != 0) return -1;
    snprintf(g_good, sizeof g_good, "%s", npuc_test_path("good.safetensors"));
    const char *h = "{" W "}";
    size_t n;
    unsigned char *b = build(h, strlen(h), 0, 0, 8, &n);
    npuc_test_write_file(g_good, b, n);
    free(b);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    int left = count_dir(g_bad_dir);
    npuc_ctx_free(ctx);
    return left == 0 ? 0 : -1; /* every case removed its file and created none */
}

int main(void) {
    static struct CMUnitTest tests[NCASES + 8];
    size_t k = 0;
    for (size_t i = 0; i < NCASES; i++) {
        tests[k].name = CASES[i].id;
        tests[k].test_func = run_case;
        tests[k].setup_func = NULL;
        tests[k].teardown_func = NULL;
        tests[k].initial_state = (void *)&CASES[i];
        k++;
    }
    const struct CMUnitTest extra[] = {
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_long_name),
        cmocka_unit_test(test_long_utf8_name),
        cmocka_unit_test(test_newline_in_name),
        cmocka_unit_test(test_control_chars_in_name),
        cmocka_unit_test(test_long_duplicate_key),
        cmocka_unit_test(test_near_misses_open),
        cmocka_unit_test(test_missing_and_directory),
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) tests[k++] = extra[i];
    return cmocka_run_group_tests(tests, setup, teardown);
}
