/* Pattern asymmetry of many small attention matrices, each pair of entries read once.
 *
 * The CPU path of attnlens/measures/asymmetry/pattern_asymmetry.py. For each matrix
 * P [pos, pos] (float32 or float64; C order, one per (sentence, head)) and its sentence's
 * real tokens (mask [pos], any pattern), over the n x n block of real rows and columns:
 *
 *   - ||P||_F^2 and ||P - P^T||_F^2 = 2 sum_{i<j} (p_ij - p_ji)^2, accumulated in float64,
 *     and asym_ratio = ||P - P^T||_F / max(||P||_F, DBL_MIN);
 *   - the graph counts: edges i -> j (i != j, p_ij >= level, level = (1 / n) x edge_level
 *     in float64, as torch computes edge_level / n, rounded to P's type), reciprocated
 *     edges (ordered pairs both ways), unordered pairs {i, j} with an edge, and those of
 *     them whose stronger entry is at least factor x the weaker (max >= factor * min, the
 *     product rounded to P's type);
 *   - optionally (the float64 baseline) the ordered pairs i != j, those with
 *     p_ij p_ji > (tol p_ii) p_jj, and those with p_ij > tol max(p_ii, p_jj).
 *
 * Every comparison is the torch path's in P's type: a float32 entry, its level and its
 * product with factor compared as float32 values (entries are widened to float64 exactly;
 * the float32 product fl32(factor) x min is exact in float64 and then rounded to float32,
 * which is float32's own correctly rounded product). So the counts are the same integers.
 * The sums use LANES accumulators over a row's columns, in a fixed order (ISO C mode,
 * -std=c99: no contraction into FMA, no reassociation), so every build and clone gives the
 * same bits; they differ from torch's float32 norms in the last float32 bits.
 *
 * Each matrix's real block is copied once, widened to float64, into a compact block and
 * the upper triangle of its transpose (rows padded with zeros to whole vectors; both in L1
 * for sentence lengths up to ~60), so the pair loop reads two contiguous rows: row i of P
 * and row i of P^T, columns j > i, in vectors of VECTOR_WIDTH.
 *
 * Python interface: asymmetry(src, mask, ratio, counts, violations, matrices_per_sentence,
 * pos, factor, edge_level, tol, double_input) -> None. ``src`` holds sentences x
 * matrices_per_sentence x pos x pos entries, ``mask`` sentences x pos bytes (0: padding),
 * ``ratio`` receives one float64 per matrix, ``counts`` four float64 per matrix and
 * ``violations`` (None, or a buffer for float64 input) three. The GIL is released.
 */
#include "kernel_common.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The lanes of the float64 sums: they fix the bits (every build sums in the same order).
 * 4, not 8: a row of a ~25-token sentence holds ~12 pairs, and the lanes past its end are
 * work thrown away (measured 1.25x faster on AVX-512, the same on AVX2). */
#ifndef LANES
#define LANES 4
#endif

typedef struct {
    double level, factor, tol;
} Setup;

/* Per lane: ||P||^2 off the diagonal and (p_ij - p_ji)^2 over the pairs i < j in float64;
 * counts of edges, pairs both ways, pairs with an edge, directed pairs, and of the
 * baseline's product and dominance violations. Lane q holds the pairs (i, j) with
 * (j - i - 1) mod LANES = q, in both forms below (so both give the same bits). */
/* The lanes in vectors of VECTOR_WIDTH doubles, LANES / VECTOR_WIDTH of them: 4 (256 bits)
 * by default, AVX2's width. Wider generic vectors are split by GCC for AVX2, but their
 * comparisons become one scalar comparison per entry (measured: 4.5x slower at 8); plain
 * x86-64 (SSE2) does the same to vectors of 4 (the default clone, 4-5x slower than AVX2). */
#ifndef VECTOR_WIDTH
#define VECTOR_WIDTH 4
#endif
#if defined(__GNUC__) && !defined(ASYMMETRY_PLAIN_C) && \
    (VECTOR_WIDTH & (VECTOR_WIDTH - 1)) == 0 && LANES % VECTOR_WIDTH == 0
/* GCC and clang vector extension: one value per VECTOR_WIDTH lanes, in registers. */
#define LANE_VECTORS 1
#define PARTS (LANES / VECTOR_WIDTH)
typedef double vd __attribute__((vector_size(VECTOR_WIDTH * sizeof(double))));
typedef int64_t vi __attribute__((vector_size(VECTOR_WIDTH * sizeof(int64_t))));
typedef uint64_t vu __attribute__((vector_size(VECTOR_WIDTH * sizeof(uint64_t))));
typedef float vf __attribute__((vector_size(VECTOR_WIDTH * sizeof(float))));
/* Two counts per lane in one 64-bit integer, the second from bit 32 (a lane counts fewer
 * than 2^31 pairs of a matrix): fewer registers. */
