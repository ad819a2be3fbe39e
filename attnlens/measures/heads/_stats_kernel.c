/* Head statistics' per-row values of whole attention patterns, each row read once.
 *
 * The CPU path of attnlens/measures/heads/head_stats.py (TokenMeasures.per_row). For every
 * row q of p [batch, head, rows, keys] (float32, C order; row q is query position q) it
 * writes into out float32 [10, batch, head, rows]:
 *
 *   0  the row maximum (torch's amax: the same value; NaN when the row holds a NaN);
 *   1  sum_j p_j [j is a [CLS] key], 2 the same for [SEP], 3 for punctuation (bits 0, 1, 2
 *      of the batch row's key sets, uint8 [batch, keys]);
 *   4  p[q, q - 1], 5 p[q, q], 6 p[q, q + 1] (0 where the key does not exist);
 *   7  sum_j p_j |q - j|;
 *   8  p[q, first[b]] (the sentence's first real token);
 *   9  how many keys hold the row maximum (p_j >= it: 0 in a NaN row), as a float32 count.
 *
 * The maximum, the entries read (0, 4, 5, 6, 8) and the count (9) are the torch path's
 * values exactly.
 * The four sums are accumulated in float64 and rounded to float32 once, where torch rounds
 * every product and partial sum to float32: a deliberate rounding change, each within about
 * one float32 ulp of the float64 sum of the float32 entries. The sets' sums add their keys
 * in ascending order (a batch row's keys of each set listed once: a NaN at a key outside a
 * set does not reach that set's sum, where torch's product spreads it); the distance runs
 * over 4 lanes (keys j = 4k + lane, added as (l0 + l1) + (l2 + l3)). ISO C mode (-std=c99):
 * no contraction into FMA, so every build and clone gives the same bits.
 *
 * Python interface: rows(p, bits, first, batch, heads, n_rows, n_keys, from, to, out) ->
 * None, for the (sentence, head) pairs from .. to - 1 of batch x heads (threads split a
 * layer between them); the GIL is released while computing.
 */
