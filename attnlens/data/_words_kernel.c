/* Word pooling of whole attention patterns, and the syntactic and rare-word heads' credits.
 *
 * The CPU path of attnlens/data/words.py (whole patterns) and of the heads that read it,
 * attnlens/measures/heads/syntactic.py and rare_words.py.
 *
 * pool: for each (sentence, head) of a padded batch, the token pattern P [n, n] (float32)
 * becomes the word matrix W [n_words, n_words] as words.word_attention computes it (Clark et
 * al. 2019): the row of word q is the mean of its tokens' rows, r[t] = sum_s a_q P[s, t] over
 * q's tokens s in ascending order, a_q = 1 / tokens(q) in float32 and each step a fused
 * multiply-add (fmaf: one rounding, the same bits on every build; torch's float32 matmul,
 * MKL's FMA kernels, computes this sequence, so W is bit for bit the torch path's); then the
 * column of word k sums r over k's tokens in ascending order (float32 adds). Words without
 * tokens (padding slots, words without a token of their own) hold exactly 0.
 *
 * From W, every comparison and credit of the torch path, in the same float32 arithmetic:
 *
 *   syntactic: with W's diagonal set to -1 (a word never picks itself), each row's maximum
 *   and its ties (slots holding the maximum, less the padding slots when it is 0, at least
 *   1), and each column's maximum over the real rows and its ties. For each arc (dependent,
 *   head) of the sentence, in order: dep->head adds is_max / ties of the dependent's row at
 *   the head, head->dep the same of the head's row at the dependent, and Clark's column
 *   question adds (W[head, dep] == the column's maximum) / its ties, into out[pair,
 *   direction, head] in float32, arcs in order (the torch path's index_add_ order).
 *
 *   rare: each row's maximum (the diagonal set to -1 with exclude) and its ties as above;
 *   for each attending row (query word and its k rarest words), in order, hits = how many
 *   of the k hold the row's maximum, and hits * (1 / ties) adds into out[into, head].
 *
 * Python interface (int arrays int32, C order; out float32, zeroed by the caller):
 *   pool(pattern, starts, positions, batch, heads, n, n_words, first, stop, W)
 *   syntactic(W, starts, arcs, arc_start, batch, heads, n_words, first, stop, out)
 *   rare(W, starts, rows, row_start, width, exclude, batch, heads, n_words, first, stop, out)
 * pattern float32 [batch, heads, n, n]; W float32 [batch, heads, n_words, n_words]; starts
 * [batch, n_words + 1] and positions [batch, n]: word w's tokens are positions[b, starts[b, w]
 * .. starts[b, w + 1] - 1], ascending; arcs [arc, 4] (sentence, dependent, head, pair) sorted
 * by sentence, arc_start [batch + 1] each sentence's first arc, out [pairs, 3, heads]; rows
 * [row, width] (sentence, query word, into, k, the k words, unused slots) sorted by
 * sentence, row_start [batch + 1], out [into, heads]. Only the (sentence, head) pairs
 * first .. stop - 1 (batch-major) are computed: threads split a batch, each writing its own
 * cells. The GIL is released while computing.
 */
#include "kernel_common.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *pattern, *W;
    const int32_t *starts, *positions, *items, *item_start;
    int heads, n, n_words, width, exclude;
    float *out;
} Words;

/* The pair's word matrix W [n_words, n_words] from its pattern P [n, n]; row: scratch [n].
 * A word of one token reads its row as it is: fmaf(1, p, 0) = p. */
