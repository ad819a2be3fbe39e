/* Eigenvalues of the float64 Gram matrices of many small attention matrices.
 *
 * The spectral path of attnlens/measures/spectrum/singular_values.py: for each matrix
 * P [m, n] (float32 or float64) the eigenvalues of G = X^T X in float64, where X is P [m, n]
 * when m > n and P^T otherwise, so G is r x r with r = min(m, n) and its eigenvalues are the
 * squared singular values of P. Three steps, each textbook:
 *
 *   1. the Gram matrix, accumulated in float64;
 *   2. Householder reduction of G to a symmetric tridiagonal matrix (Golub & Van Loan,
 *      Matrix Computations, 4th ed., Alg. 8.3.1), eigenvalues only, no vectors kept;
 *   3. the eigenvalues of that tridiagonal matrix by implicit QR sweeps with Wilkinson's
 *      shift in the square-root-free form of Pal, Walker and Kahan (Parlett, The Symmetric
 *      Eigenvalue Problem, sec. 8.15), on the squared off-diagonal entries.
 *
 * Speed comes from the layout, not the algorithm: LANES matrices of the same shape are
 * processed together, their entries interleaved (``a[i][j][lane]``), so every loop runs
 * over the lanes with independent data: the compiler vectorises them and the long
 * dependency chains of step 3 (two divisions per rotation) overlap across lanes, QR_GROUPS
 * groups at a time (the vector of one group is one chain, bound by its latency). LAPACK
 * solves one small matrix at a time and pays call and latency overheads per matrix.
 * Step 1 computes 4 x 4 entries of G per pass over the samples, in registers (lanes_t).
 * No floating-point contraction (ISO C mode, -std=c99: no FMA), so every build and
 * clone gives the same bits.
 *
 * Lane counts: the body (the end of this file, from SPECTRAL_BODY) is read twice, for
 * LANES = 8 and LANES = 4, its names suffixed _8 and _4 (LANE_NAME), each with its own
 * clones. The lane count changes only which matrices share a vector, never a matrix's
 * arithmetic: both give the same bits. The fast count depends on the registers: 8 lanes
 * with AVX-512 (32 registers of 8 doubles: the Gram step's 16 accumulators fit), 4
 * elsewhere (AVX2 has 16 registers of 4 doubles: at 8 lanes the 16 accumulators need 32
 * and spill; on an AVX2 EPYC the x86-64-v3 clone ran 1.2-2.5x slower at 8 lanes than at 4,
 * plain x86-64 code 1.1-1.2x; docs/performance.md, "spec47").
 * The clones' build asks the CPU once, at import (preferred_lanes; the module's LANES); a
 * build for one target decides by its target; -DLANES=N builds that count alone.
 *
 * Accuracy: each step is backward stable in float64, so every eigenvalue is within a few
 * eps64 * trace(G) of the exact one (Weyl); a converged sweep is declared when an
 * off-diagonal entry is negligible relative to its neighbours or to eps64 * trace(G).
 *
 * Python interface: gram_eigenvalues(src, out, count, m, n, double_input[, lanes]) ->
 * failures (lanes: 0, the default, for LANES; or a lane count built, to compare them).
 * ``src`` holds count * m * n floats (float32, or float64 when double_input), C order;
 * ``out`` receives count * r float64 eigenvalues, unsorted. The return value is the number
 * of matrices whose step 3 did not converge (their rows of ``out`` are NaN). The GIL is
 * released while computing, so threads can split a batch.
 */
#ifndef SPECTRAL_BODY /* the outer part; the body (below) is read once per lane count */
#include "kernel_common.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SWEEPS_PER_EIGENVALUE 40
#define AT(p, i) ((p) + (size_t)(i) * LANES)
/* Step 3 runs QR_GROUPS groups side by side (QW lanes): as many independent chains of
 * divisions in flight. Their diagonals d and squared off-diagonals e2 are [r][QW]. */
#ifndef QR_GROUPS
#define QR_GROUPS 2
#endif
#define QW (QR_GROUPS * LANES)
#define DE(p, i) ((p) + (size_t)(i) * QW)
/* LANE_NAME(f): f_<LANES>, the body's f for the lane count it is read for */
#define LANE_NAME(f) LANE_NAME_(f, LANES)
#define LANE_NAME_(f, lanes) LANE_NAME__(f, lanes)
#define LANE_NAME__(f, lanes) f##_##lanes

