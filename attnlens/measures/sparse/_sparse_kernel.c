/* Sparse coverage of many attention rows in one pass: the CPU path of sparse.py.
 *
 * For each (sentence, head) of a padded batch, pattern P [n, n] (float32) and values
 * V [n, d] (float32, the head's key/value head), and each real query row i, one walk over
 * the row's keys in order of distance |i - j| (0, then the two keys at 1, ...) gives:
 *
 *   - the mass at each distance (all keys, and the keys that are not global), in buckets
 *     0 .. top (the last bucket holds every distance >= top);
 *   - each window's kept mass m_w = sum_{|i-j| <= w} p_ij and product W_w = sum p_ij v_j
 *     (snapshots of the running sums as the walk passes w), and the whole row's product
 *     P_i V once the walk ends;
 *   - the global keys' product G and mass (and, as the walk passes each window, the part of
 *     them inside it: the window+global set adds the global keys outside the window);
 *   - BigBird's kept keys (a 0/1 mask per row, shared by every head) summed separately;
 *
 * and from them each set's squared output error ||P_i V - K_i / m_i||^2 (K the set's
 * product, m its mass), added over the rows, and ||P_i V||^2. Every sum is accumulated in
 * float64 (the torch path rounds to float32 between its operations: the results agree to
 * float32 rounding, and with that path's float64 reference more closely). No floating-point
 * contraction (ISO C mode, -std=c99: no FMA) and no reassociation: the vector loops run
 * over the value dimension, whose lanes are independent, so every build and CPU gives the
 * same bits.
 *
 * Python interface:
 *   fold(pattern, values, rows, is_global, bigbird, windows, picked, total, batch, heads, n,
 *        kv_heads, d, top, first, stop, squared, norms, by_distance, nonglobal, masses)
 * pattern float32 [total, heads, n, n]; values float32 [total, n, kv_heads, d] (query head
 * h reads kv head h / (heads / kv_heads)); picked int64 [batch]: the sentences of those read,
 * in [0, total) (a sample read where it lies, not copied out first); rows, is_global uint8
 * [batch, n] (the picked sentences' real tokens, global keys); bigbird uint8 [batch, n, n]; windows int32 [n_windows] ascending, each
 * <= top - 1; outputs float64, written for the (sentence, head) pairs first .. stop - 1 of
 * the batch-major order only (threads may split a batch): squared [batch, heads,
 * 2 * n_windows + 2] (window w, window+global w, global, BigBird; a window holding every key
 * of the padded length, w >= n - 1, is left 0), norms [batch, heads], by_distance and
 * nonglobal [batch, heads, buckets] with buckets = min(n - 1, top) + 1, masses
 * [batch, heads, 2] (global, BigBird). The GIL is released while computing.
 */
#include "kernel_common.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WINDOWS 64

typedef struct {
    const float *pattern, *values;
    const uint8_t *rows, *is_global, *bigbird;
    const int *windows;
    const int64_t *picked;
    int n_windows, heads, n, kv_heads, d, top, buckets;
    double *squared, *norms, *by_distance, *nonglobal, *masses;
} Fold;

/* acc += p * v over the value dimension. */
STEP void add_scaled(double *acc, const float *v, double p, int d) {
    for (int k = 0; k < d; k++) acc[k] += p * (double)v[k];
}

/* ||full - product / mass||^2, the mass clamped to float32's smallest normal (as torch). */
STEP double error_of(const double *full, const double *product, double mass, int d) {
    const double scale = 1.0 / (mass > FLT_MIN ? mass : FLT_MIN);
    double sum = 0.0;
    for (int k = 0; k < d; k++) {
        const double diff = full[k] - product[k] * scale;
        sum += diff * diff;
    }
    return sum;
}