typedef struct {
    vd sq[PARTS], dsq[PARTS];
    vu edges_both[PARTS], any_directed[PARTS], product_dominance[PARTS];
} Sums;
#define LANE(s, field, q) ((s).field[(q) / VECTOR_WIDTH][(q) % VECTOR_WIDTH])
#define LOW(s, field, q) ((int64_t)(LANE(s, field, q) & 0xffffffffu))
#define HIGH(s, field, q) ((int64_t)(LANE(s, field, q) >> 32))
#else
/* Other compilers, a LANES that is not a power of two, or ASYMMETRY_PLAIN_C: plain C, the
 * same arithmetic in the same order. */
#define LANE_VECTORS 0
typedef struct {
    double sq[LANES], dsq[LANES];
    int64_t edges[LANES], both[LANES], any[LANES], directed[LANES];
    int64_t product[LANES], dominance[LANES];
} Sums;
#endif

#if LANE_VECTORS
/* v = VECTOR_WIDTH entries from p (unaligned); x where m (all ones), else y. Macros: a
 * function passing these vectors by value would warn of the AVX-512 calling convention. */
#define LOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define PICK(m, x, y) ((vd)(((m) & (vi)(x)) | (~(m) & (vi)(y))))

/* 1 where a comparison's mask is true, 0 elsewhere; and the same in the high half. */
#define ONE(m) ((vu)(m) & 1)
#define TWO_COUNTS(low, high) (ONE(low) + (ONE(high) << 32))

/* Row i of the block B [n, ns] and of its transpose T (zero past column n), columns j > i,
 * LANES at a time; single: float32 entries (factor x min rounded to float32);
 * violations: count the baseline's violations too. */
STEP void row(Sums *s, const double *B, const double *T, const double *diag, int n, int ns,
              int i, const Setup *c, const int single, const int violations) {
    const double *a_row = B + (size_t)i * ns, *b_row = T + (size_t)i * ns;
    const vd zero = {0}, level = zero + c->level, di = zero + diag[i];
    vi lane;
    for (int q = 0; q < VECTOR_WIDTH; q++) lane[q] = q;
    for (int first = i + 1; first < n; first += LANES)
        for (int h = 0; h < PARTS; h++) {
            const int j = first + h * VECTOR_WIDTH;
            vd a, b;
            LOAD(a, a_row + j);
            LOAD(b, b_row + j);
            const vi valid = lane + (int64_t)j < (int64_t)n;
            const vi ea = (level <= a) & valid, eb = (level <= b) & valid, any = ea | eb;
            const vi larger = a > b;
            const vd hi = PICK(larger, a, b), lo = PICK(larger, b, a), d = a - b;
            vd product = c->factor * lo;
            if (single)
                product = __builtin_convertvector(__builtin_convertvector(product, vf), vd);
            s->sq[h] += a * a + b * b;
            s->dsq[h] += d * d;
            s->edges_both[h] += ONE(eb) + TWO_COUNTS(ea, ea & eb);
            s->any_directed[h] += TWO_COUNTS(any, any & (hi >= product));
            if (violations) {
                vd dj;
                LOAD(dj, diag + j);
                const vd ab = a * b, top = c->tol * PICK(di > dj, di, dj);
                s->product_dominance[h] +=
                    TWO_COUNTS((ab > c->tol * di * dj) & valid, (a > top) & valid) +
                    TWO_COUNTS((ab > c->tol * dj * di) & valid, (b > top) & valid);
            }
        }
}
#else
STEP double in_type(double x, int single) { return single ? (double)(float)x : x; }

/* Pair (i, j), i < j: a = p_ij, b = p_ji, di = p_ii, dj = p_jj, into lane q. */
STEP void pair(Sums *s, int q, double a, double b, double di, double dj, const Setup *c,
               const int single, const int violations) {
    const int ea = c->level <= a, eb = c->level <= b;
    const double hi = a > b ? a : b, lo = a > b ? b : a, d = a - b;
    s->sq[q] += a * a + b * b;
    s->dsq[q] += d * d;
    s->edges[q] += ea + eb;
    s->both[q] += ea & eb;
    s->any[q] += ea | eb;
    s->directed[q] += (ea | eb) & (hi >= in_type(c->factor * lo, single));
    if (violations) {
        const double ab = a * b, top = c->tol * (di > dj ? di : dj);
        s->product[q] += (ab > c->tol * di * dj) + (ab > c->tol * dj * di);
        s->dominance[q] += (a > top) + (b > top);
    }
}