typedef struct {
    int m, n, r, samples; /* samples: the length of the sums forming G (max(m, n)) */
    double *x;            /* [r rounded up to GRAM_BLOCK][samples][LANES]: column i of X,
                           * per lane; the padding columns stay zero */
    double *g;            /* [r][r][LANES]: lower triangle used */
    double *d, *e2;       /* [r][QW], from this group's first lane: diagonal, squared
                           * off-diagonal */
    double *v, *w;        /* [r][LANES]: Householder vector, rank-2 update vector */
    double *v2, *w2;      /* [r][LANES]: the same for the next step */
    double *trace;        /* [QW], from this group's first lane */
    double *d_all, *e2_all, *trace_all; /* the same from lane 0 of the first group */
    int vector_sweeps;    /* step 3 by sweep_rows_vectors (SWEEP_VECTORS builds only) */
} Work;

#if defined(KERNEL_CLONES)
/* 1 when the CPU has x86-64-v4's AVX-512 (the clones' resolver runs their v4 version). */
static inline int cpu_has_avx512(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
}
#endif

/* solve_<lanes>: the body for one lane count (SOLVERS below) */
typedef int Solve(const void *src, int double_input, Py_ssize_t count, int m, int n,
                  double *out, Py_ssize_t *failures);
typedef struct {
    int lanes;
    Solve *solve;
} Solver;

#define SPECTRAL_BODY
#ifdef LANES /* one lane count, fixed at build time (-DLANES=N: the tests' other builds) */
#include "_spectral_kernel.c"
static const Solver SOLVERS[] = {{LANES, LANE_NAME(solve)}};
#else        /* both, the CPU chooses (preferred_lanes) */
#define LANES 8
#include "_spectral_kernel.c"
#undef LANES
#define LANES 4
#include "_spectral_kernel.c"
#undef LANES
static const Solver SOLVERS[] = {{8, solve_8}, {4, solve_4}};
#endif
#undef SPECTRAL_BODY

/* The lane count that runs fastest here (docs/performance.md, "spec47"): 8 with AVX-512,
 * 4 without (measured faster on AVX2 and on plain x86-64 code alike). */
static int preferred_lanes(void) {
#if defined(LANES)
    return LANES;
#elif defined(KERNEL_CLONES)
    return cpu_has_avx512() ? 8 : 4;
#elif defined(__AVX512F__)
    return 8;
#else
    return 4;
#endif
}

static int chosen_lanes; /* preferred_lanes(), at import */

static PyObject *gram_eigenvalues(PyObject *self, PyObject *args) {
    Py_buffer src, out;
    Py_ssize_t count;
    int m, n, double_input, lanes = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*niip|i", &src, &out, &count, &m, &n, &double_input,
                          &lanes))
        return NULL;
    PyObject *result = NULL;
    const int r = m < n ? m : n;
    const size_t item = double_input ? sizeof(double) : sizeof(float);
    const Solver *solver = NULL;
    for (size_t k = 0; k < sizeof SOLVERS / sizeof SOLVERS[0]; k++)
        if (SOLVERS[k].lanes == (lanes ? lanes : chosen_lanes)) solver = &SOLVERS[k];
    if (count < 0 || m < 1 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0 and m, n >= 1");
    } else if (solver == NULL) {
        PyErr_Format(PyExc_ValueError, "lanes must be 0 (this CPU's choice, %d) or a lane "
                     "count built (8 and 4, or -DLANES)", chosen_lanes);
    } else if (check_size(&src, (size_t)count * m * n, item, "src") &&
               check_size(&out, (size_t)count * r, sizeof(double), "out")) {
        Py_ssize_t failures = 0;
        if (solver->solve(src.buf, double_input, count, m, n, out.buf, &failures) < 0)
            PyErr_NoMemory();
        else
            result = PyLong_FromSsize_t(failures);
    }
    RELEASE_BUFFERS(&src, &out);
    return result;
}

