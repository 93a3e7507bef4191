/* A whole Swin transformer block (SwinIR's SwinTransformerBlock, inference) per attention window, in one
 * pass: gather the window's tokens (cyclic shift folded into the indexing), LayerNorm, sparse qkv, per-head
 * softmax(q k^T + position bias + mask) v, sparse proj, residual, LayerNorm, sparse fc1, GELU, sparse fc2,
 * residual, scatter back. The window (64 tokens x 60 channels for SwinIR-light) stays channel-major in a
 * buffer that fits a core's L2 cache, so the block reads and writes its tokens once instead of ~15 times
 * for PyTorch's op-by-op execution, and no (windows x heads x N x N) attention tensor is ever stored.
 * CAT's block, whose two halves attend in different windows, runs its parts the same way: the attention per
 * window (iss_window_attention), the MLP half per chunk of tokens (iss_mlp_tokens). */
#include <math.h>

#include "kernels.h"

typedef struct {
    const int32_t *rowptr, *off; /* CSR with offsets = input channel * N (channel-major, N tokens) */
    const float *val, *bias;
} csr;

typedef struct {
    int64_t h, w, c, ws, shift, heads, hidden;
    const float *norm1_w, *norm1_b, *norm2_w, *norm2_b;
    float eps1, eps2;
    csr qkv, proj, fc1, fc2;    /* qkv's query rows (weights and bias) pre-multiplied by head_dim^-0.5 */
    const float *position_bias; /* [heads][N][N], transposed: [h][key][query] */
    const float *mask; /* NULL (no shift) or [4][N][N], transposed likewise: windows of the last column (1),
                        * the last row (2), both (3); the cyclic shift mixes regions in no other window */
} swin_block;

/* exp(x) for x <= 0: n = round(x / ln 2), r = x - n ln 2 in two parts (Cephes' reduction and polynomial,
 * relative error ~1e-7), exp(r) = 1 + r (1 + r P(r)) by Horner, times 2^n (AVX-512's scalef, else through
 * the exponent bits). */
static inline vec vexp(vec x)
{
    x = vmax(x, splat(-87.3365447504f)); /* below: 0 (the smallest normal float), not a wrapped exponent */
#if LANES == 16
    const vec n = (vec)_mm512_roundscale_ps((__m512)(x * 1.44269504088896341f), _MM_FROUND_TO_NEAREST_INT);
#else
    const vec n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
#endif
    const vec r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vec p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = r * (r * p + 1.0f) + 1.0f;
#if LANES == 16
    return (vec)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
    return p * (vec)((__builtin_convertvector(n, ivec) + 127) << 23);
#endif
}

static inline vec vsqrt(vec x)
{
#if LANES == 16
    return (vec)_mm512_sqrt_ps((__m512)x);
#elif LANES == 8
    return (vec)_mm256_sqrt_ps((__m256)x);
#else
    for (int l = 0; l < LANES; l++) x[l] = sqrtf(x[l]);
    return x;
#endif
}

/* Mean and 1 / standard deviation over the c channels of LANES tokens, channel-major (rows n apart). */
static inline void token_stats(const float *src, int64_t c, int64_t n, float eps, vec *mean, vec *rstd)
{
    vec sum = {0}, var = {0};
    for (int64_t ch = 0; ch < c; ch++) sum += load(src + ch * n);
    *mean = sum / (float)c;
    for (int64_t ch = 0; ch < c; ch++) {
        const vec d = load(src + ch * n) - *mean;
        var += d * d;
    }
    *rstd = 1.0f / vsqrt(var / (float)c + eps);
}

/* LayerNorm over the c channels of each of n tokens, channel-major (rows n apart). */
static void layer_norm(float *dst, const float *src, int64_t c, int64_t n, const float *g, const float *b,
                       float eps)
{
    for (int64_t t = 0; t < n; t += LANES) {
        vec mean, rstd;
        token_stats(src + t, c, n, eps, &mean, &rstd);
        for (int64_t ch = 0; ch < c; ch++)
            store(dst + ch * n + t, (load(src + ch * n + t) - mean) * rstd * g[ch] + b[ch]);
    }
}

#define BY_COUNT_MOST 12 /* the largest count BY_COUNT (below) passes: the blocks size accumulators by it */

/* Rows [j, j + count) of the transposed scores for queries [i, i + LANES): bias (+ mask) + k q^T. `count`
 * is a constant after inlining, so the accumulators stay in registers and the d-long sums run in parallel. */
