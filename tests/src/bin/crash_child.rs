//! The child of the SIGKILL harness: `crash-child BACKEND DIR SEED`.
//!
//! Appends records ([`fusee_tests::record_bytes`]) to shard 0 in batches of
//! random size, flushes each batch and prints the durable LSN on its own line
//! (flushed to stdout before the next batch), until it is killed.

use std::io::Write;
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(backend), Some(dir), Some(seed)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: crash-child BACKEND DIR SEED");
        std::process::exit(2);
    };
    let seed: u64 = seed.parse().unwrap_or(1);
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = PathBuf::from(dir);
    let stdout = std::io::stdout();
    fusee_tests::with_backend(&backend, &dir, |storage| {
        let mut out = stdout.lock();
        let result = storage.append_forever(1 + rng.usize(0..64), &mut |lsn| {
            writeln!(out, "{lsn}").is_ok() && out.flush().is_ok()
        });
        if let Err(e) = result {
            eprintln!("crash-child: {e}");
            std::process::exit(1);
        }
    });
}
