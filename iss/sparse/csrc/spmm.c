/* Sparse x dense products behind iss.sparse, built on first use by iss/sparse/kernels.py (plain C).
 *
 * The core, iss_spmm, computes
 *   out[at(co) + r*row + x*step] = epilogue(bias[co] + sum_k val[k] * in[off[k] + r*in_row + x])
 * for co < cout, r < rows, x < width, k over the non-zeros of output row co (CSR: rowptr, off, val); with
 * `accumulate` the sum starts from the output's current value instead of the bias.
 * `off` folds the input channel and, for a convolution, the kernel tap into one element offset, so a k x k
 * conv over a zero-padded input and a channel-major Linear are the same loop. The weights of one output
 * row are streamed while 8 (AVX2) or 16 (AVX-512) vectors of outputs stay in registers: one load and one
 * FMA per non-zero and vector, instead of the load-FMA-store of an axpy; that is what makes it about 2x
 * faster than MKL's CSR product. The epilogue (ReLU, scale, residual add) is applied in registers before
 * the single store. The entry points below (iss_conv_tiles, iss_linear_tokens) first bring a cache-sized
 * piece of the input into that layout; swin.c runs transformer blocks, or their parts, on it. */
#include <math.h>

#include "kernels.h"

/* What is applied to each output after the bias: out = (relu ? max(v, 0) : v) * scale + res[same index]. */
typedef struct {
    int relu;
    float scale;
    const float *res; /* NULL, or laid out like the output */
} epilogue;

static const epilogue PLAIN = {0, 1.0f, NULL};

/* Where iss_spmm writes output (co, r, x): see at() below. step 1: co * co + r * row + x. */
typedef struct {
    int64_t co, row, sub, step;
} layout;

int iss_lanes(void) { return LANES; }

int iss_half(void)
{
#ifdef HALF /* AVX-512 only: measured faster there (Zen 5); AVX2 keeps floats */
    return 1;
#else
    return 0;
#endif
}

/* Offset of output channel co's first element: with step s > 1 the outputs go where a pixel shuffle by s
 * puts them (channel co = c s^2 + i s + j lands in channel c, sub-row i, every s-th column from j). */
static inline int64_t at(layout o, int64_t co)
{
    const int64_t s = o.step;
    return s == 1 ? co * o.co : co / (s * s) * o.co + co / s % s * o.sub + co % s;
}

static inline vec load_at(const float *p, int64_t step)
{
    if (step == 1) return load(p);
    vec v;
    for (int l = 0; l < LANES; l++) v[l] = p[l * step];
    return v;
}

static inline void store_at(float *p, vec v, int64_t step)
{
    if (step == 1) {
        store(p, v);
        return;
    }
    for (int l = 0; l < LANES; l++) p[l * step] = v[l];
}

static inline vec finish(vec v, epilogue ep, const float *res, int64_t step)
{
    if (ep.relu) v = relu(v);
    v *= ep.scale;
    return res ? v + load_at(res, step) : v;
}

/* Output row co, rows [r, r + NR), columns [x0, x1) in blocks of NB vectors: NR * NB accumulators stay in
 * registers, so each non-zero's offset and weight are read once for NR * NB loads and FMAs. */
#define BLOCKED(NAME, NR, NB, T, LOAD)                                                                       \
    static void NAME(float *out, layout o, int64_t co, int64_t r, const T *in, int64_t in_row,               \
                     int64_t x0, int64_t x1, int32_t first, int32_t last, const int32_t *off,                \
                     const float *val, float b, int accumulate, epilogue ep)                                 \
    {                                                                                                        \
        const int64_t s = o.step;                                                                            \
        float *dst = out + at(o, co) + r * o.row;                                                            \
        const float *res = ep.res ? ep.res + at(o, co) + r * o.row : NULL;                                   \
        const T *src = in + r * in_row;                                                                      \
        for (int64_t x = x0; x < x1; x += NB * LANES) {                                                      \
            vec acc[NR][NB];                                                                                 \
            for (int i = 0; i < NR; i++)                                                                     \
                for (int j = 0; j < NB; j++)                                                                 \
                    acc[i][j] = accumulate ? load_at(dst + i * o.row + (x + j * LANES) * s, s) : splat(b);   \
            for (int32_t k = first; k < last; k++) {                                                         \
                const T *p = src + off[k] + x;                                                               \
                const vec w = splat(val[k]);                                                                 \
                for (int i = 0; i < NR; i++)                                                                 \
                    for (int j = 0; j < NB; j++) acc[i][j] += w * LOAD(p + i * in_row + j * LANES);          \
            }                                                                                                \
            for (int i = 0; i < NR; i++)                                                                     \
                for (int j = 0; j < NB; j++) {                                                               \
                    const int64_t e = i * o.row + (x + j * LANES) * s;                                       \
                    store_at(dst + e, finish(acc[i][j], ep, res ? res + e : NULL, s), s);                    \
                }                                                                                            \
        }                                                                                                    \
    }