static inline __attribute__((always_inline)) void scores_block(vec *scores, const float *q, const float *k,
                                                               int64_t d, int64_t n, int64_t i, int64_t j,
                                                               const float *bias, const float *mask,
                                                               const int count)
{
    vec acc[BY_COUNT_MOST];
    for (int r = 0; r < count; r++) {
        acc[r] = load(bias + (j + r) * n + i);
        if (mask) acc[r] += load(mask + (j + r) * n + i);
    }
    for (int64_t e = 0; e < d; e++) {
        const vec qe = load(q + e * n + i);
        for (int r = 0; r < count; r++) acc[r] += k[e * n + j + r] * qe;
    }
    for (int r = 0; r < count; r++) scores[j + r] = acc[r];
}

/* Output channels [e, e + count) for queries [i, i + LANES): sum over keys of v * probabilities, / sum. */
static inline __attribute__((always_inline)) void values_block(float *out, const float *v, const vec *p,
                                                               int64_t n, int64_t i, int64_t e, vec inv,
                                                               const int count)
{
    vec acc[BY_COUNT_MOST] = {{0}};
    for (int64_t j = 0; j < n; j++)
        for (int r = 0; r < count; r++) acc[r] += v[(e + r) * n + j] * p[j];
    for (int r = 0; r < count; r++) store(out + (e + r) * n + i, acc[r] * inv);
}

/* call(count) with count = min(left, most) (most <= BY_COUNT_MOST), a constant in each branch */
#define BY_COUNT(call, left, most)                  \
    switch ((left) < (most) ? (left) : (most)) {    \
    case 1: call(1); break;                         \
    case 2: call(2); break;                         \
    case 3: call(3); break;                         \
    case 4: call(4); break;                         \
    case 5: call(5); break;                         \
    case 6: call(6); break;                         \
    case 7: call(7); break;                         \
    case 8: call(8); break;                         \
    case 9: call(9); break;                         \
    case 10: call(10); break;                       \
    case 11: call(11); break;                       \
    default: call(12); break;                       \
    }

/* softmax(q k^T + bias) v for one head of one window: q, k, v are [d][n] channel-major rows, bias
 * (+ mask) [n][n] transposed; out [d][n]. Queries run in vector lanes, so the softmax over keys is
 * element-wise across the `scores` rows [n][LANES]. */
static void attend(float *out, const float *q, const float *k, const float *v, int64_t d, int64_t n,
                   const float *bias, const float *mask, vec *scores)
{
    for (int64_t i = 0; i < n; i += LANES) {
        for (int64_t j = 0; j < n;) {
            const int64_t left = n - j;
#define SCORES(count) (scores_block(scores, q, k, d, n, i, j, bias, mask, count), j += count)
            BY_COUNT(SCORES, left, 8)
#undef SCORES
        }
        vec top = scores[0];
        for (int64_t j = 1; j < n; j++) top = vmax(top, scores[j]);
        vec sum = {0};
        for (int64_t j = 0; j < n; j++) {
            scores[j] = vexp(scores[j] - top);
            sum += scores[j];
        }
        const vec inv = 1.0f / sum;
        for (int64_t e = 0; e < d;) {
            const int64_t left = d - e;
            /* all of a head's channels in one pass over the probabilities up to 12; 14 = 7 + 7 rather
             * than 12 + 2: few sums are latency-bound */
            const int64_t even = left > 12 && left < 24 ? (left + 1) / 2 : left;
#define VALUES(count) (values_block(out, v, scores, n, i, e, inv, count), e += count)
            BY_COUNT(VALUES, even, 12)
#undef VALUES
        }
    }
}

/* Vectors of outputs one pass over a row's non-zeros computes: 4 x 16 floats fill an 8x8 window on AVX-512;
 * AVX2's and SSE's 16 registers hold 8 accumulators. */
#define LINEAR_BLOCK (LANES == 16 ? 4 : 8)

/* Outputs [t, t + count * LANES) of output row co: bias + sum over the row's non-zeros k of
 * val[k] * in[off[k] + t...] (+ res at the same place). */
static inline __attribute__((always_inline)) void linear_block(float *out, const float *in, int64_t n,
                                                               const csr *wt, const float *res, int64_t co,
                                                               int64_t t, const int count)
{
    const vec b = splat(wt->bias ? wt->bias[co] : 0.0f);
    vec acc[LINEAR_BLOCK];
    for (int j = 0; j < count; j++) acc[j] = b;
    for (int32_t k = wt->rowptr[co]; k < wt->rowptr[co + 1]; k++) {
        const float *p = in + wt->off[k] + t;
        const vec w = splat(wt->val[k]);
        for (int j = 0; j < count; j++) acc[j] += w * load(p + j * LANES);
    }
    for (int j = 0; j < count; j++) {
        const int64_t at = co * n + t + j * LANES;
        store(out + at, res ? acc[j] + load(res + at) : acc[j]);
    }
}