/* The row i of one (sentence, head): its contributions to the pair's outputs. */
STEP void fold_row(const Fold *f, const float *p, const float *V, size_t v_stride,
                   const uint8_t *global, const uint8_t *keep, int i, double *work,
                   double *squared, double *by_distance, double *nonglobal, double *masses) {
    const int n = f->n, d = f->d, nw = f->n_windows;
    double *run = work, *g_in = work + d, *glob = work + 2 * d, *big = work + 3 * d;
    double *windows = work + 4 * d;           /* [n_windows, d] snapshots of run */
    double *g_inside = windows + (size_t)nw * d; /* [n_windows, d] snapshots of g_in */
    double window_mass[MAX_WINDOWS], inside_mass[MAX_WINDOWS];
    memset(work, 0, sizeof(double) * 4 * (size_t)d);
    double mass = 0.0, g_in_mass = 0.0, g_mass = 0.0, big_mass = 0.0;
    int next = 0; /* the next window to snapshot */
    const int reach = i > n - 1 - i ? i : n - 1 - i; /* the largest distance in the row */
    for (int dist = 0; dist <= reach; dist++) {
        for (int side = 0; side < (dist == 0 ? 1 : 2); side++) {
            const int j = side == 0 ? i - dist : i + dist;
            if (j < 0 || j >= n) continue;
            const double w = (double)p[j];
            by_distance[dist < f->top ? dist : f->top] += w;
            if (!global[j]) nonglobal[dist < f->top ? dist : f->top] += w;
            if (w == 0.0) continue; /* adds nothing to any sum below */
            const float *v = V + (size_t)j * v_stride;
            mass += w;
            add_scaled(run, v, w, d);
            if (global[j]) {
                g_in_mass += w;
                add_scaled(g_in, v, w, d);
            }
        }
        while (next < nw && f->windows[next] == dist) {
            memcpy(windows + (size_t)next * d, run, sizeof(double) * d);
            memcpy(g_inside + (size_t)next * d, g_in, sizeof(double) * d);
            window_mass[next] = mass;
            inside_mass[next] = g_in_mass;
            next++;
        }
    }
    /* windows wider than the row's reach hold the whole row */
    for (; next < nw; next++) {
        memcpy(windows + (size_t)next * d, run, sizeof(double) * d);
        memcpy(g_inside + (size_t)next * d, g_in, sizeof(double) * d);
        window_mass[next] = mass;
        inside_mass[next] = g_in_mass;
    }
    const double *full = run;
    for (int j = 0; j < n; j++) {
        const double w = (double)p[j];
        if (w == 0.0 || !(global[j] || keep[j])) continue;
        const float *v = V + (size_t)j * v_stride;
        if (global[j]) {
            g_mass += w;
            add_scaled(glob, v, w, d);
        }
        if (keep[j]) {
            big_mass += w;
            add_scaled(big, v, w, d);
        }
    }
    double *product = g_in; /* g_in is no longer needed: the window+global product */
    for (int k = 0; k < nw; k++) {
        if (f->windows[k] >= n - 1) continue; /* every key of the padded length: no error */
        const double *win = windows + (size_t)k * d, *inside = g_inside + (size_t)k * d;
        squared[k] += error_of(full, win, window_mass[k], d);
        for (int e = 0; e < d; e++) product[e] = win[e] + (glob[e] - inside[e]);
        squared[nw + k] += error_of(full, product,
                                    window_mass[k] + (g_mass - inside_mass[k]), d);
    }
    squared[2 * nw] += error_of(full, glob, g_mass, d);
    squared[2 * nw + 1] += error_of(full, big, big_mass, d);
    masses[0] += g_mass;
    masses[1] += big_mass;
}

MULTIVERSION
static void fold_pairs(const Fold *f, Py_ssize_t first, Py_ssize_t stop, double *work) {
    const int n = f->n, d = f->d, nw = f->n_windows, sets = 2 * nw + 2;
    const int group = f->heads / f->kv_heads;
    const size_t v_stride = (size_t)f->kv_heads * d;
    for (Py_ssize_t pair = first; pair < stop; pair++) {
        const int b = (int)(pair / f->heads), h = (int)(pair % f->heads);
        const size_t s = (size_t)f->picked[b]; /* the sentence read */
        const float *P = f->pattern + (s * f->heads + h) * n * n;
        const float *V = f->values + s * n * v_stride + (size_t)(h / group) * d;
        const uint8_t *rows = f->rows + (size_t)b * n, *global = f->is_global + (size_t)b * n;
        double *squared = f->squared + (size_t)pair * sets;
        double *by_distance = f->by_distance + (size_t)pair * f->buckets;
        double *nonglobal = f->nonglobal + (size_t)pair * f->buckets;
        double *masses = f->masses + (size_t)pair * 2;
        memset(squared, 0, sizeof(double) * sets);
        memset(by_distance, 0, sizeof(double) * f->buckets);
        memset(nonglobal, 0, sizeof(double) * f->buckets);
        memset(masses, 0, sizeof(double) * 2);
        double norm = 0.0;
        for (int i = 0; i < n; i++) {
            if (!rows[i]) continue;
            const uint8_t *keep = f->bigbird + ((size_t)b * n + i) * n;
            fold_row(f, P + (size_t)i * n, V, v_stride, global, keep, i, work, squared,
                     by_distance, nonglobal, masses);
            for (int k = 0; k < d; k++) norm += work[k] * work[k]; /* run: the full row */
        }
        f->norms[pair] = norm;
    }
}