STEP void pool_pair(const Words *f, const float *P, const int32_t *starts, const int32_t *pos,
                    float *W, float *row) {
    const int n = f->n, nw = f->n_words;
    for (int q = 0; q < nw; q++) {
        float *Wq = W + (size_t)q * nw;
        const int begin = starts[q], end = starts[q + 1];
        if (begin == end) {
            memset(Wq, 0, sizeof(float) * nw);
            continue;
        }
        const float *r = P + (size_t)pos[begin] * n;
        if (end - begin > 1) {
            const float a = 1.0f / (float)(end - begin);
            memset(row, 0, sizeof(float) * n);
            for (int s = begin; s < end; s++) {
                const float *Ps = P + (size_t)pos[s] * n;
                for (int t = 0; t < n; t++) row[t] = fmaf(a, Ps[t], row[t]);
            }
            r = row;
        }
        for (int k = 0; k < nw; k++) {
            float sum = 0.0f;
            for (int t = starts[k]; t < starts[k + 1]; t++) sum += r[pos[t]];
            Wq[k] = sum;
        }
    }
}

MULTIVERSION
static void pool_pairs(const Words *f, Py_ssize_t first, Py_ssize_t stop, float *row) {
    const int nw = f->n_words;
    for (Py_ssize_t pair = first; pair < stop; pair++) {
        const int b = (int)(pair / f->heads);
        pool_pair(f, f->pattern + (size_t)pair * f->n * f->n,
                  f->starts + (size_t)b * (nw + 1), f->positions + (size_t)b * f->n,
                  (float *)f->W + (size_t)pair * nw * nw, row);
    }
}

/* Each row's maximum top[q] and ties[q] (slots >= the maximum, less the padding slots when
 * it is 0, at least 1), over every word slot, as the torch path counts them. */
STEP void row_maxima(const float *W, int nw, int padding, float *top, int *ties) {
    for (int q = 0; q < nw; q++) {
        const float *Wq = W + (size_t)q * nw;
        float m = Wq[0];
        for (int k = 1; k < nw; k++) m = Wq[k] > m ? Wq[k] : m;
        int count = 0;
        for (int k = 0; k < nw; k++) count += Wq[k] >= m;
        if (m == 0.0f) count -= padding;
        top[q] = m;
        ties[q] = count > 1 ? count : 1;
    }
}

STEP int padding_of(const int32_t *starts, int nw) {
    int padding = 0;
    for (int w = 0; w < nw; w++) padding += starts[w] == starts[w + 1];
    return padding;
}

/* Each column's maximum over the real rows (the others count as -2, never winning) and its
 * ties (at least 1), row by row (the loops run along the columns, independent lanes). */
STEP void column_maxima(const float *W, const int32_t *starts, int nw, float *top, int *ties) {
    for (int k = 0; k < nw; k++) top[k] = -2.0f;
    for (int q = 0; q < nw; q++) {
        if (starts[q] == starts[q + 1]) continue;
        const float *Wq = W + (size_t)q * nw;
        for (int k = 0; k < nw; k++) top[k] = Wq[k] > top[k] ? Wq[k] : top[k];
    }
    for (int k = 0; k < nw; k++) ties[k] = 0;
    for (int q = 0; q < nw; q++) {
        const float *Wq = W + (size_t)q * nw;
        if (starts[q] == starts[q + 1])
            for (int k = 0; k < nw; k++) ties[k] += -2.0f >= top[k];
        else
            for (int k = 0; k < nw; k++) ties[k] += Wq[k] >= top[k];
    }
    for (int k = 0; k < nw; k++) ties[k] = ties[k] > 1 ? ties[k] : 1;
}

/* One (sentence, head) pair of a credit pass: its head, its sentence's word starts
 * [n_words + 1] and items begin .. end - 1. */
typedef struct {
    int head, begin, end;
    const int32_t *starts;
} Pair;

/* Opens pair `pair` (p): its word matrix copied into W [n_words, n_words] (the diagonal set
 * to -1 with exclude) and each row's maximum top and ties (row_maxima); 0, and neither done,
 * when its sentence holds no items. Both credit passes' pair loops start so. */