/* out[co][t] = the sparse Linear of the n channel-major tokens of a window (n a multiple of LANES), + res
 * when given (it may be `out`: each output reads only its own residual). Its own loop rather than
 * iss_spmm's: at 95% zeros a row has ~3 non-zeros, and the general kernel's set-up per row cost more than
 * its products. */
static void linear(float *out, const float *in, int64_t cout, int64_t n, const csr *wt, const float *res)
{
    for (int64_t co = 0; co < cout; co++) {
        int64_t t = 0;
        for (; t + LINEAR_BLOCK * LANES <= n; t += LINEAR_BLOCK * LANES)
            linear_block(out, in, n, wt, res, co, t, LINEAR_BLOCK);
        for (; t < n; t += LANES) linear_block(out, in, n, wt, res, co, t, 1);
    }
}

/* The window's tokens, rows of c channels starting at in + at[i] (i < n), into channel-major x[ch][i], a
 * LANES x LANES block at a time (transposed in registers; scalar strided stores cost 2x the block). */
static void gather_window(float *x, const float *in, const int32_t *at, int64_t c, int64_t n)
{
    for (int64_t i = 0; i < n; i += LANES)
        for (int64_t ch = 0; ch < c; ch += LANES) {
            const int64_t count = c - ch < LANES ? c - ch : LANES;
            vec r[LANES];
            for (int k = 0; k < LANES; k++) r[k] = load_first(in + at[i + k] + ch, (int)count);
            transpose(r);
            for (int64_t j = 0; j < count; j++) store(x + (ch + j) * n + i, r[j]);
        }
}

/* The inverse: channel-major x[ch][i] back into the token rows at out + at[i] (plain loops: measured faster
 * here than the transposes). */
static void scatter_window(float *out, const float *x, const int32_t *at, int64_t c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++) out[at[i] + ch] = x[ch * n + i];
}

/* The next window to run: w + 1, or with `next` the one claimed from the counter that the threads splitting
 * the windows share (one at a time, so a thread slowed by another process simply runs fewer of them). */
static inline int64_t next_window(int64_t *next, int64_t w)
{
    return next ? __atomic_fetch_add(next, 1, __ATOMIC_RELAXED) : w + 1;
}

/* Windows [w0, w1) (row-major window order) of one image, or with `next` (holding w0 before the first
 * thread starts) those of them this thread claims: in and out are token-major [h*w][c] (different tensors).
 * `buf` holds n * (7c + hidden + LANES) floats, n = ws * ws (a multiple of LANES). */
void iss_swin_windows(float *out, const float *in, const swin_block *b, int64_t w0, int64_t w1, float *buf,
                      int64_t *next)
{
    const int64_t c = b->c, n = b->ws * b->ws, d = c / b->heads, across = b->w / b->ws;
    float *x = buf, *t = x + c * n, *qkv = t + c * n, *o = qkv + 3 * c * n, *hid = o + c * n;
    vec *scores = (vec *)(hid + b->hidden * n); /* n vectors; memcpy-based loads keep this alignment-free */
    int32_t at[n]; /* where each token's row starts in `in` and `out` (swin_windows checks h*w*c < 2^31) */
    for (int64_t wi = next ? next_window(next, 0) : w0; wi < w1; wi = next_window(next, wi)) {
        const int64_t wy = wi / across * b->ws, wx = wi % across * b->ws;
        const int64_t kind = 2 * (wy + b->ws == b->h) + (wx + b->ws == b->w);
        const float *mask = b->mask && kind ? b->mask + kind * n * n : NULL;
        for (int64_t r = 0, i = 0; r < b->ws; r++) { /* the cyclic shift wraps at most once: no divisions */
            const int64_t y = wy + r + b->shift < b->h ? wy + r + b->shift : wy + r + b->shift - b->h;
            for (int64_t col = 0; col < b->ws; col++, i++) {
                const int64_t xx = wx + col + b->shift;
                at[i] = (int32_t)((y * b->w + (xx < b->w ? xx : xx - b->w)) * c);
            }
        }
        gather_window(x, in, at, c, n);
        layer_norm(t, x, c, n, b->norm1_w, b->norm1_b, b->eps1);
        linear(qkv, t, 3 * c, n, &b->qkv, NULL);
        for (int64_t hh = 0; hh < b->heads; hh++) {
            const float *q = qkv + hh * d * n;
            attend(o + hh * d * n, q, q + c * n, q + 2 * c * n, d, n, b->position_bias + hh * n * n, mask,
                   scores);
        }
        linear(x, o, c, n, &b->proj, x); /* x += proj(o), in place: each output reads only its own input */
        layer_norm(t, x, c, n, b->norm2_w, b->norm2_b, b->eps2);
        linear(hid, t, b->hidden, n, &b->fc1, NULL);
        for (int64_t k = 0; k < b->hidden * n; k += LANES) store(hid + k, gelu(load(hid + k)));
        linear(x, hid, c, n, &b->fc2, x);
        scatter_window(out, x, at, c, n);
    }
}