/* Row i of the block B [n, ns] and of its transpose T, columns j > i. */
STEP void row(Sums *s, const double *B, const double *T, const double *diag, int n, int ns,
              int i, const Setup *c, const int single, const int violations) {
    const double *a = B + (size_t)i * ns, *b = T + (size_t)i * ns;
    for (int j = i + 1; j < n; j++)
        pair(s, (j - i - 1) % LANES, a[j], b[j], diag[i], diag[j], c, single, violations);
}
#endif

/* The real block of src (rows and columns real[0 .. n-1]) as float64: B [n, ns], the
 * strict upper triangle of its transpose T and its diagonal, each zero past column n
 * (ns = n + LANES). */
STEP void load_block(const void *src, int double_input, int pos, const int *real, int n,
                     int ns, double *B, double *T, double *diag) {
    const int first = n > 0 ? real[0] : 0, contiguous = n == 0 || real[n - 1] - first == n - 1;
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)real[i] * pos;
        double *b = B + (size_t)i * ns;
        if (contiguous && double_input) {
            const double *p = (const double *)src + at + first;
            for (int j = 0; j < n; j++) b[j] = p[j];
        } else if (contiguous) {
            const float *p = (const float *)src + at + first;
            for (int j = 0; j < n; j++) b[j] = (double)p[j];
        } else {
            for (int j = 0; j < n; j++)
                b[j] = double_input ? ((const double *)src)[at + real[j]]
                                    : (double)((const float *)src)[at + real[j]];
        }
        for (int j = n; j < ns; j++) b[j] = 0;
        diag[i] = b[i];
    }
    for (int j = 0; j < n; j++) { /* T's upper triangle: the pair loop reads no other part */
        double *t = T + (size_t)j * ns;
        for (int i = j + 1; i < n; i++) t[i] = B[(size_t)i * ns + j];
        for (int i = n; i < ns; i++) t[i] = 0;
    }
    for (int i = n; i < ns; i++) diag[i] = 0;
}

/* One matrix: ratio, counts [4], violations [3] (when asked). */
STEP void one_matrix(const double *B, const double *T, const double *diag, int n, int ns,
                     const Setup *c, const int single, const int violations, double *ratio,
                     double *counts, double *broken) {
    Sums s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < n; i++) row(&s, B, T, diag, n, ns, i, c, single, violations);
    double sq = 0, dsq = 0;
    int64_t edges = 0, both = 0, any = 0, directed = 0, product = 0, dominance = 0;
    for (int i = 0; i < n; i++) sq += diag[i] * diag[i];
    for (int q = 0; q < LANES; q++) {
#if LANE_VECTORS
        sq += LANE(s, sq, q);
        dsq += LANE(s, dsq, q);
        edges += LOW(s, edges_both, q);
        both += HIGH(s, edges_both, q);
        any += LOW(s, any_directed, q);
        directed += HIGH(s, any_directed, q);
        product += LOW(s, product_dominance, q);
        dominance += HIGH(s, product_dominance, q);
#else
        sq += s.sq[q];
        dsq += s.dsq[q];
        edges += s.edges[q];
        both += s.both[q];
        any += s.any[q];
        directed += s.directed[q];
        product += s.product[q];
        dominance += s.dominance[q];
#endif
    }
    const double norm = sqrt(sq);
    *ratio = sqrt(2 * dsq) / (norm > DBL_MIN ? norm : DBL_MIN);
    counts[0] = (double)edges;
    counts[1] = (double)(2 * both);
    counts[2] = (double)any;
    counts[3] = (double)directed;
    if (violations) {
        broken[0] = (double)n * (n - 1);
        broken[1] = (double)product;
        broken[2] = (double)dominance;
    }
}

/* Every matrix of every sentence; single and violations constant in each caller. */
STEP void matrices(const void *src, const unsigned char *mask, Py_ssize_t sentences,
                   Py_ssize_t per_sentence, int pos, double factor, double edge_level,
                   double tol, const int single, const int violations, int *real, double *B,
                   double *T, double *diag, double *ratio, double *counts, double *broken) {
    const size_t item = single ? sizeof(float) : sizeof(double);
    for (Py_ssize_t b = 0; b < sentences; b++) {
        int n = 0;
        for (int k = 0; k < pos; k++)
            if (mask[(size_t)b * pos + k]) real[n++] = k;
        /* edge_level / n as torch computes it, (1 / n) x edge_level in float64 (a Python
         * float divided by a tensor is the tensor's reciprocal times it; n: the length, at
         * least 1), then in P's type; factor in P's type (torch multiplies a float32
         * tensor by a Python float in float32) */
        const double level = 1.0 / (double)(n > 0 ? n : 1) * edge_level;
        const Setup c = {.level = single ? (double)(float)level : level,
                         .factor = single ? (double)(float)factor : factor, .tol = tol};
        const int ns = n + LANES;
        for (Py_ssize_t h = 0; h < per_sentence; h++) {
            const size_t m = (size_t)b * per_sentence + h;
            load_block((const char *)src + m * pos * pos * item, !single, pos, real, n, ns, B,
                       T, diag);
            one_matrix(B, T, diag, n, ns, &c, single, violations, ratio + m, counts + 4 * m,
                       violations ? broken + 3 * m : NULL);
        }
    }
}

