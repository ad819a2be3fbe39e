/* The linear-attention view of many (sentence, head) pairs in one pass: the CPU path of
 * linear_attention.py.
 *
 * For each (sentence, head) of a padded batch, pattern P [n, n], queries Q [n, d] (the
 * head's), keys K [n, d] and values V [n, dv] (its key/value head), all float32, and the
 * sentence's real tokens, one pass gives:
 *
 *   - key geometry over the m real keys: the Gram matrix C of the unit keys (k / max(||k||,
 *     1e-12), as F.normalize), its trace, ||C||_F^2 and the sum of |C_ij| off the diagonal
 *     (one half, doubled: C is symmetric): interference = that sum / (m (m - 1)) (0 for
 *     m < 2), effective keys = trace^2 / ||C||_F^2;
 *   - the memories over the visible keys: M = sum_j phi(k_j) v_j^T, R = sum_j k_j v_j^T
 *     [d, dv] and z = sum_j phi(k_j) (phi(x) = elu(x) + 1), all real keys at once (the
 *     torch path's linear-time order), or in causal models key by key before row i reads
 *     them (the causal recurrence: keys j <= i);
 *   - per real query row i: the exact output O_i = P_i V (every key), the linear attention
 *     phi(q_i)^T M / phi(q_i).z and the raw read-out q_i^T R;
 *   - the relative errors ||O_lin - O||_F / ||O||_F, ||O_raw - O||_F / ||O||_F and, after the
 *     best gain c = <O_raw, O> / ||O_raw||^2 (a second pass over the kept rows), ||c O_raw -
 *     O||_F / ||O||_F (denominators clamped to float32's smallest normal, as torch).
 *
 * Every product and sum is float64 from the float32 inputs (the torch path rounds to float32
 * between its operations: the two agree to float32 rounding, and with that path run in
 * float64 to float64 rounding). No floating-point contraction (ISO C mode, -std=c99: no FMA)
 * and no reassociation: the vector loops run over the value dimension (or, for phi, over
 * inputs), whose lanes are independent, the Gram dot products add eight fixed lanes in a
 * fixed tree, and exp is the kernel's own (phi below), so every build gives the same bits.
 *
 * Python interface:
 *   fold(pattern, q, k, v, rows, picked, total, batch, heads, n, kv_heads, d, dv, causal,
 *        first, stop, out)
 * pattern float32 [total, heads, n, n]; q float32 [total, n, heads, d]; k float32 [total, n,
 * kv_heads, d] and v float32 [total, n, kv_heads, dv] (query head h reads kv head h / (heads /
 * kv_heads)); picked int64 [batch]: the sentences of those read, in [0, total) (a sample read
 * where it lies, not copied out first); rows uint8 [batch, n] (the picked sentences' real
 * tokens); out float64 [batch, heads, 5]
 * (interference, effective keys, linear error, raw error, rescaled raw error), written for
 * the (sentence, head) pairs first .. stop - 1 of the batch-major order only (threads may
 * split a batch). The GIL is released while computing.
 */
#include "kernel_common.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEASURES 5

typedef struct {
    const float *pattern, *q, *k, *v;
    const uint8_t *rows;
    const int64_t *picked;
    int heads, n, kv_heads, d, dv, causal;
    double *out;
} Fold;

/* One pair's scratch, in doubles (m real keys, n positions). */
typedef struct {
    double *values;              /* [n, dv]: the pair's values */
    double *phi_keys, *keys;     /* [d, m]: phi(k_j), k_j of the real keys, by column */
    double *memory, *raw_memory; /* [d, dv]: sum_j phi(k_j) v_j^T, sum_j k_j v_j^T */
    double *mass;                /* [d]: sum_j phi(k_j) */
    double *unit;                /* [m, d]: the real keys / ||k|| */
    double *exact, *raw;         /* [real rows, dv]: P_i V and the raw read-out */
    double *lin;                 /* [dv]: one row's linear attention */
    double *phi_q, *query;       /* [d]: one row's phi(q_i), q_i */
    double *weights;             /* [n]: one row's non-zero pattern entries */
    int *real, *nonzero;         /* [n]: the real keys, those entries' keys */
} Work;

/* acc[c] += a * x[c] over c < count (independent lanes). */
STEP void add_scaled(double *restrict acc, const double *restrict x, double a, int count) {
    for (int c = 0; c < count; c++) acc[c] += a * x[c];
}