static PyMethodDef methods[] = {
    {"gram_eigenvalues", gram_eigenvalues, METH_VARARGS,
     "gram_eigenvalues(src, out, count, m, n, double_input, lanes=0) -> number of failed "
     "matrices (lanes: 0 for this CPU's lane count, or one built, to compare them)"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_spectral_kernel,
             "Eigenvalues of the float64 Gram matrices of small matrices, many at a time.");

PyMODINIT_FUNC PyInit__spectral_kernel(void) {
    chosen_lanes = preferred_lanes();
    PyObject *mod = PyModule_Create(&module);
    if (mod != NULL && PyModule_AddIntConstant(mod, "LANES", chosen_lanes) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}

#else /* SPECTRAL_BODY: all that depends on LANES, its names suffixed _<LANES> */
#define lanes_t LANE_NAME(lanes_t)
#define lanes_mask_t LANE_NAME(lanes_mask_t)
#define load_group LANE_NAME(load_group)
#define gram_trace LANE_NAME(gram_trace)
#define gram LANE_NAME(gram)
#define reflector LANE_NAME(reflector)
#define finish_update_vector LANE_NAME(finish_update_vector)
#define multiply LANE_NAME(multiply)
#define update_and_multiply LANE_NAME(update_and_multiply)
#define tridiagonalise LANE_NAME(tridiagonalise)
#define sweep_rows_vectors LANE_NAME(sweep_rows_vectors)
#define sweep_rows LANE_NAME(sweep_rows)
#define tridiagonal_eigenvalues LANE_NAME(tridiagonal_eigenvalues)
#define solve_all LANE_NAME(solve_all)
#define solve LANE_NAME(solve)

#if defined(__GNUC__) && !defined(SPECTRAL_PLAIN_C) && (LANES & (LANES - 1)) == 0
/* The LANES entries of one position as one value (GCC and clang vector extension): a
 * LANES-wide accumulator stays in registers, where an array of them goes to the stack.
 * Other compilers, a LANES that is not a power of two, or SPECTRAL_PLAIN_C: plain C,
 * the same arithmetic in the same order (the same bits), slower. */
typedef double lanes_t __attribute__((vector_size(LANES * sizeof(double))));
#define LANES_AT(p) (*(lanes_t *)(p))
#define LANE_VECTORS 1
#define GRAM_BLOCK 4 /* Gram entries per block side: 16 accumulators, 8 loads per step */
#else
#define LANE_VECTORS 0
#define GRAM_BLOCK 1
#endif

#if QW > 64
#error "LANES * QR_GROUPS must be at most 64 (a mask of failed lanes is 64 bits)"
#endif
/* The QR sweeps in lane vectors (sweep_rows_vectors) pay only with 32 vector registers of
 * 8 doubles: with AVX2 or SSE2 the state of two groups spills and the plain loop of
 * sweep_rows is faster (measured: 1.8x at n = 64). So the vector form is compiled for
 * AVX-512 alone, and used when the whole build targets it, or, in the clones' build, when
 * the CPU has it (gram_eigenvalues asks once per call). */
#if LANE_VECTORS && LANES == 8 && defined(__AVX512F__) && defined(__AVX512DQ__)
#define SWEEP_VECTORS 1
#define SWEEP_TARGET
#elif LANE_VECTORS && LANES == 8 && defined(KERNEL_CLONES)
#define SWEEP_VECTORS 1
#define SWEEP_TARGET __attribute__((target("arch=x86-64-v4")))
#else
#define SWEEP_VECTORS 0
#endif

/* Interleave matrices first .. first + count - 1 of src into w->x as float64 columns of X.
 * Lanes past count repeat the last matrix (their results are not written out). */
STEP void load_group(Work *w, const void *src, int double_input, Py_ssize_t first, int count) {
    const int m = w->m, n = w->n, r = w->r, s = w->samples;
    /* column by column, so the 8 passes over one column's cache lines hit L1 */
    for (int i = 0; i < r; i++) {
        double *xi = w->x + (size_t)i * s * LANES;
        for (int q = 0; q < LANES; q++) {
            const size_t t = (size_t)(first + (q < count ? q : count - 1));
            /* X = P (m > n): X[k][i] = P[k][i]; X = P^T (m <= n): X[k][i] = P[i][k], read
             * along P's rows (a square P has the same eigenvalues either way) */
            const size_t at = t * m * n + (m > n ? (size_t)i : (size_t)i * n);
            const size_t step = m > n ? (size_t)n : 1;
            if (double_input) {
                const double *p = (const double *)src + at;
                for (int k = 0; k < s; k++) xi[(size_t)k * LANES + q] = p[k * step];
            } else {
                const float *p = (const float *)src + at;
                for (int k = 0; k < s; k++) xi[(size_t)k * LANES + q] = (double)p[k * step];
            }
        }
    }
}

/* trace = sum_i g[i][i], once g is filled. */
STEP void gram_trace(Work *w) {
    const int r = w->r;
    for (int q = 0; q < LANES; q++) w->trace[q] = 0;
    for (int i = 0; i < r; i++)
        for (int q = 0; q < LANES; q++) w->trace[q] += w->g[((size_t)i * r + i) * LANES + q];
}

#if LANE_VECTORS
/* g[i][j] = sum_k X[k][i] X[k][j] for j <= i, GRAM_BLOCK x GRAM_BLOCK entries from one pass
 * over k (each sum in the same order as one entry at a time: the same bits). Entries of a
 * diagonal block above the diagonal are computed and dropped. */
STEP void gram(Work *w) {
    const int r = w->r, s = w->samples;
    for (int ib = 0; ib < r; ib += GRAM_BLOCK)
        for (int jb = 0; jb <= ib; jb += GRAM_BLOCK) {
            const double *xi = w->x + (size_t)ib * s * LANES;
            const double *xj = w->x + (size_t)jb * s * LANES;
            lanes_t acc[GRAM_BLOCK][GRAM_BLOCK];
            for (int a = 0; a < GRAM_BLOCK; a++)
                for (int b = 0; b < GRAM_BLOCK; b++) acc[a][b] = (lanes_t){0};
            for (int k = 0; k < s; k++) {
                lanes_t xa[GRAM_BLOCK], xb[GRAM_BLOCK];
                for (int a = 0; a < GRAM_BLOCK; a++)
                    xa[a] = LANES_AT(xi + ((size_t)a * s + k) * LANES);
                for (int b = 0; b < GRAM_BLOCK; b++)
                    xb[b] = LANES_AT(xj + ((size_t)b * s + k) * LANES);
                for (int a = 0; a < GRAM_BLOCK; a++)
                    for (int b = 0; b < GRAM_BLOCK; b++) acc[a][b] += xa[a] * xb[b];
            }
            for (int a = 0; a < GRAM_BLOCK && ib + a < r; a++)
                for (int b = 0; b < GRAM_BLOCK && jb + b <= ib + a; b++)
                    LANES_AT(w->g + ((size_t)(ib + a) * r + jb + b) * LANES) = acc[a][b];
        }
    gram_trace(w);
}
#else
/* g[i][j] = sum_k X[k][i] X[k][j] for j <= i. */
STEP void gram(Work *w) {
    const int r = w->r, s = w->samples;
    for (int i = 0; i < r; i++) {
        const double *xi = w->x + (size_t)i * s * LANES;
        for (int j = 0; j <= i; j++) {
            const double *xj = w->x + (size_t)j * s * LANES;
            double acc[LANES] = {0};
            for (int k = 0; k < s; k++)
                for (int q = 0; q < LANES; q++) acc[q] += xi[k * LANES + q] * xj[k * LANES + q];
            double *gij = w->g + ((size_t)i * r + j) * LANES;
            for (int q = 0; q < LANES; q++) gij[q] = acc[q];
        }
    }
    gram_trace(w);
}
#endif

/* The reflector of column k (rows k+1 .. r-1 of g, already updated): d[k] = g[k][k],
 * e2[k] = the squared off-diagonal left after it, v[k+1 ..] the Householder vector and
 * beta = 2 / (v . v) (0 for a column already reduced, which then needs no reflection). */
STEP void reflector(Work *w, int k, double *restrict v, double *restrict beta) {
    const int r = w->r;
    const double *g = w->g;
    double tail[LANES] = {0};
    for (int i = k + 2; i < r; i++) {
        const double *restrict gik = g + ((size_t)i * r + k) * LANES;
        for (int q = 0; q < LANES; q++) tail[q] += gik[q] * gik[q];
    }
    const double *restrict x = g + ((size_t)(k + 1) * r + k) * LANES;
    const double *restrict gkk = g + ((size_t)k * r + k) * LANES;
    for (int q = 0; q < LANES; q++) {
        double norm = sqrt(x[q] * x[q] + tail[q]);
        double alpha = x[q] > 0 ? -norm : norm;
        double v0 = x[q] - alpha;
        beta[q] = tail[q] > 0 ? 2.0 / (v0 * v0 + tail[q]) : 0.0;
        AT(v, k + 1)[q] = v0;
        DE(w->d, k)[q] = gkk[q];
        DE(w->e2, k)[q] = tail[q] > 0 ? alpha * alpha : x[q] * x[q];
    }
    for (int i = k + 2; i < r; i++) {
        const double *restrict gik = g + ((size_t)i * r + k) * LANES;
        for (int q = 0; q < LANES; q++) AT(v, i)[q] = gik[q];
    }
}

/* u = beta * A v - (beta^2 / 2) (v . A v) v over rows b .. r-1, from u = A v (the vector
 * of the symmetric rank-2 update A -= v u^T + u v^T). */
STEP void finish_update_vector(int b, int r, const double *restrict v,
                                        double *restrict u, const double *restrict beta) {
    double half[LANES] = {0};
    for (int i = b; i < r; i++)
        for (int q = 0; q < LANES; q++) {
            AT(u, i)[q] *= beta[q];
            half[q] += AT(u, i)[q] * AT(v, i)[q];
        }
    for (int q = 0; q < LANES; q++) half[q] *= 0.5 * beta[q];
    for (int i = b; i < r; i++)
        for (int q = 0; q < LANES; q++) AT(u, i)[q] -= half[q] * AT(v, i)[q];
}

/* next = A nv over rows/columns from..r-1 (A symmetric, lower triangle stored). */
STEP void multiply(Work *w, int from, const double *restrict nv,
                            double *restrict next) {
    const int r = w->r;
    for (int i = from; i < r; i++)
        for (int q = 0; q < LANES; q++) AT(next, i)[q] = 0;
    for (int i = from; i < r; i++) {
        const double *restrict gi = w->g + (size_t)i * r * LANES;
        const double *restrict nvi = AT(nv, i);
        double row_sum[LANES] = {0};
        for (int j = from; j < i; j++) {
            const double *restrict a = gi + (size_t)j * LANES;
            const double *restrict nvj = AT(nv, j);
            double *restrict nj = AT(next, j);
            for (int q = 0; q < LANES; q++) {
                row_sum[q] += a[q] * nvj[q];
                nj[q] += a[q] * nvi[q];
            }
        }
        const double *restrict aii = gi + (size_t)i * LANES;
        for (int q = 0; q < LANES; q++) AT(next, i)[q] += row_sum[q] + aii[q] * nvi[q];
    }
}

/* One pass over rows/columns from..r-1 of the lower triangle: apply the pending update
 * A -= v u^T + u v^T and, when nv is given, accumulate next = A' nv with the updated
 * entries, so each entry is read and written once per step. */
STEP void update_and_multiply(Work *w, int from, const double *restrict v,
                                       const double *restrict u, const double *restrict nv,
                                       double *restrict next) {
    const int r = w->r;
    if (nv)
        for (int i = from; i < r; i++)
            for (int q = 0; q < LANES; q++) AT(next, i)[q] = 0;
    for (int i = from; i < r; i++) {
        double *restrict gi = w->g + (size_t)i * r * LANES;
        const double *restrict vi = AT(v, i), *restrict ui = AT(u, i);
        if (nv) {
            const double *restrict nvi = AT(nv, i);
            double row_sum[LANES] = {0};
            for (int j = from; j < i; j++) {
                double *restrict a = gi + (size_t)j * LANES;
                const double *restrict vj = AT(v, j), *restrict uj = AT(u, j);
                const double *restrict nvj = AT(nv, j);
                double *restrict nj = AT(next, j);
                for (int q = 0; q < LANES; q++) {
                    double x = a[q] - (vi[q] * uj[q] + ui[q] * vj[q]);
                    a[q] = x;
                    row_sum[q] += x * nvj[q];
                    nj[q] += x * nvi[q];
                }
            }
            double *restrict aii = gi + (size_t)i * LANES;
            for (int q = 0; q < LANES; q++) {
                aii[q] -= 2 * vi[q] * ui[q];
                AT(next, i)[q] += row_sum[q] + aii[q] * nvi[q];
            }
        } else {
            for (int j = from; j <= i; j++) {
                double *restrict a = gi + (size_t)j * LANES;
                const double *restrict vj = AT(v, j), *restrict uj = AT(u, j);
                for (int q = 0; q < LANES; q++) a[q] -= vi[q] * uj[q] + ui[q] * vj[q];
            }
        }
    }
}

/* Householder tridiagonalisation of g (lower triangle): diagonal to d, squared
 * off-diagonal to e2 (e2[k] couples k and k + 1). Step k reflects rows/columns k+1..r-1;
 * its rank-2 update is fused with the matrix-vector product of step k + 1. */
STEP void tridiagonalise(Work *w) {
    const int r = w->r;
    double *v = w->v, *u = w->w, *nv = w->v2, *nu = w->w2;
    double beta[LANES], next_beta[LANES];
    if (r >= 3) {
        reflector(w, 0, v, beta);
        multiply(w, 1, v, u);
    }
    for (int k = 0; k + 2 < r; k++) {
        const int b = k + 1;
        finish_update_vector(b, r, v, u, beta);
        /* column b of the update first: the next reflector is built from it */
        for (int i = b; i < r; i++)
            for (int q = 0; q < LANES; q++) {
                double *a = w->g + ((size_t)i * r + b) * LANES;
                a[q] -= AT(v, i)[q] * AT(u, b)[q] + AT(u, i)[q] * AT(v, b)[q];
            }
        if (k + 3 < r) {
            reflector(w, b, nv, next_beta);
            update_and_multiply(w, b + 1, v, u, nv, nu);
            double *t = v; v = nv; nv = t;
            t = u; u = nu; nu = t;
            memcpy(beta, next_beta, sizeof beta);
        } else {
            update_and_multiply(w, b + 1, v, u, NULL, NULL);
        }
    }
    const double *g = w->g;
    for (int q = 0; q < LANES; q++) {
        if (r >= 2) {
            DE(w->d, r - 2)[q] = g[((size_t)(r - 2) * r + (r - 2)) * LANES + q];
            double off = g[((size_t)(r - 1) * r + (r - 2)) * LANES + q];
            DE(w->e2, r - 2)[q] = off * off;
        }
        DE(w->d, r - 1)[q] = g[((size_t)(r - 1) * r + (r - 1)) * LANES + q];
    }
}

/* Rows 0 .. top_bottom - 1 of one QR sweep of each of the QW lanes (Pal-Walker-Kahan, from the
 * state c2, s2, gamma, p of row 0, updated in place): lanes whose active part ends above
 * row i + 1 keep their values. Branch-free: a division whose divisor is 0 divides by 1
 * instead and its result is not used. */
#if SWEEP_VECTORS
typedef long long lanes_mask_t __attribute__((vector_size(LANES * sizeof(double))));
/* m ? a : b lane by lane (m all ones or all zeros per lane) */
#define LANES_SELECT(m, a, b) \
    ((lanes_t)((((lanes_mask_t)(a)) & (m)) | (((lanes_mask_t)(b)) & ~(m))))

/* The state in registers: one vector operation per step for LANES lanes, QR_GROUPS
 * independent chains of divisions in flight. */
SWEEP_TARGET static void sweep_rows_vectors(Work *w, int top_bottom, const int *bottom,
                                            const double *shift, double *c2, double *s2,
                                            double *gamma, double *p) {
    lanes_t first_e2[QR_GROUPS]; /* row i = 0 has no previous off-diagonal entry: a sink
                                  * (lanes_t: aligned for LANES_AT) */
    const lanes_t one = (lanes_t){0} + 1.0, zero = (lanes_t){0};
    lanes_mask_t ends[QR_GROUPS];
    lanes_t C2[QR_GROUPS], S2[QR_GROUPS], G[QR_GROUPS], P[QR_GROUPS], shifts[QR_GROUPS];
    for (int h = 0; h < QR_GROUPS; h++)
        for (int q = 0; q < LANES; q++) {
            ends[h][q] = bottom[h * LANES + q];
            C2[h][q] = c2[h * LANES + q];
            S2[h][q] = s2[h * LANES + q];
            G[h][q] = gamma[h * LANES + q];
            P[h][q] = p[h * LANES + q];
            shifts[h][q] = shift[h * LANES + q];
        }
    for (int i = 0; i < top_bottom; i++) {
        double *eprev_row = i > 0 ? DE(w->e2, i - 1) : (double *)first_e2;
        for (int h = 0; h < QR_GROUPS; h++) {
            double *di = DE(w->d, i) + h * LANES, *dn = DE(w->d, i + 1) + h * LANES;
            double *ei = DE(w->e2, i) + h * LANES, *eprev = eprev_row + h * LANES;
            const lanes_mask_t live = ((lanes_mask_t){0} + i) < ends[h];
            const lanes_t e = LANES_AT(ei), bb = P[h] + e;
            const lanes_mask_t bb_nonzero = bb != zero;
            const lanes_t inv =
                LANES_SELECT(bb_nonzero, one / LANES_SELECT(bb_nonzero, bb, one), zero);
            LANES_AT(eprev) = LANES_SELECT(live, S2[h] * bb, LANES_AT(eprev));
            const lanes_t nc2 = LANES_SELECT(bb_nonzero, P[h] * inv, one);
            const lanes_t ns2 = e * inv;
            const lanes_t a = LANES_AT(dn) - shifts[h];
            const lanes_t ng = nc2 * a - ns2 * G[h];
            const lanes_mask_t c2_nonzero = nc2 != zero;
            const lanes_t np = LANES_SELECT(
                c2_nonzero, ng * ng / LANES_SELECT(c2_nonzero, nc2, one), C2[h] * e);
            LANES_AT(di) = LANES_SELECT(live, G[h] + (a - ng) + shifts[h], LANES_AT(di));
            C2[h] = LANES_SELECT(live, nc2, C2[h]);
            S2[h] = LANES_SELECT(live, ns2, S2[h]);
            G[h] = LANES_SELECT(live, ng, G[h]);
            P[h] = LANES_SELECT(live, np, P[h]);
        }
    }
    for (int h = 0; h < QR_GROUPS; h++)
        for (int q = 0; q < LANES; q++) {
            c2[h * LANES + q] = C2[h][q];
            s2[h * LANES + q] = S2[h][q];
            gamma[h * LANES + q] = G[h][q];
            p[h * LANES + q] = P[h][q];
        }
}
#endif

/* The same arithmetic lane by lane (every build). */
STEP void sweep_rows(Work *w, int top_bottom, const int *bottom, const double *shift,
                     double *c2, double *s2, double *gamma, double *p) {
    double first_e2[QW]; /* row i = 0 has no previous off-diagonal entry: a sink */
    for (int i = 0; i < top_bottom; i++) {
        double *di = DE(w->d, i), *dn = DE(w->d, i + 1), *ei = DE(w->e2, i);
        double *eprev = i > 0 ? DE(w->e2, i - 1) : first_e2;
        for (int q = 0; q < QW; q++) {
            const int live = i < bottom[q];
            double bb = p[q] + ei[q];
            double inv = 1.0 / (bb != 0 ? bb : 1.0);
            inv = bb != 0 ? inv : 0.0;
            eprev[q] = live ? s2[q] * bb : eprev[q];
            double old_c2 = c2[q], old_gamma = gamma[q];
            double nc2 = bb != 0 ? p[q] * inv : 1.0;
            double ns2 = ei[q] * inv;
            double a = dn[q] - shift[q];
            double ng = nc2 * a - ns2 * old_gamma;
            double np = ng * ng / (nc2 != 0 ? nc2 : 1.0);
            np = nc2 != 0 ? np : old_c2 * ei[q];
            di[q] = live ? old_gamma + (a - ng) + shift[q] : di[q];
            c2[q] = live ? nc2 : c2[q];
            s2[q] = live ? ns2 : s2[q];
            gamma[q] = live ? ng : gamma[q];
            p[q] = live ? np : p[q];
        }
    }
}

/* Eigenvalues of the tridiagonal (d, e2) of each of the QW lanes (QR_GROUPS groups side by
 * side), into d. Each lane keeps its own
 * active bottom index; a sweep runs over rows 0 .. bottom of every active lane together
 * (a lane past its bottom is left unchanged). A negligible interior entry needs no split:
 * the sweep passes through it as a fresh start. Returns a mask of lanes that failed. */
STEP unsigned long long tridiagonal_eigenvalues(Work *w) {
    const int r = w->r;
    const double eps = 2.220446049250313e-16, eps2 = eps * eps;
    double *d = w->d, *e2 = w->e2;
    int bottom[QW], sweeps = 0;
    unsigned long long failed = 0;
    double floor2[QW];
    for (int q = 0; q < QW; q++) {
        bottom[q] = r - 1;
        double tol = eps * fabs(w->trace[q]);
        floor2[q] = tol * tol;
    }
    const int max_sweeps = MAX_SWEEPS_PER_EIGENVALUE * r;
    for (;;) {
        int top_bottom = 0;
        double shift[QW];
        for (int q = 0; q < QW; q++) {
            int mq = bottom[q];
            while (mq > 0) { /* deflate converged eigenvalues at the bottom */
                double e = DE(e2, mq - 1)[q];
                double dd = fabs(DE(d, mq - 1)[q] * DE(d, mq)[q]);
                if (e <= eps2 * dd || e <= floor2[q] || !(e == e)) {
                    if (!(e == e)) failed |= 1ULL << q;
                    mq--;
                } else {
                    break;
                }
            }
            bottom[q] = mq;
            if (mq > top_bottom) top_bottom = mq;
            if (mq > 0) { /* Wilkinson's shift from the trailing 2 x 2 block */
                double a = DE(d, mq - 1)[q], c = DE(d, mq)[q], b2 = DE(e2, mq - 1)[q];
                double delta = 0.5 * (a - c);
                double root = sqrt(delta * delta + b2);
                shift[q] = c - b2 / (delta + (delta >= 0 ? root : -root));
            } else {
                shift[q] = 0;
            }
        }
        if (top_bottom == 0) break;
        if (++sweeps > max_sweeps) {
            for (int q = 0; q < QW; q++)
                if (bottom[q] > 0) failed |= 1ULL << q;
            break;
        }
        double c2[QW], s2[QW], gamma[QW], p[QW];
        for (int q = 0; q < QW; q++) {
            c2[q] = 1;
            s2[q] = 0;
            gamma[q] = DE(d, 0)[q] - shift[q];
            p[q] = gamma[q] * gamma[q];
        }
#if SWEEP_VECTORS
        if (w->vector_sweeps)
            sweep_rows_vectors(w, top_bottom, bottom, shift, c2, s2, gamma, p);
        else
#endif
            sweep_rows(w, top_bottom, bottom, shift, c2, s2, gamma, p);
        for (int q = 0; q < QW; q++) {
            int mq = bottom[q];
            if (mq > 0) {
                DE(e2, mq - 1)[q] = s2[q] * p[q];
                DE(d, mq)[q] = gamma[q] + shift[q];
            }
        }
    }
    return failed;
}

MULTIVERSION
static Py_ssize_t solve_all(Work *w, const void *src, int double_input, Py_ssize_t count,
                            double *out) {
    Py_ssize_t failures = 0;
    const int r = w->r;
    for (Py_ssize_t first = 0; first < count; first += QW) {
        for (int h = 0; h < QR_GROUPS; h++) {
            const Py_ssize_t start = first + (Py_ssize_t)h * LANES;
            w->d = w->d_all + h * LANES;
            w->e2 = w->e2_all + h * LANES;
            w->trace = w->trace_all + h * LANES;
            if (start < count) {
                int here = (int)(count - start < LANES ? count - start : LANES);
                load_group(w, src, double_input, start, here);
                gram(w);
                tridiagonalise(w);
            } else { /* no matrices: zeros, deflated at once */
                for (int i = 0; i < r; i++)
                    for (int q = 0; q < LANES; q++) DE(w->d, i)[q] = DE(w->e2, i)[q] = 0;
                for (int q = 0; q < LANES; q++) w->trace[q] = 0;
            }
        }
        w->d = w->d_all;
        w->e2 = w->e2_all;
        w->trace = w->trace_all;
        unsigned long long failed = tridiagonal_eigenvalues(w);
        int here = (int)(count - first < QW ? count - first : QW);
        for (int q = 0; q < here; q++) {
            double *row = out + (size_t)(first + q) * r;
            for (int i = 0; i < r; i++) row[i] = (failed >> q) & 1 ? NAN : DE(w->d, i)[q];
            failures += (failed >> q) & 1;
        }
    }
    return failures;
}

/* gram_eigenvalues for LANES lanes, once its arguments are checked: 0, or -1 when the work
 * space cannot be allocated. Called with the GIL held; releases it while computing. */
static int solve(const void *src, int double_input, Py_ssize_t count, int m, int n,
                 double *out, Py_ssize_t *failures) {
    const int r = m < n ? m : n;
    Work w = {.m = m, .n = n, .r = r, .samples = m > n ? m : n};
#if SWEEP_VECTORS && defined(KERNEL_CLONES)
    w.vector_sweeps = cpu_has_avx512();
#elif SWEEP_VECTORS
    w.vector_sweeps = 1;
#endif
    const size_t lanes = LANES * sizeof(double);
    const size_t columns = ((size_t)r + GRAM_BLOCK - 1) / GRAM_BLOCK * GRAM_BLOCK;
    /* one spare row of lanes to align the work space to a whole row (lanes_t loads) */
    double *block = calloc(columns * w.samples + (size_t)r * r + 4 * (size_t)r +
                           2 * QR_GROUPS * (size_t)r + QR_GROUPS + 1, lanes);
    if (block == NULL) return -1;
    w.x = (double *)(((uintptr_t)block + lanes - 1) / lanes * lanes);
    w.g = w.x + columns * w.samples * LANES;
    w.v = w.g + (size_t)r * r * LANES;
    w.w = w.v + (size_t)r * LANES;
    w.v2 = w.w + (size_t)r * LANES;
    w.w2 = w.v2 + (size_t)r * LANES;
    w.d_all = w.w2 + (size_t)r * LANES;
    w.e2_all = w.d_all + (size_t)r * QW;
    w.trace_all = w.e2_all + (size_t)r * QW;
    Py_BEGIN_ALLOW_THREADS
    if (count > 0) *failures = solve_all(&w, src, double_input, count, out);
    Py_END_ALLOW_THREADS
    free(block);
    return 0;
}

#undef LANE_VECTORS
#undef GRAM_BLOCK
#undef LANES_AT
#undef SWEEP_VECTORS
#undef SWEEP_TARGET
#undef LANES_SELECT
#undef lanes_t
#undef lanes_mask_t
#undef load_group
#undef gram_trace
#undef gram
#undef reflector
#undef finish_update_vector
#undef multiply
#undef update_and_multiply
#undef tridiagonalise
#undef sweep_rows_vectors
#undef sweep_rows
#undef tridiagonal_eigenvalues
#undef solve_all
#undef solve
#endif
