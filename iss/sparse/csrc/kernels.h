/* Shared by the kernels behind iss.sparse (plain C with GCC/Clang vector extensions, no Python API). */
#ifndef ISS_KERNELS_H
#define ISS_KERNELS_H
#include <stdint.h>
#include <string.h>

/* The CPU's native vector width: wider vectors than the registers (e.g. 16 floats on AVX2) are split by the
 * compiler through the stack, which made the kernel ~8x slower there. */
#if defined(__AVX__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
/* Rows of outputs computed together, for blocks of 8 and of 4 vectors: 16 accumulators of AVX-512's 32
 * registers, 8 of AVX2's 16. */
#define ROWS8 (LANES == 16 ? 2 : 1)
#define ROWS4 (LANES == 16 ? 4 : 2)

/* Lane orders that interleave two vectors a, b: a0 b0 a1 b1 ... (low half), then the high half. */
#if LANES == 16
#define ZIP_LO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define ZIP_HI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif LANES == 8
#define ZIP_LO 0, 8, 1, 9, 2, 10, 3, 11
#define ZIP_HI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define ZIP_LO 0, 4, 1, 5
#define ZIP_HI 2, 6, 3, 7
#endif

typedef float vec __attribute__((vector_size(4 * LANES)));
typedef int32_t ivec __attribute__((vector_size(4 * LANES)));

static inline vec load(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, vec v) { memcpy(p, &v, sizeof v); }
#if LANES == 16 && defined(__F16C__) /* conv inputs as IEEE halves: half the bytes to bring from L2 per FMA */
#define HALF 1
typedef uint16_t half;
static inline float half_to_float(half h) { return _cvtsh_ss(h); }
static inline vec load_half(const half *p)
{
    return (vec)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
#endif
/* The first `count` floats at p (count <= LANES) in a vector, the rest 0: one masked load on AVX-512 (a
 * memcpy per token row cost a fifth of CAT's window attention), else memcpy. */
static inline vec load_first(const float *p, int count)
{
#if LANES == 16
    return (vec)_mm512_maskz_loadu_ps((__mmask16)((1u << count) - 1), p);
#else
    if (count == LANES) return load(p);
    vec v = {0};
    memcpy(&v, p, count * sizeof(float));
    return v;
#endif
}
static inline vec splat(float f) { return (vec){0} + f; }
static inline vec relu(vec v) { return (vec)((ivec)v & (v > 0)); }
#if LANES == 16
static inline vec vmax(vec a, vec b) { return (vec)_mm512_max_ps((__m512)a, (__m512)b); }
static inline vec vmin(vec a, vec b) { return (vec)_mm512_min_ps((__m512)a, (__m512)b); }
#elif LANES == 8
static inline vec vmax(vec a, vec b) { return (vec)_mm256_max_ps((__m256)a, (__m256)b); }
static inline vec vmin(vec a, vec b) { return (vec)_mm256_min_ps((__m256)a, (__m256)b); }
#else /* portable select: the comparison gives all-ones lanes where true */
static inline vec vmax(vec a, vec b) { return (vec)(((ivec)a & (a > b)) | ((ivec)b & ~(a > b))); }
static inline vec vmin(vec a, vec b) { return (vec)(((ivec)a & (a < b)) | ((ivec)b & ~(a < b))); }
#endif

/* Transposes a LANES x LANES block in registers: log2(LANES) rounds that interleave rows k and
 * k + LANES / 2 into rows 2k and 2k + 1 (a perfect shuffle, which repeated log2(LANES) times transposes). */
static inline void transpose(vec *r)
{
    for (int round = 1; round < LANES; round *= 2) {
        vec t[LANES];
        for (int k = 0; k < LANES / 2; k++) {
            t[2 * k] = __builtin_shufflevector(r[k], r[k + LANES / 2], ZIP_LO);
            t[2 * k + 1] = __builtin_shufflevector(r[k], r[k + LANES / 2], ZIP_HI);
        }
        memcpy(r, t, sizeof t);
    }
}

/* dst[c * dst_row + r] = src[r * src_row + c] for r < rows, c < cols: a matrix transposed, LANES x LANES
 * blocks in registers, the edges element by element (scalar loops took about as long as the products of
 * CAT's widest Linears). */
static inline void transpose_matrix(float *dst, int64_t dst_row, const float *src, int64_t src_row, int64_t rows,
                             int64_t cols)
{
    int64_t r = 0;
    for (; r + LANES <= rows; r += LANES) {
        int64_t c = 0;
        for (; c + LANES <= cols; c += LANES) {
            vec v[LANES];
            for (int k = 0; k < LANES; k++) v[k] = load(src + (r + k) * src_row + c);
            transpose(v);
            for (int k = 0; k < LANES; k++) store(dst + (c + k) * dst_row + r, v[k]);
        }
        for (; c < cols; c++)
            for (int k = 0; k < LANES; k++) dst[c * dst_row + r + k] = src[(r + k) * src_row + c];
    }
    for (; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * dst_row + r] = src[r * src_row + c];
}

/* Exact (erf) GELU, x * (1 + erf(x / sqrt 2)) / 2, with Abramowitz & Stegun 7.1.28 for erf: erf(z) =
 * 1 - 1 / (1 + a1 z + ... + a6 z^6)^16 for z >= 0, odd. Half the operations of 7.1.26, which needs an exp;
 * in float32 within 8.7e-7 of the exact GELU on [-12, 12], PyTorch's own within 1.2e-6
 * (benchmarks/gelu_error.py). */
static inline vec gelu(vec x)
{
    const vec u = x * 0.70710678118654752f;
    const ivec sign = (ivec)u & (int32_t)0x80000000;
    const vec z = (vec)((ivec)u & 0x7fffffff);
    vec p = splat(0.0000430638f);
    p = p * z + 0.0002765672f;
    p = p * z + 0.0001520143f;
    p = p * z + 0.0092705272f;
    p = p * z + 0.0422820123f;
    p = p * z + 0.0705230784f;
    p = p * z + 1.0f;
    p *= p; /* ^16; beyond z ~ 15 it overflows to inf, and erf to 1 */
    p *= p;
    p *= p;
    p *= p;
    const vec e = 1.0f - 1.0f / p;
    return 0.5f * x * (1.0f + (vec)((ivec)e | sign));
}

#endif
