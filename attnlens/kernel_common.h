/* What the six C kernels of attnlens share (setup.py's KERNELS, which build them with this
 * folder on the include path); each kernel's own logic stays in its file.
 *
 *   MULTIVERSION  on a kernel's outer loop: one build runs AVX-512 code where the CPU has it,
 *                 AVX2 code where it has that, plain x86-64 code elsewhere (GCC's target
 *                 clones; KERNEL_CLONES is defined in such a build). KERNEL_NO_CLONES builds
 *                 one version for the compiler's target instead (tests/kernel_builds.py
 *                 builds each x86-64 level so, and the tests compare their bits); clang and
 *                 other platforms build one version too.
 *   STEP          a step of the outer loop, always inlined: into each clone, so a clone's
 *                 steps are compiled for its level (a step left out of line would be
 *                 compiled once, for plain x86-64).
 *   check_size    a buffer argument's size, refused with a ValueError naming it.
 *   RELEASE_BUFFERS  releases a call's buffer arguments.
 *   MODULE_TABLE  the module table of a kernel's methods[]; its PyInit_ follows in its file.
 *
 * Included first (it includes Python.h with PY_SSIZE_T_CLEAN).
 */
#ifndef ATTNLENS_KERNEL_COMMON_H
#define ATTNLENS_KERNEL_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(KERNEL_NO_CLONES)
#define MULTIVERSION \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define KERNEL_CLONES 1
#else
#define MULTIVERSION
#endif

#if defined(__GNUC__)
#define STEP static inline __attribute__((always_inline))
#else
#define STEP static inline
#endif

/* 1 when buffer b holds count items of item bytes; else 0 with a ValueError naming it. */
static inline int check_size(const Py_buffer *b, size_t count, size_t item, const char *name) {
    if ((size_t)b->len != count * item) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, not %zu", name, b->len,
                     count * item);
        return 0;
    }
    return 1;
}

/* PyBuffer_Release of each of count buffers (one never filled, zeroed, is left as it is). */
static inline void release_buffers(Py_buffer *const *all, size_t count) {
    for (size_t k = 0; k < count; k++) PyBuffer_Release(all[k]);
}

/* RELEASE_BUFFERS(&a, &b, ...): release_buffers of the buffers listed. */
#define RELEASE_BUFFERS(...)                                        \
    release_buffers((Py_buffer *const[]){__VA_ARGS__},              \
                    sizeof((Py_buffer *const[]){__VA_ARGS__}) / sizeof(Py_buffer *))

/* The module table `module` of the kernel NAME (an identifier, e.g. _stats_kernel) with its
 * docstring DOC and the methods[] defined above it. */
#define MODULE_TABLE(NAME, DOC)                                                        \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = #NAME,        \
                                        .m_doc = DOC, .m_size = -1, .m_methods = methods}

#endif
