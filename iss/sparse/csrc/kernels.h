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
#define BLOCK 8 /* vectors of outputs kept in registers (8 of 16 AVX2 / 32 AVX-512 registers) */

typedef float vec __attribute__((vector_size(4 * LANES)));
typedef int32_t ivec __attribute__((vector_size(4 * LANES)));

static inline vec load(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, vec v) { memcpy(p, &v, sizeof v); }
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

/* What is applied to each output after the bias: out = (relu ? max(v, 0) : v) * scale + res[same index]. */
typedef struct {
    int relu;
    float scale;
    const float *res; /* NULL, or laid out like the output */
} epilogue;

static const epilogue PLAIN = {0, 1.0f, NULL};

/* Where iss_spmm writes output (co, r, x): see at() in spmm.c. step 1: co * co + r * row + x. */
typedef struct {
    int64_t co, row, sub, step;
} layout;

void iss_spmm(float *out, layout o, const float *in, int64_t in_row, int64_t rows, int64_t width,
              int64_t cout, const int32_t *rowptr, const int32_t *off, const float *val, const float *bias,
              int accumulate, epilogue ep);
#endif