#include "kernel_common.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(__GNUC__)
#error "the head statistics kernel needs GCC's or clang's vector extensions"
#endif
/* The steps pass 16- and 32-byte vectors by value and are always inlined: the note that a
 * plain x86-64 build passes them differently from an AVX one concerns no call. */
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define OUTPUTS 10
#define SETS 3
#define W 4 /* keys per vector: the lanes of the distance's float64 sum */
typedef double vd __attribute__((vector_size(W * sizeof(double))));
typedef long long vl __attribute__((vector_size(W * sizeof(double))));
typedef float vf __attribute__((vector_size(W * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(W * sizeof(float))));

/* One row x [n] at query position q: the maximum (as torch's amax: NaN when the row holds a
 * NaN; compare and select, exact), how many keys hold it (each lane counts the keys equal to
 * its own maximum, restarting at a larger one; the lanes holding the row's maximum add
 * theirs; 0 in a NaN row) and sum_j x_j |q - j| over W lanes, in one walk. */
STEP void max_and_distance(const float *x, long n, long q, float *max, float *ties,
                           double *distance) {
    vf top = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    vi nan = {0}, count = {0};
    vd sum = {0};
    const vd lane = {0.0, 1.0, 2.0, 3.0};
    const vi lanes = {0, 1, 2, 3};
    for (long j = 0; j < n; j += W) {
        vf v = {0}; /* the keys past n as 0 (no term), left out of the maximum */
        vi valid = {-1, -1, -1, -1};
        if (j + W <= n) {
            memcpy(&v, x + j, sizeof v);
        } else {
            for (long k = j; k < n; k++) v[k - j] = x[k];
            valid = lanes < (int32_t)(n - j);
        }
        const vi above = (v > top) & valid; /* NaN: never above */
        top = (vf)(((vi)v & above) | ((vi)top & ~above));
        count = (count & ~above) - ((v == top) & valid); /* a new maximum: 1, a tie: + 1 */
        nan |= v != v;
        const vd gap = (vd)((vl)((double)(q - j) - lane) & 0x7FFFFFFFFFFFFFFFLL); /* |q - j| */
        sum += __builtin_convertvector(v, vd) * gap;
    }
    float m = -INFINITY;
    int found = 0, held = 0;
    for (int k = 0; k < W; k++) {
        m = top[k] > m ? top[k] : m;
        found |= nan[k];
    }
    for (int k = 0; k < W; k++) held += top[k] == m ? count[k] : 0;
    *max = found ? NAN : m;
    *ties = found ? 0.0f : (float)held;
    *distance = (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

typedef struct {
    Py_ssize_t batch, heads, rows, keys, from, to;
    const float *p;
    const uint8_t *bits;
    const int64_t *first;
    float *out;
} Job;

/* One row x [n] at query position q, its outputs at flat index i of [batch, head, rows];
 * members [SETS][n]: the keys of each set of the batch row, counts [SETS] of them. */
STEP void one_row(const Job *job, const float *x, long q, size_t i, size_t plane,
                  const long *members, const long *counts, long first) {
    const long n = (long)job->keys;
    float *out = job->out + i;
    double distance;
    max_and_distance(x, n, q, out, out + 9 * plane, &distance);
    for (int s = 0; s < SETS; s++) { /* the set's keys in ascending order, in float64 */
        double sum = 0;
        for (long k = 0; k < counts[s]; k++) sum += x[members[s * n + k]];
        out[(1 + s) * plane] = (float)sum;
    }
    for (long o = -1; o <= 1; o++)
        out[(5 + o) * plane] = q + o >= 0 && q + o < n ? x[q + o] : 0.0f;
    out[7 * plane] = (float)distance;
    out[8 * plane] = x[first];
}

MULTIVERSION
static void pairs(const Job *job, long *members) {
    const size_t plane = (size_t)job->batch * job->heads * job->rows;
    const long n = (long)job->keys;
    long counts[SETS];
    Py_ssize_t filled = -1; /* the batch row whose sets members holds */
    for (Py_ssize_t pair = job->from; pair < job->to; pair++) {
        const Py_ssize_t b = pair / job->heads;
        if (b != filled) {
            const uint8_t *bits = job->bits + (size_t)b * n;
            for (int s = 0; s < SETS; s++) {
                counts[s] = 0;
                for (long j = 0; j < n; j++)
                    if ((bits[j] >> s) & 1) members[s * n + counts[s]++] = j;
            }
            filled = b;
        }
        for (Py_ssize_t r = 0; r < job->rows; r++) {
            const size_t i = (size_t)pair * job->rows + r;
            one_row(job, job->p + i * n, (long)r, i, plane, members, counts,
                    (long)job->first[b]);
        }
    }
}

static PyObject *rows(PyObject *self, PyObject *args) {
    Py_buffer p, bits, first, out;
    Job job;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*nnnnnnw*", &p, &bits, &first, &job.batch, &job.heads,
                          &job.rows, &job.keys, &job.from, &job.to, &out))
        return NULL;
    PyObject *result = NULL;
    const size_t plane = (size_t)job.batch * job.heads * job.rows;
    if (job.batch < 0 || job.heads < 0 || job.rows < 0 || job.keys < 1 || job.from < 0 ||
        job.from > job.to || job.to > job.batch * job.heads) {
        PyErr_SetString(PyExc_ValueError, "bad shape or pair range");
    } else if (check_size(&p, plane * job.keys, sizeof(float), "p") &&
               check_size(&bits, (size_t)job.batch * job.keys, 1, "bits") &&
               check_size(&first, (size_t)job.batch, sizeof(int64_t), "first") &&
               check_size(&out, OUTPUTS * plane, sizeof(float), "out")) {
        const int64_t *f = first.buf;
        for (Py_ssize_t b = 0; b < job.batch; b++)
            if (f[b] < 0 || f[b] >= job.keys) {
                PyErr_SetString(PyExc_ValueError, "first holds a key outside the row");
                break;
            }
        if (!PyErr_Occurred()) {
            long *members = PyMem_RawMalloc(SETS * (size_t)job.keys * sizeof(long));
            if (members == NULL) {
                PyErr_NoMemory();
            } else {
                job.p = p.buf;
                job.bits = bits.buf;
                job.first = f;
                job.out = out.buf;
                Py_BEGIN_ALLOW_THREADS
                pairs(&job, members);
                Py_END_ALLOW_THREADS
                PyMem_RawFree(members);
                result = Py_NewRef(Py_None);
            }
        }
    }
    RELEASE_BUFFERS(&p, &bits, &first, &out);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(p, bits, first, batch, heads, n_rows, n_keys, from, to, out) -> None"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_stats_kernel, "Head statistics' per-row values of whole attention patterns.");

PyMODINIT_FUNC PyInit__stats_kernel(void) { return PyModule_Create(&module); }
