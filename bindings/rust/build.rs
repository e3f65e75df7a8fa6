//! Build script: generates the raw FFI declarations from cohort.h with the bindgen command-line
//! program (Debian's `bindgen`, run here rather than as a library so the crate keeps zero
//! dependencies) into OUT_DIR, and tells rustc where libcohort is.
//!
//! Environment (set by bindings/rust/CMakeLists.txt; each has a fallback for a manual build):
//! - COHORT_INCLUDE_DIR: the directory holding cohort/cohort.h (default: ../../capi/include).
//! - COHORT_LIB_DIR: the directory holding libcohort.so; added to the link search path and, as
//!   an rpath, to every binary of this package so they run without LD_LIBRARY_PATH (default:
//!   none, the system's library path).
//! - COHORT_BINDGEN: the bindgen program (default: `bindgen` on PATH, then /usr/bin/bindgen).

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in ["COHORT_INCLUDE_DIR", "COHORT_LIB_DIR", "COHORT_BINDGEN"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");

    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let include_dir = env::var_os("COHORT_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("../../capi/include"));
    let header = include_dir.join("cohort").join("cohort.h");
    if !header.is_file() {
        fail(&format!(
            "{} not found; set COHORT_INCLUDE_DIR to cohort's capi/include",
            header.display()
        ));
    }
    println!("cargo:rerun-if-changed={}", header.display());

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("cohort_sys.rs");
    generate(&header, &include_dir, &out);

    if let Some(lib_dir) = env::var_os("COHORT_LIB_DIR") {
        let lib_dir = PathBuf::from(lib_dir);
        println!("cargo:rustc-link-search=native={}", lib_dir.display());
        // rustc-link-arg reaches this package's own binaries (examples, tests); crates that depend
        // on this one get the directory as DEP_COHORT_LIB_DIR for their own rpath.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
        println!("cargo:lib_dir={}", lib_dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=cohort");
}

/// Runs bindgen on the header. Enums become newtypes over their integer (not Rust enums), so a
/// status or dtype value added by a newer library can never be an invalid Rust value.
fn generate(header: &Path, include_dir: &Path, out: &Path) {
    let bindgen = find_bindgen();
    let mut cmd = Command::new(&bindgen);
    cmd.arg(header)
        .args(["--allowlist-function", "cohort_.*"])
        .args(["--allowlist-type", "cohort_.*"])
        .args(["--allowlist-var", "COHORT_.*"])
        .args(["--default-enum-style", "newtype"])
        .arg("--no-prepend-enum-name")
        .arg("--size_t-is-usize")
        .arg("--no-doc-comments")
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(format!("-I{}", include_dir.display()));
    match cmd.status() {
        Ok(status) if status.success() => {}
        Ok(status) => fail(&format!("{:?} failed on {} ({})", bindgen, header.display(), status)),
        Err(e) => fail(&format!(
            "cannot run {:?}: {}; install Debian's bindgen and libclang-dev, or set COHORT_BINDGEN",
            bindgen, e
        )),
    }
}

fn find_bindgen() -> OsString {
    if let Some(path) = env::var_os("COHORT_BINDGEN") {
        return path;
    }
    let on_path = env::var_os("PATH")
        .map(|p| env::split_paths(&p).any(|dir| dir.join("bindgen").is_file()))
        .unwrap_or(false);
    if on_path || !Path::new("/usr/bin/bindgen").is_file() {
        "bindgen".into()
    } else {
        "/usr/bin/bindgen".into()
    }
}

fn fail(message: &str) -> ! {
    eprintln!("cohort build.rs: {}", message);
    std::process::exit(1);
}