/* out[t][ch] = x[t][ch] + y[ch][t] for tokens [t0, t1) of n, channels c: the residual of SwinIR's residual
 * groups, token-major, added to its conv's channel-major output, a LANES x LANES block at a time transposed
 * in registers (torch's add of the transposed view ran ~6x slower). out may be x. */
void iss_add_tokens(float *out, const float *x, const float *y, int64_t c, int64_t n, int64_t t0, int64_t t1)
{
    int64_t t = t0;
    for (; t + LANES <= t1; t += LANES) {
        int64_t ch = 0;
        for (; ch + LANES <= c; ch += LANES) {
            vec r[LANES];
            for (int j = 0; j < LANES; j++) r[j] = load(y + (ch + j) * n + t);
            transpose(r);
            for (int k = 0; k < LANES; k++) {
                const int64_t at = (t + k) * c + ch;
                store(out + at, r[k] + load(x + at));
            }
        }
        for (; ch < c; ch++)
            for (int64_t k = 0; k < LANES; k++)
                out[(t + k) * c + ch] = x[(t + k) * c + ch] + y[ch * n + t + k];
    }
    for (; t < t1; t++)
        for (int64_t ch = 0; ch < c; ch++) out[t * c + ch] = x[t * c + ch] + y[ch * n + t];
}

/* out[t][ch] = LayerNorm over the c channels of token t of the channel-major image y[ch][t] (n tokens), with
 * weight g and bias b, for tokens [t0, t1): SwinIR's patch embedding in one pass, where torch made a
 * transposed copy and then normalised it. A block of LANES tokens is normalised with tokens in lanes, then
 * transposed LANES x LANES in registers. */
void iss_norm_tokens(float *out, const float *y, const float *g, const float *b, float eps, int64_t c, int64_t n,
                     int64_t t0, int64_t t1)
{
    float tmp[c * LANES];
    int64_t t = t0;
    for (; t + LANES <= t1; t += LANES) {
        vec mean, rstd;
        token_stats(y + t, c, n, eps, &mean, &rstd);
        for (int64_t ch = 0; ch < c; ch++)
            store(tmp + ch * LANES, (load(y + ch * n + t) - mean) * rstd * g[ch] + b[ch]);
        int64_t ch = 0;
        for (; ch + LANES <= c; ch += LANES) {
            vec r[LANES];
            for (int j = 0; j < LANES; j++) r[j] = load(tmp + (ch + j) * LANES);
            transpose(r);
            for (int k = 0; k < LANES; k++) store(out + (t + k) * c + ch, r[k]);
        }
        for (; ch < c; ch++)
            for (int k = 0; k < LANES; k++) out[(t + k) * c + ch] = tmp[ch * LANES + k];
    }
    for (; t < t1; t++) {
        float mean = 0, var = 0;
        for (int64_t ch = 0; ch < c; ch++) mean += y[ch * n + t];
        mean /= (float)c;
        for (int64_t ch = 0; ch < c; ch++) var += (y[ch * n + t] - mean) * (y[ch * n + t] - mean);
        const float rstd = 1.0f / sqrtf(var / (float)c + eps);
        for (int64_t ch = 0; ch < c; ch++) out[t * c + ch] = (y[ch * n + t] - mean) * rstd * g[ch] + b[ch];
    }
}

/* Windowed multi-head attention alone (CAT's rectangle windows), on one image's token-major rows of queries,
 * keys and values: per window, gather its tokens' q, k and v channel-major (the cyclic shift folded into the
 * indexing), softmax(q k^T * scale + position bias + mask) v per head, scatter the result back to the
 * tokens' rows. Torch's roll, window partition, stored (windows x heads x N x N) scores and copies back are
 * what this replaces. */