MULTIVERSION
static void all_matrices(const void *src, const unsigned char *mask, Py_ssize_t sentences,
                         Py_ssize_t per_sentence, int pos, double factor, double edge_level,
                         double tol, int double_input, int want_violations, int *real,
                         double *B, double *T, double *diag, double *ratio, double *counts,
                         double *violations) {
    if (!double_input)
        matrices(src, mask, sentences, per_sentence, pos, factor, edge_level, tol, 1, 0, real,
                 B, T, diag, ratio, counts, NULL);
    else if (want_violations)
        matrices(src, mask, sentences, per_sentence, pos, factor, edge_level, tol, 0, 1, real,
                 B, T, diag, ratio, counts, violations);
    else
        matrices(src, mask, sentences, per_sentence, pos, factor, edge_level, tol, 0, 0, real,
                 B, T, diag, ratio, counts, NULL);
}

/* Checks the buffers' sizes, then computes: None, or NULL with an exception set. */
static PyObject *run(Py_buffer *src, Py_buffer *mask, Py_buffer *ratio, Py_buffer *counts,
                     Py_buffer *violations, Py_ssize_t per_sentence, int pos, double factor,
                     double edge_level, double tol, int double_input) {
    const size_t item = double_input ? sizeof(double) : sizeof(float);
    const Py_ssize_t sentences = pos > 0 ? mask->len / pos : 0;
    const size_t matrices = (size_t)sentences * (per_sentence > 0 ? per_sentence : 0);
    if (pos < 1 || per_sentence < 0 || (size_t)mask->len != (size_t)sentences * pos) {
        PyErr_SetString(PyExc_ValueError, "pos must be >= 1 and mask hold sentences x pos bytes");
        return NULL;
    }
    if (!check_size(src, matrices * pos * pos, item, "src") ||
        !check_size(ratio, matrices, sizeof(double), "ratio") ||
        !check_size(counts, 4 * matrices, sizeof(double), "counts") ||
        (violations && !check_size(violations, 3 * matrices, sizeof(double), "violations")))
        return NULL;
    if (violations && !double_input) {
        PyErr_SetString(PyExc_ValueError, "violations are counted on float64 input only");
        return NULL;
    }
    int *real = malloc((size_t)pos * sizeof(int));
    const size_t ns = (size_t)pos + LANES; /* a block's row, padded */
    double *work = malloc((2 * (size_t)pos + 1) * ns * sizeof(double));
    if (real == NULL || work == NULL) {
        free(real);
        free(work);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    all_matrices(src->buf, mask->buf, sentences, per_sentence, pos, factor, edge_level, tol,
                 double_input, violations != NULL, real, work, work + pos * ns,
                 work + 2 * pos * ns, ratio->buf, counts->buf,
                 violations ? violations->buf : NULL);
    Py_END_ALLOW_THREADS
    free(real);
    free(work);
    Py_RETURN_NONE;
}

static PyObject *asymmetry(PyObject *self, PyObject *args) {
    Py_buffer src, mask, ratio, counts, violations = {0};
    PyObject *violations_obj;
    Py_ssize_t per_sentence;
    int pos, double_input;
    double factor, edge_level, tol;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*w*w*Onidddp", &src, &mask, &ratio, &counts,
                          &violations_obj, &per_sentence, &pos, &factor, &edge_level, &tol,
                          &double_input))
        return NULL;
    const int want_violations = violations_obj != Py_None;
    PyObject *result = NULL;
    if (!want_violations ||
        PyObject_GetBuffer(violations_obj, &violations, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0) {
        result = run(&src, &mask, &ratio, &counts, want_violations ? &violations : NULL,
                     per_sentence, pos, factor, edge_level, tol, double_input);
        if (want_violations) PyBuffer_Release(&violations);
    }
    RELEASE_BUFFERS(&src, &mask, &ratio, &counts);
    return result;
}

static PyMethodDef methods[] = {
    {"asymmetry", asymmetry, METH_VARARGS,
     "asymmetry(src, mask, ratio, counts, violations, matrices_per_sentence, pos, factor, "
     "edge_level, tol, double_input) -> None"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_asymmetry_kernel,
             "Norms and graph counts of attention patterns, each pair of entries read once.");

PyMODINIT_FUNC PyInit__asymmetry_kernel(void) { return PyModule_Create(&module); }