#if defined(__GNUC__)
/* Four doubles (GCC's vector extension: one AVX2 register, half an AVX-512 one, two SSE2
 * ones; element-wise IEEE arithmetic, so the same bits in every build), read unaligned.
 * Four, not eight: an eight-double type has no AVX2 register, and GCC then kept such
 * accumulators on the stack (measured: the AVX2 clone slower than plain x86-64). */
typedef double lanes4 __attribute__((vector_size(32), aligned(8), may_alias));
#endif

/* out[c] = sum_r weights[r] * rows[r][c] for c < width, row r at base + (index ? index[r] :
 * r) * stride: each column adds its terms in order of r, in registers (16 or 4 columns at a
 * time where the compiler has vector types). */
STEP void combine(double *restrict out, const double *restrict weights,
                  const double *restrict base, const int *index, int count, size_t stride,
                  int width) {
    int c = 0;
#if defined(__GNUC__)
    for (; c + 16 <= width; c += 16) {
        lanes4 a0 = {0.0}, a1 = {0.0}, a2 = {0.0}, a3 = {0.0};
        for (int r = 0; r < count; r++) {
            const size_t at = (size_t)(index ? index[r] : r) * stride + c;
            const lanes4 *row = (const lanes4 *)(base + at);
            const double w = weights[r];
            a0 += w * row[0];
            a1 += w * row[1];
            a2 += w * row[2];
            a3 += w * row[3];
        }
        lanes4 *to = (lanes4 *)(out + c);
        to[0] = a0;
        to[1] = a1;
        to[2] = a2;
        to[3] = a3;
    }
    for (; c + 4 <= width; c += 4) {
        lanes4 a0 = {0.0};
        for (int r = 0; r < count; r++) {
            const size_t at = (size_t)(index ? index[r] : r) * stride + c;
            a0 += weights[r] * *(const lanes4 *)(base + at);
        }
        *(lanes4 *)(out + c) = a0;
    }
#endif
    for (; c < width; c++) {
        double acc = 0.0;
        for (int r = 0; r < count; r++)
            acc += weights[r] * base[(size_t)(index ? index[r] : r) * stride + c];
        out[c] = acc;
    }
}

/* exp(x) for x <= 0 by the same element-wise steps in every build (a vector loop need not
 * call the C library): x = n ln2 + r, |r| <= ln2 / 2 (ln2 split in two, n ln2_hi exact),
 * exp(r) by its Taylor polynomial to r^13 (the next term is below 5e-18 relative), times
 * 2^n built in the exponent bits. Within a few ulp of exp; 0 below -708 (exp is below
 * 3.4e-308 there). SHIFT rounds x / ln2 to the integer n, which its low bits then hold. */
#define EXP_SHIFT 0x1.8p52
#define EXP_LOW (-708.0)
static const double EXP_INV_LN2 = 0x1.71547652b82fep0, EXP_LN2_HI = 0x1.62e42fee00000p-1,
                    EXP_LN2_LO = 0x1.a39ef35793c76p-33;
static const double EXP_TERMS[14] = { /* 1 / k!, k = 13 .. 0 */
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
    1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
    1.0 / 6.0, 0.5, 1.0, 1.0};