STEP int open_pair(const Words *f, Py_ssize_t pair, int exclude, float *W, float *top,
                   int *ties, Pair *p) {
    const int nw = f->n_words, b = (int)(pair / f->heads);
    p->head = (int)(pair % f->heads);
    p->starts = f->starts + (size_t)b * (nw + 1);
    p->begin = f->item_start[b];
    p->end = f->item_start[b + 1];
    if (p->begin == p->end) return 0;
    memcpy(W, f->W + (size_t)pair * nw * nw, sizeof(float) * nw * nw);
    if (exclude)
        for (int q = 0; q < nw; q++) W[(size_t)q * nw + q] = -1.0f;
    row_maxima(W, nw, padding_of(p->starts, nw), top, ties);
    return 1;
}

MULTIVERSION
static void syntactic_pairs(const Words *f, Py_ssize_t first, Py_ssize_t stop, float *work) {
    const int nw = f->n_words, heads = f->heads;
    float *W = work, *top = W + (size_t)nw * nw, *col_top = top + nw;
    int *ties = (int *)(col_top + nw), *col_ties = ties + nw;
    for (Py_ssize_t pair = first; pair < stop; pair++) {
        Pair p;
        if (!open_pair(f, pair, 1, W, top, ties, &p)) continue; /* a word never picks itself */
        const int32_t *starts = p.starts;
        const int h = p.head;
        column_maxima(W, starts, nw, col_top, col_ties);
        for (int a = p.begin; a < p.end; a++) {
            const int32_t *arc = f->items + (size_t)a * 4;
            const int dep = arc[1], head = arc[2];
            const float dep_here = starts[dep] < starts[dep + 1];
            const float head_here = starts[head] < starts[head + 1];
            const float to_head = W[(size_t)dep * nw + head], to_dep = W[(size_t)head * nw + dep];
            float *out = f->out + (size_t)arc[3] * 3 * heads + h;
            out[0] += (float)(to_head >= top[dep]) / (float)ties[dep] * dep_here;
            out[heads] += (float)(to_dep >= top[head]) / (float)ties[head] * head_here;
            const float value = head_here != 0.0f ? to_dep : 0.0f;
            out[2 * heads] += (float)(value == col_top[dep]) / (float)col_ties[dep];
        }
    }
}

MULTIVERSION
static void rare_pairs(const Words *f, Py_ssize_t first, Py_ssize_t stop, float *work) {
    const int nw = f->n_words, heads = f->heads;
    float *W = work, *top = W + (size_t)nw * nw;
    int *ties = (int *)(top + nw);
    for (Py_ssize_t pair = first; pair < stop; pair++) {
        Pair p;
        if (!open_pair(f, pair, f->exclude, W, top, ties, &p)) continue;
        const int32_t *starts = p.starts;
        const int h = p.head;
        for (int r = p.begin; r < p.end; r++) {
            const int32_t *item = f->items + (size_t)r * f->width;
            const int q = item[1], k = item[3];
            int hits = 0;
            for (int t = 0; t < k; t++) hits += W[(size_t)q * nw + item[4 + t]] >= top[q];
            const float here = starts[q] < starts[q + 1];
            f->out[(size_t)item[2] * heads + h] += (float)hits * (1.0f / (float)ties[q]) * here;
        }
    }
}

