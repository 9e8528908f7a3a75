#ifndef DEPENGINE_CHOLESKY_KERNELS_H
#define DEPENGINE_CHOLESKY_KERNELS_H

/* a = L·Lᵀ in place, lower part; 0, or the 1-based row where the tile is
 * not positive definite. */
int tile_potrf(double *const *a, int b);
/* x = x · L⁻ᵀ (L lower, from tile_potrf). */
void tile_trsm(const double *const *l, double *const *x, int b);
/* c = c − a·aᵀ, lower part. */
void tile_syrk(const double *const *a, double *const *c, int b);
/* c = c − a·btᵀ. */
void tile_gemm(const double *const *a, const double *const *bt, double *const *c, int b);

#endif