BLOCKED(wide_rows, ROWS8, 8, float, load)
BLOCKED(wide_row, 1, 8, float, load)
BLOCKED(narrow_rows, ROWS4, 4, float, load)
BLOCKED(narrow_row, 1, 4, float, load)
#ifdef HALF
BLOCKED(wide_rows_h, ROWS8, 8, half, load_half)
BLOCKED(wide_row_h, 1, 8, half, load_half)
BLOCKED(narrow_rows_h, ROWS4, 4, half, load_half)
BLOCKED(narrow_row_h, 1, 4, half, load_half)
#endif

#define SPMM(NAME, T, LOAD, SCALAR, SUFFIX)                                                                  \
void NAME(float *out, layout o, const T *in, int64_t in_row, int64_t rows, int64_t width,                    \
          int64_t cout, const int32_t *rowptr, const int32_t *off, const float *val, const float *bias,  \
          int accumulate, epilogue ep)                                                                       \
{                                                                                                            \
    const int64_t s = o.step, wide = width / (8 * LANES) * (8 * LANES);                                      \
    const int64_t narrow = wide + (width - wide) / (4 * LANES) * (4 * LANES);                                \
    for (int64_t co = 0; co < cout; co++) {                                                                  \
        const int32_t first = rowptr[co], last = rowptr[co + 1];                                             \
        const float b = bias ? bias[co] : 0.0f;                                                              \
        int64_t r = 0;                                                                                       \
        for (; r + ROWS8 <= rows; r += ROWS8)                                                                \
            wide_rows##SUFFIX(out, o, co, r, in, in_row, 0, wide, first, last, off, val, b, accumulate, ep); \
        for (; r < rows; r++)                                                                                \
            wide_row##SUFFIX(out, o, co, r, in, in_row, 0, wide, first, last, off, val, b, accumulate, ep);  \
        for (r = 0; r + ROWS4 <= rows; r += ROWS4)                                                           \
            narrow_rows##SUFFIX(out, o, co, r, in, in_row, wide, narrow, first, last, off, val, b,           \
                                accumulate, ep);                                                             \
        for (; r < rows; r++)                                                                                \
            narrow_row##SUFFIX(out, o, co, r, in, in_row, wide, narrow, first, last, off, val, b,            \
                               accumulate, ep);                                                              \
        if (narrow == width) continue;                                                                       \
        for (r = 0; r < rows; r++) { /* the last columns: one vector, then one float at a time */            \
            const T *src = in + r * in_row;                                                                  \
            float *dst = out + at(o, co) + r * o.row;                                                        \
            const float *res = ep.res ? ep.res + at(o, co) + r * o.row : NULL;                               \
            int64_t x = narrow;                                                                              \
            for (; x + LANES <= width; x += LANES) {                                                         \
                vec acc = accumulate ? load_at(dst + x * s, s) : splat(b);                                   \
                for (int32_t k = first; k < last; k++) acc += splat(val[k]) * LOAD(src + off[k] + x);        \
                store_at(dst + x * s, finish(acc, ep, res ? res + x * s : NULL, s), s);                      \
            }                                                                                                \
            for (; x < width; x++) {                                                                         \
                float acc = accumulate ? dst[x * s] : b;                                                     \
                for (int32_t k = first; k < last; k++) acc += val[k] * SCALAR(src[off[k] + x]);              \
                if (ep.relu && acc < 0.0f) acc = 0.0f;                                                       \
                dst[x * s] = acc * ep.scale + (res ? res[x * s] : 0.0f);                                     \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
}
static inline float identity(float f) { return f; }
SPMM(iss_spmm, float, load, identity, )
#ifdef HALF
SPMM(spmm_half, half, load_half, half_to_float, _h)
#endif

/* iss_spmm on a tile buffer of floats, or of halves where `half_tiles` says so (and the CPU has them). */
static void spmm_any(int64_t half_tiles, float *out, layout o, const float *buf, int64_t in_row, int64_t rows,
                     int64_t width, int64_t cout, const int32_t *rowptr, const int32_t *off, const float *val,
                     const float *bias, int accumulate, epilogue ep)
{
#ifdef HALF
    if (half_tiles) {
        spmm_half(out, o, (const half *)buf, in_row, rows, width, cout, rowptr, off, val, bias, accumulate,
                  ep);
        return;
    }
#endif
    iss_spmm(out, o, buf, in_row, rows, width, cout, rowptr, off, val, bias, accumulate, ep);
}

/* One padded row of a tile: `lead` zeros, n inputs from row (every xs-th; NULL: a row outside the image,
 * all zeros), zeros up to tw. */
static void fill(float *dst, const float *row, int64_t xs, int64_t lead, int64_t n, int64_t tw)
{
    if (!row) {
        memset(dst, 0, tw * sizeof *dst);
        return;
    }
    memset(dst, 0, lead * sizeof *dst);
    if (xs == 1)
        memcpy(dst + lead, row, n * sizeof *dst);
    else
        for (int64_t x = 0; x < n; x++) dst[lead + x] = row[x * xs];
    memset(dst + lead + n, 0, (tw - lead - n) * sizeof *dst);
}

#ifdef HALF
/* fill() into halves; 0 if an input is beyond half's range (65504): the caller then redoes it in floats. */
static int fill_half(half *dst, const float *row, int64_t xs, int64_t lead, int64_t n, int64_t tw)
{
    if (!row) {
        memset(dst, 0, tw * sizeof *dst);
        return 1;
    }
    memset(dst, 0, lead * sizeof *dst);
    float big = 0.0f;
    int64_t x = 0;
    if (xs == 1) {
        __m512 m = _mm512_setzero_ps();
        for (; x + 16 <= n; x += 16) {
            const __m512 v = _mm512_loadu_ps(row + x);
            m = _mm512_max_ps(m, _mm512_abs_ps(v));
            _mm256_storeu_si256((__m256i *)(dst + lead + x), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        }
        big = _mm512_reduce_max_ps(m);
    }
    for (; x < n; x++) {
        const float v = row[x * xs];
        big = fabsf(v) > big ? fabsf(v) : big;
        dst[lead + x] = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    }
    memset(dst + lead + n, 0, (tw - lead - n) * sizeof *dst);
    return big <= 65504.0f; /* NaN inputs also fail the test: the float path keeps them as they are */
}
#endif

/* The s output channels that a pixel shuffle by s interleaves along one output row (channel c s^2 + i s + j
 * goes to every s-th column from j): computed contiguously into tmp[s][n][width], then interleaved into out
 * with `res` added, so the kernel's stores stay whole vectors. rowptr, bias start at the first of them. */
static void shuffled(float *out, layout o, const float *res, int64_t n, int64_t width, const float *buf,
                     int64_t ld, int64_t s, int64_t groups, int64_t cout, const int32_t *rowptr,
                     const int32_t *off, const float *val, const float *bias, int64_t relu, float scale,
                     float *tmp, int64_t half_tiles)
{
    const layout t = {n * width, width, 0, 1};
    const epilogue ep = {(int)relu, scale, NULL};
    for (int64_t g = 0; g < groups; g++)
        spmm_any(half_tiles, tmp, t, buf, ld, n, width, s, rowptr + g * cout, off, val, bias, g > 0,
                 g == groups - 1 ? ep : PLAIN);
    for (int64_t r = 0; r < n; r++) {
        int64_t x = 0;
        if (s == 2) /* the usual x2 / x4 upsamplers: zip two vectors into two */
            for (; x + LANES <= width; x += LANES) {
                const vec a = load(tmp + r * width + x), b = load(tmp + t.co + r * width + x);
                const int64_t e = r * o.row + 2 * x;
                const vec lo = __builtin_shufflevector(a, b, ZIP_LO);
                const vec hi = __builtin_shufflevector(a, b, ZIP_HI);
                store(out + e, res ? lo + load(res + e) : lo);
                store(out + e + LANES, res ? hi + load(res + e + LANES) : hi);
            }
        for (; x < width; x++)
            for (int64_t j = 0; j < s; j++) {
                const int64_t e = r * o.row + x * s + j;
                out[e] = tmp[j * t.co + r * width + x] + (res ? res[e] : 0.0f);
            }
    }
}

/* Rows [r0, r1) x columns [c0, c1) of a k x k 'same' convolution (p = k / 2) of one image in (element
 * (c, y, x) at in[c*cs + y*ys + x*xs]: any layout) into contiguous out[cout][h][w], `rows` output rows at a
 * time: copy the input they read, zero-padded, into buf[cin][plane] (rows + 2p rows of c1 - c0 + 2p floats,
 * `ld` apart), which stays in cache, then run iss_spmm on it. `channels` (or NULL: 0..cin-1) lists the input
 * channels the weights read; `off` is computed for this plane and ld. The weights come in `groups` CSR
 * matrices of cout rows (rowptr has groups * cout + 1 entries), each reading a range of input channels: one
 * group's part of the buffer stays in L1/L2 while all outputs accumulate it. The epilogue's `res` (NULL, or
 * a contiguous tensor shaped like out) is added after ReLU and scaling, after the last group. With
 * `shuffle` s > 1, out is the pixel-shuffled [cout / s^2][h s][w s] instead, and buf holds s * rows *
 * (c1 - c0) more floats after the tile. */
void iss_conv_tiles(float *out, const float *in, int64_t cs, int64_t ys, int64_t xs, const int64_t *channels,
                    int64_t cin, int64_t h, int64_t w, int64_t p, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1, int64_t rows, float *buf, int64_t plane, int64_t ld, int64_t cout,
                    int64_t groups, const int32_t *rowptr, const int32_t *off, const float *val,
                    const float *bias, int64_t relu, float scale, const float *res, int64_t shuffle,
                    int64_t half_tiles)
{
    const int64_t tw = c1 - c0 + 2 * p;                   /* padded tile width */
    const int64_t x0 = c0 - p < 0 ? 0 : c0 - p;           /* input columns copied: [x0, x1) */
    const int64_t x1 = c1 + p > w ? w : c1 + p;
    const int64_t lead = x0 - (c0 - p);
    float *tmp = buf + cin * plane; /* shuffle > 1: tmp[shuffle][rows][c1 - c0] after the tile */
    for (int64_t top = r0; top < r1; top += rows) {
        const int64_t n = r1 - top < rows ? r1 - top : rows;
        int64_t halves = half_tiles; /* this tile's inputs as halves, unless one is too large for them */
        for (int64_t c = 0; c < cin; c++) {
            const float *src = in + (channels ? channels[c] : c) * cs;
            for (int64_t j = 0; j < n + 2 * p; j++) {
                const int64_t y = top - p + j;
                const float *row = y < 0 || y >= h ? NULL : src + y * ys + x0 * xs;
#ifdef HALF
                if (halves && fill_half((half *)buf + c * plane + j * ld, row, xs, lead, x1 - x0, tw))
                    continue;
                if (halves) { /* start again in floats */
                    halves = 0, c = -1;
                    break;
                }
#endif
                fill(buf + c * plane + j * ld, row, xs, lead, x1 - x0, tw);
            }
        }
        const int64_t s = shuffle, row = s * s * w; /* one input row: s output rows of w s */
        const layout o = {h * w * s * s, row, w * s, s};
        const int64_t first = top * row + c0 * s;
        const epilogue ep = {(int)relu, scale, res ? res + first : NULL};
        if (s == 1)
            for (int64_t g = 0; g < groups; g++)
                spmm_any(halves, out + first, o, buf, ld, n, c1 - c0, cout, rowptr + g * cout, off, val, bias,
                         g > 0, g == groups - 1 ? ep : PLAIN);
        else
            for (int64_t co = 0; co < cout; co += s)
                shuffled(out + first + at(o, co), o, ep.res ? ep.res + at(o, co) : NULL, n, c1 - c0, buf, ld,
                         s, groups, cout, rowptr + co, off, val, bias ? bias + co : NULL, relu, scale, tmp,
                         halves);
    }
}

/* Tokens [t0, t1) of a Linear layer on token-major in[tokens][cin] into token-major out[tokens][cout],
 * `ld` tokens at a time: transpose them into buf (cin rows `ld` apart), run iss_spmm into the cout rows
 * after them, and transpose those back out.
 * Both transposes stay in cache, and the rest of the model keeps its token-major layout. `off` holds
 * channel * ld. */
void iss_linear_tokens(float *out, const float *in, int64_t cin, int64_t cout, int64_t t0, int64_t t1,
                       float *buf, int64_t ld, const int32_t *rowptr, const int32_t *off, const float *val,
                       const float *bias)
{
    float *xt = buf, *yt = buf + cin * ld;
    for (int64_t first = t0; first < t1; first += ld) {
        const int64_t n = t1 - first < ld ? t1 - first : ld;
        transpose_matrix(xt, ld, in + first * cin, cin, n, cin);
        iss_spmm(yt, (layout){ld, 0, 0, 1}, xt, 0, 1, n, cout, rowptr, off, val, bias, 0, PLAIN);
        transpose_matrix(out + first * cout, cout, yt, ld, cout, n);
    }
}
