//! Compiles the C tile kernels, and the OpenMP peer where the C compiler
//! takes `-fopenmp` (cfg `omp`; without it the bench runs the sequential
//! and the engine's runs alone, and says so).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(omp)");
    for file in ["kernels.c", "kernels.h", "omp.c"] {
        println!("cargo::rerun-if-changed={file}");
    }
    // The same flags for both files: no FMA contraction, so that every
    // run's factor is the sequential run's, bit for bit.
    let flags = |b: &mut cc::Build| {
        b.opt_level(3).flag_if_supported("-ffp-contract=off").warnings(true);
    };
    let mut kernels = cc::Build::new();
    flags(&mut kernels);
    kernels.file("kernels.c").compile("cholesky_kernels");

    let mut omp = cc::Build::new();
    flags(&mut omp);
    let compiler = omp.get_compiler();
    let runtime = if compiler.is_like_gnu() {
        "gomp"
    } else if compiler.is_like_clang() {
        "omp"
    } else {
        return;
    };
    if !omp.is_flag_supported("-fopenmp").unwrap_or(false) {
        println!("cargo::warning=the C compiler takes no -fopenmp: the OpenMP peer is left out");
        return;
    }
    if omp.flag("-fopenmp").file("omp.c").try_compile("cholesky_omp").is_err() {
        println!("cargo::warning=omp.c did not compile with -fopenmp: the OpenMP peer is left out");
        return;
    }
    println!("cargo::rustc-link-lib={runtime}");
    println!("cargo::rustc-cfg=omp");
}
