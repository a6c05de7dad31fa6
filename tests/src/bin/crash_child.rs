//! The child of the SIGKILL harness: `crash-child BACKEND DIR SEED`.
//!
//! Appends records ([`fusee_tests::record_bytes`]) to shard 0 in batches of
//! random size, flushes each batch (on this thread, or on a flusher thread
//! while the next batch is appended) and prints the durable LSN on its own
//! line (flushed to stdout before the next batch), until it is killed. Some
//! runs also discard old records, as a checkpointing host would.

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
        // Half the runs flush on a flusher thread; half discard as a
        // checkpointing host would, so segments are dropped or recycled.
        let how = fusee_tests::Writing {
            batch: 1 + rng.usize(0..64),
            pipelined: rng.bool(),
            keep: if rng.bool() { 4000 } else { 0 },
        };
        let result = storage.append_forever(how, &mut |lsn| {
            writeln!(out, "{lsn}").is_ok() && out.flush().is_ok()
        });
        if let Err(e) = result {
            eprintln!("crash-child: {e}");
            std::process::exit(1);
        }
    });
}