/* Checks the shapes, the pair range and the word tokens (starts, and positions where given). */
static int check_words(Words *f, Py_buffer *starts, Py_buffer *positions, int batch,
                       Py_ssize_t first, Py_ssize_t stop) {
    const size_t B = (size_t)batch, N = (size_t)f->n, NW = (size_t)f->n_words;
    if (batch < 0 || f->heads < 1 || f->n < 1 || f->n_words < 0 || first < 0 ||
        first > stop || (size_t)stop > B * (size_t)f->heads) {
        PyErr_SetString(PyExc_ValueError, "bad shapes or pair range");
        return 0;
    }
    if (!check_size(starts, B * (NW + 1), sizeof(int32_t), "starts") ||
        (positions != NULL && !check_size(positions, B * N, sizeof(int32_t), "positions")))
        return 0;
    const int32_t *s = starts->buf;
    for (size_t b = 0; b < B; b++) {
        const int32_t *sb = s + b * (NW + 1);
        int ok = sb[0] == 0 && (positions == NULL || sb[NW] <= f->n);
        for (size_t w = 0; ok && w < NW; w++) ok = sb[w + 1] >= sb[w];
        for (int32_t t = 0; ok && positions != NULL && t < sb[NW]; t++) {
            const int32_t p = ((const int32_t *)positions->buf)[b * N + t];
            ok = p >= 0 && p < f->n;
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "word tokens out of range");
            return 0;
        }
    }
    f->starts = starts->buf;
    f->positions = positions != NULL ? positions->buf : NULL;
    return 1;
}

/* Checks the items (arcs: width 4; rows: width >= 5) and their sentences' offsets: each
 * item in its sentence, its words within 0 .. n_words - 1, its output row below out_rows. */
static int check_items(Words *f, Py_buffer *items, Py_buffer *item_start, int batch, int width,
                       size_t out_rows) {
    const size_t B = (size_t)batch, NW = (size_t)f->n_words;
    if (items->len % (width * sizeof(int32_t)) ||
        !check_size(item_start, B + 1, sizeof(int32_t), "item_start"))
        goto bad;
    const int32_t *it = items->buf, *at = item_start->buf;
    const size_t n_items = items->len / (width * sizeof(int32_t));
    if (at[0] != 0 || (size_t)at[B] != n_items) goto bad;
    for (size_t b = 0; b < B; b++) {
        if (at[b + 1] < at[b]) goto bad;
        for (int32_t i = at[b]; i < at[b + 1]; i++) {
            const int32_t *item = it + (size_t)i * width;
            if (item[0] != (int32_t)b) goto bad;
            if (width != 4 && (item[3] < 0 || 4 + item[3] > width)) goto bad;
            const int words = width == 4 ? 2 : 1 + item[3];
            for (int k = 0; k < words; k++) {
                const int32_t w = width == 4 ? item[1 + k] : (k == 0 ? item[1] : item[3 + k]);
                if (w < 0 || (size_t)w >= NW) goto bad;
            }
            const int32_t into = width == 4 ? item[3] : item[2];
            if (into < 0 || (size_t)into >= out_rows) goto bad;
        }
    }
    f->items = items->buf;
    f->item_start = item_start->buf;
    f->width = width;
    return 1;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "items or their offsets out of range");
    return 0;
}

static PyObject *pool(PyObject *self, PyObject *args) {
    Py_buffer pattern, starts, positions, W;
    int batch;
    Py_ssize_t first, stop;
    Words f = {0};
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*iiiinnw*", &pattern, &starts, &positions, &batch,
                          &f.heads, &f.n, &f.n_words, &first, &stop, &W))
        return NULL;
    PyObject *result = NULL;
    const size_t pairs = (size_t)(batch > 0 ? batch : 0) * (size_t)(f.heads > 0 ? f.heads : 0);
    const size_t N = (size_t)(f.n > 0 ? f.n : 0), NW = (size_t)(f.n_words > 0 ? f.n_words : 0);
    if (check_words(&f, &starts, &positions, batch, first, stop) &&
        check_size(&pattern, pairs * N * N, sizeof(float), "pattern") &&
        check_size(&W, pairs * NW * NW, sizeof(float), "W")) {
        float *row = malloc(sizeof(float) * N);
        if (row == NULL) {
            PyErr_NoMemory();
        } else {
            f.pattern = pattern.buf;
            f.W = W.buf;
            Py_BEGIN_ALLOW_THREADS
            pool_pairs(&f, first, stop, row);
            Py_END_ALLOW_THREADS
            free(row);
            result = Py_NewRef(Py_None);
        }
    }
    RELEASE_BUFFERS(&pattern, &starts, &positions, &W);
    return result;
}

