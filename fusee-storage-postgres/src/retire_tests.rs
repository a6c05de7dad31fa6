//! What a retirement promises, on a real server (`FUSEE_PG_URL`; skipped
//! without one outside CI): a holder's next write is fenced, nobody opens
//! the store or any shard again (one never opened included) but under the
//! mark, and a second retirement for another reason is refused.

use std::time::Duration;

use fusee_storage::{LogStore, Storage, StorageError};

use crate::retire::retired_owner;
use crate::{PgOptions, PgStorage};

#[test]
fn a_retired_store_fences_its_holder_and_refuses_every_other_open() {
    let Some(url) = crate::test_server("retirement") else {
        return;
    };
    let schema = format!("t_retire_{}", std::process::id());
    let options = |owner: &str| {
        PgOptions::new(&url)
            .schema(&schema)
            .lease(Duration::from_secs(30))
            .owner(owner)
    };
    let a = PgStorage::open(&options("a")).expect("open a");
    let mut held = a.open_shard(0).expect("a opens shard 0");
    held.log.append(1, b"before").expect("append");
    assert_eq!(held.log.flush().expect("flush"), 1);
    assert_eq!(a.retired().expect("reads"), None);

    let why = "resharded into schema elsewhere with 3 shards";
    let r = PgStorage::open(&options("reshard")).expect("open the retirer");
    assert_eq!(r.retire(why).expect("retires"), vec![0]);
    assert_eq!(r.retired().expect("reads").as_deref(), Some(why));
    drop(r);

    // The holder is fenced, whatever its lease's time.
    held.log.append(2, b"after").expect("append is local");
    let flushed = held.log.flush();
    assert!(
        matches!(flushed, Err(StorageError::Fenced { .. })),
        "{flushed:?}"
    );
    drop(held);
    // Its storage cannot take the shard back, nor one nobody opened.
    for shard in [0, 5] {
        let again = a.open_shard(shard).map(drop);
        assert!(
            matches!(&again, Err(StorageError::Retired { why: w, .. }) if w == why),
            "shard {shard}: {again:?}"
        );
    }
    drop(a);
    // Nor does a new storage open the store.
    let b = PgStorage::open(&options("b")).map(drop);
    assert!(matches!(b, Err(StorageError::Retired { .. })), "{b:?}");
    // Under the mark, the store opens and reads what was durable.
    let m = PgStorage::open(&options(&retired_owner(why))).expect("the reshard opens it");
    let mut parts = m.open_shard(0).expect("the reshard opens shard 0");
    let mut records = Vec::new();
    parts
        .log
        .read(0, &mut |lsn, bytes| {
            records.push((lsn, bytes.to_vec()));
            Ok(())
        })
        .expect("reads");
    assert_eq!(records, vec![(1, b"before".to_vec())]);
    drop(parts);
    // Its release keeps the mark; another reason is refused.
    let other = m.retire("resharded into schema third with 2 shards");
    assert!(
        matches!(&other, Err(StorageError::Retired { why: w, .. }) if w == why),
        "{other:?}"
    );
    assert_eq!(m.retired().expect("reads").as_deref(), Some(why));
    drop(m);
    let c = PgStorage::open(&options("c")).map(drop);
    assert!(matches!(c, Err(StorageError::Retired { .. })), "{c:?}");
    if let Ok(mut c) = postgres::Client::connect(&url, postgres::NoTls) {
        let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
    }
}