/* elu(x) + 1 of one double: x + 1 above 0, else exp(x) by the steps above. */
STEP double phi(double x) {
    if (x > 0.0) return x + 1.0;
    if (x < EXP_LOW) return 0.0;
    const double t = x * EXP_INV_LN2 + EXP_SHIFT, n = t - EXP_SHIFT;
    const double r = (x - n * EXP_LN2_HI) - n * EXP_LN2_LO;
    double p = EXP_TERMS[0];
    for (int k = 1; k < 14; k++) p = p * r + EXP_TERMS[k];
    int64_t bits;
    memcpy(&bits, &t, sizeof bits);
    const int64_t scale_bits = (bits - 0x4338000000000000LL + 1023) << 52;
    double scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

/* out[c] = phi(x[c]) over c < count (four at a time where the compiler has vector types:
 * the same steps as phi, lane by lane, so the same bits). */
STEP void phi_all(double *restrict out, const double *restrict x, int count) {
    int c = 0;
#if defined(__GNUC__)
    typedef int64_t ints4 __attribute__((vector_size(32)));
    for (; c + 4 <= count; c += 4) {
        const lanes4 v = *(const lanes4 *)(x + c);
        const ints4 positive = v > 0.0, low = v < EXP_LOW;
        const lanes4 t = v * EXP_INV_LN2 + EXP_SHIFT, n = t - EXP_SHIFT;
        const lanes4 r = (v - n * EXP_LN2_HI) - n * EXP_LN2_LO;
        lanes4 p = (lanes4){0.0} + EXP_TERMS[0];
        for (int k = 1; k < 14; k++) p = p * r + EXP_TERMS[k];
        const ints4 scale_bits = ((ints4)t - 0x4338000000000000LL + 1023) << 52;
        const ints4 e = (ints4)(p * (lanes4)scale_bits) & ~low;
        *(lanes4 *)(out + c) = (lanes4)((positive & (ints4)(v + 1.0)) | (~positive & e));
    }
#endif
    for (; c < count; c++) out[c] = phi(x[c]);
}

/* sum_e a[e] b[e] in eight lanes (e mod 8) added in a fixed tree, then the tail: the same
 * bits whatever the vector width. */
STEP double dot(const double *restrict a, const double *restrict b, int d) {
    double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int e = 0;
    for (; e + 8 <= d; e += 8)
        for (int l = 0; l < 8; l++) lane[l] += a[e + l] * b[e + l];
    double tail = 0.0;
    for (; e < d; e++) tail += a[e] * b[e];
    return (((lane[0] + lane[4]) + (lane[2] + lane[6])) +
            ((lane[1] + lane[5]) + (lane[3] + lane[7]))) + tail;
}

/* ||a - b||^2 over dv entries. */
STEP double squared_distance(const double *a, const double *b, int dv) {
    double sum = 0.0;
    for (int c = 0; c < dv; c++) {
        const double diff = a[c] - b[c];
        sum += diff * diff;
    }
    return sum;
}

/* (interference, effective keys) of the sentence's real keys: the Gram matrix of their unit
 * vectors (k / max(||k||, 1e-12), as F.normalize), one half and the diagonal. */
STEP void key_geometry(const float *K, size_t stride, const uint8_t *rows, int n, int d,
                       double *unit, double *out) {
    int m = 0;
    for (int j = 0; j < n; j++) {
        if (!rows[j]) continue;
        const float *key = K + (size_t)j * stride;
        double *u = unit + (size_t)m++ * d;
        double norm = 0.0;
        for (int e = 0; e < d; e++) {
            u[e] = (double)key[e];
            norm += u[e] * u[e];
        }
        norm = sqrt(norm);
        const double scale = norm > 1e-12 ? norm : 1e-12;
        for (int e = 0; e < d; e++) u[e] /= scale;
    }
    double trace = 0.0, diagonal = 0.0, frob = 0.0, off = 0.0;
    for (int i = 0; i < m; i++) {
        const double *u = unit + (size_t)i * d;
        const double self = dot(u, u, d);
        trace += self;
        diagonal += self * self;
        for (int j = i + 1; j < m; j++) {
            const double c = dot(u, unit + (size_t)j * d, d);
            frob += c * c;
            off += fabs(c);
        }
    }
    frob = 2.0 * frob + diagonal; /* C is symmetric */
    out[0] = m > 1 ? 2.0 * off / ((double)m * (double)(m - 1)) : 0.0;
    out[1] = trace * trace / (frob > FLT_MIN ? frob : FLT_MIN);
}

/* Key j added to the memories: phi(k_j) v_j^T, k_j v_j^T and phi(k_j) (causal models, key
 * by key: the same order of additions as memories_of's). */
STEP void add_key(const float *key, const double *value, int d, int dv, Work *w) {
    for (int e = 0; e < d; e++) w->keys[e] = (double)key[e];
    phi_all(w->phi_keys, w->keys, d);
    for (int e = 0; e < d; e++) {
        w->mass[e] += w->phi_keys[e];
        add_scaled(w->memory + (size_t)e * dv, value, w->phi_keys[e], dv);
        add_scaled(w->raw_memory + (size_t)e * dv, value, w->keys[e], dv);
    }
}

/* The memories of the m real keys at once (encoders): row e of M is sum_j phi(k_je) v_j. */
STEP void memories_of(const float *K, size_t stride, int m, int d, int dv, Work *w) {
    for (int r = 0; r < m; r++) {
        const float *key = K + (size_t)w->real[r] * stride;
        for (int e = 0; e < d; e++) w->keys[(size_t)e * m + r] = (double)key[e];
    }
    phi_all(w->phi_keys, w->keys, d * m);
    for (int e = 0; e < d; e++) {
        const double *phi_column = w->phi_keys + (size_t)e * m;
        combine(w->memory + (size_t)e * dv, phi_column, w->values, w->real, m, dv, dv);
        combine(w->raw_memory + (size_t)e * dv, w->keys + (size_t)e * m, w->values, w->real,
                m, dv, dv);
        double mass = 0.0;
        for (int r = 0; r < m; r++) mass += phi_column[r];
        w->mass[e] = mass;
    }
}

MULTIVERSION
static void fold_pairs(const Fold *f, Py_ssize_t first, Py_ssize_t stop, Work *w) {
    const int n = f->n, d = f->d, dv = f->dv, group = f->heads / f->kv_heads;
    const size_t q_stride = (size_t)f->heads * d, k_stride = (size_t)f->kv_heads * d;
    const size_t v_stride = (size_t)f->kv_heads * dv;
    for (Py_ssize_t pair = first; pair < stop; pair++) {
        const int b = (int)(pair / f->heads), h = (int)(pair % f->heads), kv = h / group;
        const size_t s = (size_t)f->picked[b]; /* the sentence read */
        const float *P = f->pattern + (s * f->heads + h) * n * n;
        const float *Q = f->q + s * n * q_stride + (size_t)h * d;
        const float *K = f->k + s * n * k_stride + (size_t)kv * d;
        const float *V = f->v + s * n * v_stride + (size_t)kv * dv;
        const uint8_t *rows = f->rows + (size_t)b * n;
        double *out = f->out + (size_t)pair * MEASURES;
        int m = 0;
        for (int j = 0; j < n; j++) {
            if (rows[j]) w->real[m++] = j;
            for (int c = 0; c < dv; c++)
                w->values[(size_t)j * dv + c] = (double)V[(size_t)j * v_stride + c];
        }
        key_geometry(K, k_stride, rows, n, d, w->unit, out);
        if (f->causal) /* filled key by key below */
            memset(w->memory, 0, sizeof(double) * (2 * (size_t)d * dv + d)); /* raw, mass */
        else
            memories_of(K, k_stride, m, d, dv, w);
        double norm = 0.0, lin_error = 0.0, raw_error = 0.0, cross = 0.0, raw_norm = 0.0;
        int kept = 0;
        for (int i = 0; i < n; i++) {
            if (!rows[i]) continue;
            if (f->causal) /* the causal recurrence: keys 0 .. i */
                add_key(K + (size_t)i * k_stride, w->values + (size_t)i * dv, d, dv, w);
            double *exact = w->exact + (size_t)kept * dv, *raw = w->raw + (size_t)kept * dv;
            kept++;
            int count = 0;
            for (int j = 0; j < n; j++) {
                const double p = (double)P[(size_t)i * n + j];
                if (p == 0.0) continue; /* adds nothing */
                w->weights[count] = p;
                w->nonzero[count++] = j;
            }
            combine(exact, w->weights, w->values, w->nonzero, count, dv, dv);
            const float *query = Q + (size_t)i * q_stride;
            double mass = 0.0;
            for (int e = 0; e < d; e++) w->query[e] = (double)query[e];
            phi_all(w->phi_q, w->query, d);
            for (int e = 0; e < d; e++) mass += w->phi_q[e] * w->mass[e];
            combine(w->lin, w->phi_q, w->memory, NULL, d, dv, dv);
            combine(raw, w->query, w->raw_memory, NULL, d, dv, dv);
            const double scale = mass > FLT_MIN ? mass : FLT_MIN;
            for (int c = 0; c < dv; c++) w->lin[c] /= scale;
            lin_error += squared_distance(w->lin, exact, dv);
            raw_error += squared_distance(raw, exact, dv);
            for (int c = 0; c < dv; c++) {
                norm += exact[c] * exact[c];
                cross += raw[c] * exact[c];
                raw_norm += raw[c] * raw[c];
            }
        }
        const double gain = cross / (raw_norm > FLT_MIN ? raw_norm : FLT_MIN);
        double rescaled = 0.0;
        for (int r = 0; r < kept; r++) {
            const double *exact = w->exact + (size_t)r * dv, *raw = w->raw + (size_t)r * dv;
            for (int c = 0; c < dv; c++) {
                const double diff = gain * raw[c] - exact[c];
                rescaled += diff * diff;
            }
        }
        norm = sqrt(norm);
        const double denominator = norm > FLT_MIN ? norm : FLT_MIN;
        out[2] = sqrt(lin_error) / denominator;
        out[3] = sqrt(raw_error) / denominator;
        out[4] = sqrt(rescaled) / denominator;
    }
}

static PyObject *fold(PyObject *self, PyObject *args) {
    Py_buffer pattern, q, k, v, rows, picked, out;
    int total, batch, heads, n, kv_heads, d, dv, causal;
    Py_ssize_t first, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*iiiiiiipnnw*", &pattern, &q, &k, &v, &rows,
                          &picked, &total, &batch, &heads, &n, &kv_heads, &d, &dv, &causal,
                          &first, &stop, &out))
        return NULL;
    PyObject *result = NULL;
    const size_t B = (size_t)batch, H = (size_t)heads, N = (size_t)n, T = (size_t)total;
    int ok = batch >= 0 && total >= 0 && heads >= 1 && n >= 1 && kv_heads >= 1 && heads % kv_heads == 0 &&
             d >= 1 && dv >= 1 && first >= 0 && first <= stop && (size_t)stop <= B * H;
    if (!ok) PyErr_SetString(PyExc_ValueError, "bad shapes or pair range");
    ok = ok && check_size(&pattern, T * H * N * N, sizeof(float), "pattern") &&
         check_size(&q, T * N * H * d, sizeof(float), "q") &&
         check_size(&k, T * N * kv_heads * d, sizeof(float), "k") &&
         check_size(&v, T * N * kv_heads * dv, sizeof(float), "v") &&
         check_size(&rows, B * N, 1, "rows") &&
         check_size(&picked, B, sizeof(int64_t), "picked") &&
         check_size(&out, B * H * MEASURES, sizeof(double), "out");
    for (size_t b = 0; ok && b < B; b++)
        if (((const int64_t *)picked.buf)[b] < 0 || ((const int64_t *)picked.buf)[b] >= total) {
            PyErr_SetString(PyExc_ValueError, "picked holds a sentence outside the batch");
            ok = 0;
        }
    if (ok) {
        const size_t D = (size_t)d, DV = (size_t)dv;
        double *buffer = malloc(sizeof(double) * (N * DV + 2 * D * N + 2 * D * DV + D + N * D +
                                                  2 * N * DV + DV + 2 * D + N));
        int *index = malloc(sizeof(int) * 2 * N);
        if (buffer == NULL || index == NULL) {
            PyErr_NoMemory();
        } else {
            Work w = {.values = buffer, .phi_keys = buffer + N * DV, .real = index,
                      .nonzero = index + N};
            w.keys = w.phi_keys + D * N;
            w.memory = w.keys + D * N;
            w.raw_memory = w.memory + D * DV;
            w.mass = w.raw_memory + D * DV; /* right after raw_memory: one memset clears all */
            w.unit = w.mass + D;
            w.exact = w.unit + N * D;
            w.raw = w.exact + N * DV;
            w.lin = w.raw + N * DV;
            w.phi_q = w.lin + DV;
            w.query = w.phi_q + D;
            w.weights = w.query + D;
            Fold f = {.pattern = pattern.buf, .q = q.buf, .k = k.buf, .v = v.buf,
                      .rows = rows.buf, .picked = picked.buf, .heads = heads, .n = n, .kv_heads = kv_heads, .d = d,
                      .dv = dv, .causal = causal, .out = out.buf};
            Py_BEGIN_ALLOW_THREADS
            fold_pairs(&f, first, stop, &w);
            Py_END_ALLOW_THREADS
            result = Py_NewRef(Py_None);
        }
        free(buffer);
        free(index);
    }
    RELEASE_BUFFERS(&pattern, &q, &k, &v, &rows, &picked, &out);
    return result;
}

static PyMethodDef methods[] = {
    {"fold", fold, METH_VARARGS,
     "fold(pattern, q, k, v, rows, picked, total, batch, heads, n, kv_heads, d, dv, causal, "
     "first, stop, out) -> None"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_linear_kernel,
             "The linear-attention view's key geometry and output errors of many heads in one "
             "pass.");

PyMODINIT_FUNC PyInit__linear_kernel(void) { return PyModule_Create(&module); }