/* The credits of syntactic (width 4) or rare (wider rows) from W, into out. */
static PyObject *credit(Words *f, Py_buffer *W, Py_buffer *starts, Py_buffer *items,
                        Py_buffer *item_start, Py_buffer *out, int batch, int width,
                        size_t out_width, Py_ssize_t first, Py_ssize_t stop) {
    const size_t H = (size_t)(f->heads > 0 ? f->heads : 1);
    const size_t NW = (size_t)(f->n_words > 0 ? f->n_words : 0);
    const size_t out_rows = (size_t)out->len / (sizeof(float) * out_width * H);
    if (!(check_words(f, starts, NULL, batch, first, stop) &&
          check_size(W, (size_t)batch * H * NW * NW, sizeof(float), "W") &&
          check_size(out, out_rows * out_width * H, sizeof(float), "out") &&
          check_items(f, items, item_start, batch, width, out_rows)))
        return NULL;
    float *work = malloc(sizeof(float) * (NW * NW + 4 * NW + 1));
    if (work == NULL) return PyErr_NoMemory();
    f->W = W->buf;
    f->out = out->buf;
    Py_BEGIN_ALLOW_THREADS
    if (width == 4)
        syntactic_pairs(f, first, stop, work);
    else
        rare_pairs(f, first, stop, work);
    Py_END_ALLOW_THREADS
    free(work);
    return Py_NewRef(Py_None);
}

static PyObject *syntactic(PyObject *self, PyObject *args) {
    Py_buffer W, starts, arcs, arc_start, out;
    int batch;
    Py_ssize_t first, stop;
    Words f = {.n = 1};
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*iiinnw*", &W, &starts, &arcs, &arc_start, &batch,
                          &f.heads, &f.n_words, &first, &stop, &out))
        return NULL;
    f.n = f.n_words > 0 ? f.n_words : 1; /* (no token positions read) */
    PyObject *result = credit(&f, &W, &starts, &arcs, &arc_start, &out, batch, 4, 3, first,
                              stop);
    RELEASE_BUFFERS(&W, &starts, &arcs, &arc_start, &out);
    return result;
}

static PyObject *rare(PyObject *self, PyObject *args) {
    Py_buffer W, starts, rows, row_start, out;
    int batch, width;
    Py_ssize_t first, stop;
    Words f = {.n = 1};
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*iiiiinnw*", &W, &starts, &rows, &row_start, &width,
                          &f.exclude, &batch, &f.heads, &f.n_words, &first, &stop, &out))
        return NULL;
    PyObject *result = NULL;
    f.n = f.n_words > 0 ? f.n_words : 1;
    if (width < 5)
        PyErr_SetString(PyExc_ValueError, "rows need at least one target (width >= 5)");
    else
        result = credit(&f, &W, &starts, &rows, &row_start, &out, batch, width, 1, first, stop);
    RELEASE_BUFFERS(&W, &starts, &rows, &row_start, &out);
    return result;
}

static PyMethodDef methods[] = {
    {"pool", pool, METH_VARARGS,
     "pool(pattern, starts, positions, batch, heads, n, n_words, first, stop, W) -> None"},
    {"syntactic", syntactic, METH_VARARGS,
     "syntactic(W, starts, arcs, arc_start, batch, heads, n_words, first, stop, out) -> None"},
    {"rare", rare, METH_VARARGS,
     "rare(W, starts, rows, row_start, width, exclude, batch, heads, n_words, first, stop, "
     "out) -> None"},
    {NULL, NULL, 0, NULL},
};

MODULE_TABLE(_words_kernel,
             "Word pooling of whole attention patterns, and the syntactic and rare-word heads' "
             "credits.");

PyMODINIT_FUNC PyInit__words_kernel(void) { return PyModule_Create(&module); }
