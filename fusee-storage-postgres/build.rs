//! Compiles the tests that need a PostgreSQL server only when one is named:
//! `FUSEE_PG_URL` set (by `scripts/postgres.sh`) gives the tests cfg
//! `fusee_pg`; without it they compile to one test per file that prints
//! SKIPPED (and fails under CI, where the server must be there).

fn main() {
    println!("cargo::rerun-if-env-changed=FUSEE_PG_URL");
    println!("cargo::rustc-check-cfg=cfg(fusee_pg)");
    if std::env::var_os("FUSEE_PG_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=fusee_pg");
    }
}
