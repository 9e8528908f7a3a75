/* The tiled Cholesky on OpenMP tasks with `depend` clauses: one task per
 * kernel call, created in the sequential order by one thread of the team,
 * each tile named by its first element. The peer the engine's run is
 * measured beside (README.md: its build and its flags). */

#include "kernels.h"

#include <omp.h>
#include <stddef.h>

#define MAX_B 512

/* Tile (i, j)'s row pointers into `rows`. */
static void tile(double *m, int n, int b, int i, int j, double **rows) {
    for (int r = 0; r < b; r++) rows[r] = m + (size_t)(i * b + r) * n + (size_t)j * b;
}

#define AT(i, j) m[(size_t)(i) * b * n + (size_t)(j) * b]

/* 0, or -1 if a tile was not positive definite, or -2 if b is too large. */
int omp_tiled_cholesky(double *m, int n, int b, int threads) {
    if (b > MAX_B) return -2;
    int nt = n / b;
    int failed = 0;
#pragma omp parallel num_threads(threads)
#pragma omp single
    for (int k = 0; k < nt; k++) {
#pragma omp task depend(inout : AT(k, k)) shared(failed)
        {
            double *a[MAX_B];
            tile(m, n, b, k, k, a);
            if (tile_potrf(a, b) != 0) {
#pragma omp atomic write
                failed = 1;
            }
        }
        for (int i = k + 1; i < nt; i++) {
#pragma omp task depend(in : AT(k, k)) depend(inout : AT(i, k))
            {
                double *l[MAX_B], *x[MAX_B];
                tile(m, n, b, k, k, l);
                tile(m, n, b, i, k, x);
                tile_trsm((const double *const *)l, x, b);
            }
        }
        for (int i = k + 1; i < nt; i++) {
#pragma omp task depend(in : AT(i, k)) depend(inout : AT(i, i))
            {
                double *a[MAX_B], *c[MAX_B];
                tile(m, n, b, i, k, a);
                tile(m, n, b, i, i, c);
                tile_syrk((const double *const *)a, c, b);
            }
            for (int j = k + 1; j < i; j++) {
#pragma omp task depend(in : AT(i, k), AT(j, k)) depend(inout : AT(i, j))
                {
                    double *a[MAX_B], *bt[MAX_B], *c[MAX_B];
                    tile(m, n, b, i, k, a);
                    tile(m, n, b, j, k, bt);
                    tile(m, n, b, i, j, c);
                    tile_gemm((const double *const *)a, (const double *const *)bt, c, b);
                }
            }
        }
    }
    return failed ? -1 : 0;
}