typedef struct {
    int64_t h, w, wh, ww, sy, sx, heads, d; /* image, window, shift; heads x head dim channels */
    int64_t in_row, out_row, k_at, v_at;    /* floats between tokens in qkv and out; keys' and values' offset */
    float scale;
    const float *position_bias; /* [heads][N][N], transposed: [h][key][query] */
    const float *mask;          /* NULL (no shift) or [4][N][N], as swin_block's */
} window_attention;

/* Windows [w0, w1) of one image, or with `next` those this thread claims (as iss_swin_windows). `buf` holds
 * 4 * heads * d * n + n * LANES floats, n = wh * ww (a multiple of LANES). */
void iss_window_attention(float *out, const float *qkv, const window_attention *a, int64_t w0, int64_t w1,
                          float *buf, int64_t *next)
{
    const int64_t c = a->heads * a->d, n = a->wh * a->ww, across = a->w / a->ww;
    float *q = buf, *k = q + c * n, *v = k + c * n, *o = v + c * n;
    vec *scores = (vec *)(o + c * n);
    int32_t in_at[n], out_at[n]; /* where each token's row starts in qkv and in out (checked < 2^31) */
    for (int64_t wi = next ? next_window(next, 0) : w0; wi < w1; wi = next_window(next, wi)) {
        const int64_t wy = wi / across * a->wh, wx = wi % across * a->ww;
        const int64_t kind = 2 * (wy + a->wh == a->h) + (wx + a->ww == a->w);
        const float *mask = a->mask && kind ? a->mask + kind * n * n : NULL;
        for (int64_t r = 0, i = 0; r < a->wh; r++) {
            const int64_t y = wy + r + a->sy < a->h ? wy + r + a->sy : wy + r + a->sy - a->h;
            for (int64_t col = 0; col < a->ww; col++, i++) {
                const int64_t x = wx + col + a->sx, t = y * a->w + (x < a->w ? x : x - a->w);
                in_at[i] = (int32_t)(t * a->in_row);
                out_at[i] = (int32_t)(t * a->out_row);
            }
        }
        gather_window(q, qkv, in_at, c, n);
        gather_window(k, qkv + a->k_at, in_at, c, n);
        gather_window(v, qkv + a->v_at, in_at, c, n);
        for (int64_t e = 0; e < c * n; e += LANES) store(q + e, load(q + e) * a->scale);
        for (int64_t hh = 0; hh < a->heads; hh++) {
            const int64_t at = hh * a->d * n;
            attend(o + at, q + at, k + at, v + at, a->d, n, a->position_bias + hh * n * n, mask, scores);
        }
        scatter_window(out, o, out_at, c, n);
    }
}

/* A transformer block's MLP half on its own (CAT's, whose attention runs per window of half the channels). */
typedef struct {
    int64_t c, hidden;
    const float *norm_w, *norm_b;
    float eps;
    csr fc1, fc2; /* offsets = input channel * ld, the buffer's row length */
} mlp_block;

/* out[t] = in[t] + fc2(GELU(fc1(LayerNorm(in[t])))) for tokens [t0, t1) of token-major rows of c channels, ld
 * tokens at a time (a multiple of LANES) transposed into buf, so that the hidden layer, 4c wide for CAT,
 * never leaves cache: the per-layer path wrote it out and read it back, the model's largest tensor. buf
 * holds (2c + hidden) * ld floats; out may be in. A last partial chunk is padded with zero tokens. */
void iss_mlp_tokens(float *out, const float *in, const mlp_block *m, int64_t t0, int64_t t1, float *buf,
                    int64_t ld)
{
    const int64_t c = m->c;
    float *x = buf, *t = x + c * ld, *hid = t + c * ld;
    for (int64_t first = t0; first < t1; first += ld) {
        const int64_t n = t1 - first < ld ? t1 - first : ld;
        transpose_matrix(x, ld, in + first * c, c, n, c);
        for (int64_t ch = 0; n < ld && ch < c; ch++) memset(x + ch * ld + n, 0, (ld - n) * sizeof *x);
        layer_norm(t, x, c, ld, m->norm_w, m->norm_b, m->eps);
        linear(hid, t, m->hidden, ld, &m->fc1, NULL);
        for (int64_t k = 0; k < m->hidden * ld; k += LANES) store(hid + k, gelu(load(hid + k)));
        linear(x, hid, c, ld, &m->fc2, x);
        transpose_matrix(out + first * c, c, x, ld, c, n);
    }
}
