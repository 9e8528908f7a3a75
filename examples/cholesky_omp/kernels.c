/* The tiled Cholesky's four tile kernels in C: the same arithmetic, in
 * the same order, as examples/tiled/kernels.rs (a dot product in eight
 * lanes), on tiles given as arrays of row pointers. Every runtime of
 * this bench (sequential, depengine, OpenMP tasks) calls these same
 * compiled functions, so their speed-ups compare the runtimes alone. */

#include "kernels.h"

#include <math.h>

static double dot(const double *x, const double *y, int n) {
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int whole = n / 8 * 8;
    for (int i = 0; i < whole; i += 8)
        for (int l = 0; l < 8; l++) lanes[l] += x[i + l] * y[i + l];
    double tail = 0;
    for (int i = whole; i < n; i++) tail += x[i] * y[i];
    double sum = 0;
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum + tail;
}

int tile_potrf(double *const *a, int b) {
    for (int i = 0; i < b; i++) {
        double *row = a[i];
        for (int j = 0; j < i; j++) row[j] = (row[j] - dot(row, a[j], j)) / a[j][j];
        double d = row[i] - dot(row, row, i);
        if (d <= 0) return i + 1;
        row[i] = sqrt(d);
    }
    return 0;
}

void tile_trsm(const double *const *l, double *const *x, int b) {
    for (int r = 0; r < b; r++) {
        double *row = x[r];
        for (int j = 0; j < b; j++) row[j] = (row[j] - dot(row, l[j], j)) / l[j][j];
    }
}

void tile_syrk(const double *const *a, double *const *c, int b) {
    for (int r = 0; r < b; r++)
        for (int col = 0; col <= r; col++) c[r][col] -= dot(a[r], a[col], b);
}

void tile_gemm(const double *const *a, const double *const *bt, double *const *c, int b) {
    for (int r = 0; r < b; r++)
        for (int col = 0; col < b; col++) c[r][col] -= dot(a[r], bt[col], b);
}
