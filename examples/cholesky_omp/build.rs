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
    if !links_openmp(&compiler) {
        println!("cargo::warning=the C compiler's OpenMP runtime does not link: the OpenMP peer is left out");
        return;
    }
    if omp.flag("-fopenmp").file("omp.c").try_compile("cholesky_omp").is_err() {
        println!("cargo::warning=omp.c did not compile with -fopenmp: the OpenMP peer is left out");
        return;
    }
    println!("cargo::rustc-link-lib={runtime}");
    println!("cargo::rustc-cfg=omp");
}

/// Whether a program calling the OpenMP runtime compiles and links with
/// `-fopenmp` (a compiler can take the flag and have `omp.h` but lack the
/// runtime's library, and the bench would then fail at link time).
fn links_openmp(compiler: &cc::Tool) -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(std::path::PathBuf::from) else { return false };
    let probe = out.join("omp_probe.c");
    let source = "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n";
    if std::fs::write(&probe, source).is_err() {
        return false;
    }
    let mut cmd = compiler.to_command();
    cmd.arg("-fopenmp").arg(&probe).arg("-o").arg(out.join("omp_probe"));
    cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    cmd.status().is_ok_and(|status| status.success())
}