static PyObject *fold(PyObject *self, PyObject *args) {
    Py_buffer pattern, values, rows, is_global, bigbird, windows, picked, squared, norms,
        by_distance, nonglobal, masses;
    int total, batch, heads, n, kv_heads, d, top;
    Py_ssize_t first, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*iiiiiiinnw*w*w*w*w*", &pattern, &values, &rows,
                          &is_global, &bigbird, &windows, &picked, &total, &batch, &heads, &n,
                          &kv_heads, &d, &top, &first, &stop, &squared, &norms, &by_distance,
                          &nonglobal, &masses))
        return NULL;
    PyObject *result = NULL;
    const int nw = (int)(windows.len / sizeof(int));
    const int buckets = (n - 1 < top ? n - 1 : top) + 1;
    const size_t B = (size_t)batch, H = (size_t)heads, N = (size_t)n, T = (size_t)total;
    int ok = batch >= 0 && total >= 0 && heads >= 1 && n >= 1 && kv_heads >= 1 && heads % kv_heads == 0 &&
             d >= 1 && top >= 1 && nw >= 1 && nw <= MAX_WINDOWS && first >= 0 &&
             first <= stop && (size_t)stop <= B * H;
    if (!ok) PyErr_SetString(PyExc_ValueError, "bad shapes or pair range");
    for (int k = 0; ok && k < nw; k++) {
        const int w = ((const int *)windows.buf)[k];
        if (w < 0 || w >= top || (k > 0 && w <= ((const int *)windows.buf)[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "windows must ascend within 0 .. top - 1");
            ok = 0;
        }
    }
    ok = ok && check_size(&pattern, T * H * N * N, sizeof(float), "pattern") &&
         check_size(&values, T * N * kv_heads * d, sizeof(float), "values") &&
         check_size(&picked, B, sizeof(int64_t), "picked") &&
         check_size(&rows, B * N, 1, "rows") && check_size(&is_global, B * N, 1, "is_global") &&
         check_size(&bigbird, B * N * N, 1, "bigbird") &&
         check_size(&squared, B * H * (2 * nw + 2), sizeof(double), "squared") &&
         check_size(&norms, B * H, sizeof(double), "norms") &&
         check_size(&by_distance, B * H * buckets, sizeof(double), "by_distance") &&
         check_size(&nonglobal, B * H * buckets, sizeof(double), "nonglobal") &&
         check_size(&masses, B * H * 2, sizeof(double), "masses");
    for (size_t b = 0; ok && b < B; b++)
        if (((const int64_t *)picked.buf)[b] < 0 || ((const int64_t *)picked.buf)[b] >= total) {
            PyErr_SetString(PyExc_ValueError, "picked holds a sentence outside the batch");
            ok = 0;
        }
    if (ok) {
        double *work = malloc(sizeof(double) * (4 + 2 * (size_t)nw) * d);
        if (work == NULL) {
            PyErr_NoMemory();
        } else {
            Fold f = {.pattern = pattern.buf, .values = values.buf, .rows = rows.buf,
                      .is_global = is_global.buf, .bigbird = bigbird.buf,
                      .windows = windows.buf, .picked = picked.buf, .n_windows = nw, .heads = heads, .n = n,
                      .kv_heads = kv_heads, .d = d, .top = top, .buckets = buckets,
                      .squared = squared.buf, .norms = norms.buf,
                      .by_distance = by_distance.buf, .nonglobal = nonglobal.buf,
                      .masses = masses.buf};
            Py_BEGIN_ALLOW_THREADS
            fold_pairs(&f, first, stop, work);
            Py_END_ALLOW_THREADS
            free(work);
            result = Py_NewRef(Py_None);
        }
    }
    RELEASE_BUFFERS(&pattern, &values, &rows, &is_global, &bigbird, &windows, &picked,
                    &squared, &norms, &by_distance, &nonglobal, &masses);
    return result;
}

static PyMethodDef methods[] = {
    {"fold", fold, METH_VARARGS,
     "fold(pattern, values, rows, is_global, bigbird, windows, picked, total, batch, heads, n, "
     "kv_heads, d, top, first, stop, squared, norms, by_distance, nonglobal, masses) -> None"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_sparse_kernel,
             "Sparse coverage's masses and output errors of many attention rows in one pass.");

PyMODINIT_FUNC PyInit__sparse_kernel(void) { return PyModule_Create(&module); }
