//! Search attributes (`fusee::attrs`): set at start and from workflow
//! code, recorded once and replayed, listed by value and by range with
//! the status and type filters, across a crash at every record boundary,
//! parking, reopening, history retention, expiry and continue-as-new; bad input
//! is a named error.

use std::collections::BTreeSet;
use std::time::Duration;

use fusee::testing::{TestEngine, TestError};
use fusee::{
    AttrCondition, AttrValue, Clock, Config, Ctx, Engine, Failure, IdPolicy, ListFilter,
    SearchAttributes, Signal, StartOptions, Status, StatusFilter, VirtualClock, Workflow,
};

const ORDER: Workflow<i64, i64> = Workflow::new("order");
const IDLE: Workflow<(), ()> = Workflow::new("idle");
const GATE: Workflow<(), u64> = Workflow::new("gate");
const GROW: Workflow<u32, u32> = Workflow::new("grow");
const GO: Signal<u64> = Signal::new("go");
const START_MS: u64 = 1_700_000_000_000;

#[cfg(feature = "postgres")]
#[path = "common/pg.rs"]
mod pg;

fn register(engine: &Engine) {
    engine.register(ORDER, |ctx: Ctx, customer: i64| async move {
        ctx.set_attributes(
            &SearchAttributes::new()
                .int("customer_id", customer)
                .keyword("stage", "charging"),
        )?;
        let amount = ctx
            .step("charge", move |_| async move { Ok(customer * 10) })
            .await?;
        ctx.set_attributes(
            &SearchAttributes::new()
                .keyword("stage", "done")
                .float("amount", amount as f64)
                .remove("region"),
        )?;
        Ok::<_, Failure>(amount)
    });
    engine.register(IDLE, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) });
    engine.register(GATE, |ctx: Ctx, ()| async move {
        ctx.set_attributes(&SearchAttributes::new().keyword("state", "waiting"))?;
        let v = ctx.wait_for(&GO).await?.unwrap_or(0);
        ctx.set_attributes(
            &SearchAttributes::new()
                .keyword("state", "opened")
                .int("got", v as i64),
        )?;
        Ok::<_, Failure>(v)
    });
    engine.register(GROW, |ctx: Ctx, n: u32| async move {
        let mut set = SearchAttributes::new().int("generation", n.into());
        if n == 0 {
            // Set by the first run's code only: carried to the next runs.
            set = set.keyword("first", "yes");
        }
        ctx.set_attributes(&set)?;
        if n < 3 {
            ctx.continue_as_new::<u32, u32>(&(n + 1)).await
        } else {
            Ok::<_, Failure>(n)
        }
    });
}

/// A run's attributes as text, by name.
fn shown(d: &fusee::Description) -> Vec<String> {
    d.attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Every ID a filter lists, page by page.
async fn ids(engine: &Engine, filter: ListFilter) -> Vec<String> {
    let mut out = Vec::new();
    let mut f = filter;
    loop {
        let page = engine.list(f.clone()).await.expect("list");
        out.extend(page.runs.into_iter().map(|r| r.id));
        match page.next {
            Some(c) => f = f.after(c),
            None => return out,
        }
    }
}

/// How many `Attributes` records a run's journal holds.
async fn attribute_records(engine: &Engine, id: &str) -> usize {
    let j = engine.journal_json(id, None).await.expect("journal");
    j["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| r["kind"] == "Attributes")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_set_at_start_and_by_code_are_recorded_once_and_replayed() {
    let mut kit = TestEngine::open(register).await.unwrap();
    let start = StartOptions::new().attributes(
        SearchAttributes::new()
            .keyword("region", "eu")
            .bool("vip", true),
    );
    kit.engine()
        .start_with_options(GATE, "g", &(), start)
        .await
        .unwrap();
    kit.settle().await.unwrap();
    let d = kit.engine().describe("g").await.unwrap();
    assert_eq!(
        shown(&d),
        [
            "region=keyword:eu",
            "state=keyword:waiting",
            "vip=bool:true"
        ]
    );
    assert_eq!(attribute_records(kit.engine(), "g").await, 1);
    // After a crash the code replays its first set: nothing is recorded
    // again, and the attributes stand.
    kit.crash().await.unwrap();
    kit.settle().await.unwrap();
    assert_eq!(attribute_records(kit.engine(), "g").await, 1);
    kit.engine().signal("g", GO, &7).await.unwrap();
    assert_eq!(kit.result(GATE, "g").await.unwrap(), 7);
    let d = kit.engine().describe("g").await.unwrap();
    assert_eq!(
        shown(&d),
        [
            "got=int:7",
            "region=keyword:eu",
            "state=keyword:opened",
            "vip=bool:true"
        ]
    );
    assert_eq!(attribute_records(kit.engine(), "g").await, 2);
    // The journal replays against the code with no divergence.
    let journal = kit.export_journal("g").await.unwrap();
    kit.replay(&journal).expect("replays");
    assert_eq!(attribute_records(kit.engine(), "g").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_filters_by_value_range_type_status_and_workflow() {
    let kit = TestEngine::builder()
        .shards(3)
        .open(register)
        .await
        .unwrap();
    let engine = kit.engine();
    let day = 86_400_000u64;
    // 60 runs: customer i % 5, amount i * 10.0, a tier, an order date a
    // day apart, a note; every third is still running (an idle GATE).
    let mut all = Vec::new();
    for i in 0..60u64 {
        let attrs = SearchAttributes::new()
            .int("customer_id", (i % 5) as i64)
            .float("amount", i as f64 * 10.0)
            .keyword("tier", if i % 2 == 0 { "gold" } else { "silver" })
            .time("order_date", START_MS + i * day)
            .text("note", format!("order {i}"));
        let id = format!("r{i:02}");
        let opts = StartOptions::new().attributes(attrs);
        if i % 3 == 0 {
            engine
                .start_with_options(GATE, &id, &(), opts)
                .await
                .unwrap();
        } else {
            engine
                .start_with_options(IDLE, &id, &(), opts)
                .await
                .unwrap();
        }
        all.push(i);
    }
    kit.settle().await.unwrap();
    let want = |f: &dyn Fn(u64) -> bool| -> BTreeSet<String> {
        all.iter()
            .filter(|i| f(**i))
            .map(|i| format!("r{i:02}"))
            .collect()
    };
    let got = |v: Vec<String>| -> BTreeSet<String> {
        let n = v.len();
        let s: BTreeSet<String> = v.into_iter().collect();
        assert_eq!(s.len(), n, "a run listed twice");
        s
    };
    let small = ListFilter::new().limit(4);
    // Equality.
    assert_eq!(
        got(ids(engine, small.clone().attribute("customer_id", 3)).await),
        want(&|i| i % 5 == 3)
    );
    // A range, and a range of another type never matches.
    assert_eq!(
        got(ids(engine, small.clone().attribute_above("amount", 400.0)).await),
        want(&|i| i * 10 > 400)
    );
    assert!(
        ids(engine, small.clone().attribute_above("amount", 400))
            .await
            .is_empty()
    );
    // Between two times, both included.
    let (lo, hi) = (START_MS + 10 * day, START_MS + 20 * day);
    assert_eq!(
        got(ids(
            engine,
            small
                .clone()
                .attribute_between("order_date", AttrValue::Time(lo), AttrValue::Time(hi))
        )
        .await),
        want(&|i| (10..=20).contains(&i))
    );
    // Combined: two attributes, the status and the type.
    assert_eq!(
        got(ids(
            engine,
            small
                .clone()
                .attribute("tier", "gold")
                .attribute_below("amount", 300.0)
                .status(StatusFilter::Running)
                .workflow("gate")
        )
        .await),
        want(&|i| i % 2 == 0 && i * 10 < 300 && i % 3 == 0)
    );
    assert_eq!(
        got(ids(
            engine,
            small
                .clone()
                .condition(AttrCondition::parse("customer_id>=3").unwrap())
                .status(StatusFilter::Ended(Status::Ok))
        )
        .await),
        want(&|i| i % 5 >= 3 && i % 3 != 0)
    );
    // Text compares whole values; an unknown name matches nothing.
    assert_eq!(
        got(ids(
            engine,
            small
                .clone()
                .attribute("note", AttrValue::Text("order 7".into()))
        )
        .await),
        want(&|i| i == 7)
    );
    assert!(
        ids(engine, small.clone().attribute("nope", 1))
            .await
            .is_empty()
    );
    // Newest first, as the unfiltered listing.
    let page = engine
        .list(ListFilter::new().attribute("customer_id", 0).limit(100))
        .await
        .unwrap();
    let starts: Vec<u64> = page.runs.iter().map(|r| r.started_ms).collect();
    let mut sorted = starts.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(starts, sorted);
    assert_eq!(page.runs.len(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_attributes_and_filters_are_named_errors_and_record_nothing() {
    let kit = TestEngine::open(register).await.unwrap();
    let engine = kit.engine();
    for attrs in [
        SearchAttributes::new().float("x", f64::NAN),
        SearchAttributes::new().int("", 1),
        SearchAttributes::new().int("fusee.paused", 1),
    ] {
        let Err(e) = engine
            .start_with_options(IDLE, "bad", &(), StartOptions::new().attributes(attrs))
            .await
        else {
            panic!("a bad attribute was accepted");
        };
        assert!(matches!(e, fusee::Error::InvalidAttribute(_)), "{e}");
    }
    assert!(matches!(
        engine.describe("bad").await,
        Err(fusee::Error::NotFound { .. })
    ));
    let e = engine
        .list(ListFilter::new().condition(AttrCondition::range(
            "a",
            std::ops::Bound::Included(AttrValue::Int(1)),
            std::ops::Bound::Included(AttrValue::Float(2.0)),
        )))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("compares a int with a float"), "{e}");
    for text in ["colour=paint:red", "amount", "amount>int:ten", "=1"] {
        let e = AttrCondition::parse(text).unwrap_err();
        assert!(
            matches!(e, fusee::Error::InvalidAttribute(_)),
            "{text}: {e}"
        );
    }
}

/// The outcome a crash must not change: the result, the attributes, what
/// a listing by them finds, and how many `Attributes` records the journal
/// holds (none recorded twice).
type Outcome = (i64, Vec<String>, Vec<String>, usize);

async fn order(kit: &TestEngine) -> Result<Outcome, TestError> {
    let opts = StartOptions::new().policy(IdPolicy::Attach).attributes(
        SearchAttributes::new()
            .keyword("region", "eu")
            .int("customer_id", 0),
    );
    kit.engine()
        .start_with_options(ORDER, "o", &4, opts)
        .await?;
    let amount = kit.result(ORDER, "o").await?;
    let d = kit.engine().describe("o").await?;
    let listed = ids(
        kit.engine(),
        ListFilter::new()
            .attribute("customer_id", 4)
            .attribute("stage", "done"),
    )
    .await;
    Ok((
        amount,
        shown(&d),
        listed,
        attribute_records(kit.engine(), "o").await,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_survive_a_crash_at_every_record_boundary() {
    let kit = TestEngine::open(register).await.unwrap();
    let report = kit
        .crash_everywhere_with(order, |point| {
            assert_eq!(
                point.outcome, point.uncrashed,
                "crash after {:?}",
                point.crashed_after
            );
        })
        .await
        .expect("every crash point ends");
    assert!(report.crash_points > 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_carries_the_attributes() {
    let kit = TestEngine::open(register).await.unwrap();
    let opts = StartOptions::new().attributes(SearchAttributes::new().keyword("region", "eu"));
    kit.engine()
        .start_with_options(GROW, "grow", &0, opts)
        .await
        .unwrap();
    assert_eq!(kit.result(GROW, "grow").await.unwrap(), 3);
    let d = kit.engine().describe("grow").await.unwrap();
    assert_eq!(
        shown(&d),
        ["first=keyword:yes", "generation=int:3", "region=keyword:eu"]
    );
    // Every run of the chain is listed by its own attributes.
    let gens: Vec<String> = ids(kit.engine(), ListFilter::new().attribute("region", "eu")).await;
    assert_eq!(gens.len(), 4);
    let last = kit
        .engine()
        .list(ListFilter::new().attribute("generation", 3))
        .await
        .unwrap();
    assert_eq!(last.runs.len(), 1);
    assert_eq!(last.runs[0].run, d.run);
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-attrs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `base` with this file's settings: runs park at once, history kept a
/// minute and results two hours, on `clock`.
fn tuned(base: Config, clock: &VirtualClock) -> Config {
    base.shards(2)
        .park_after(Duration::ZERO)
        .history_retention(Duration::from_secs(60))
        .retention(Duration::from_secs(2 * 3600))
        .clock(Clock::Virtual(clock.clone()))
}

async fn until(engine: &Engine, what: &str, cond: impl Fn(&fusee::Metrics) -> bool) {
    for _ in 0..6000 {
        if cond(&engine.metrics().await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached in 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_reopened_and_past_history_runs_are_listed_by_their_attributes() {
    let dir = temp_dir("parked");
    listed_across_parking_reopen_and_retention(|c| tuned(Config::file(&dir), c)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "redb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_runs_are_listed_by_their_attributes_across_parking_reopen_and_retention() {
    let dir = temp_dir("parked-redb");
    listed_across_parking_reopen_and_retention(|c| tuned(Config::redb(&dir), c)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "rocksdb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocksdb_runs_are_listed_by_their_attributes_across_parking_reopen_and_retention() {
    let dir = temp_dir("parked-rocksdb");
    listed_across_parking_reopen_and_retention(|c| tuned(Config::rocksdb(&dir), c)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_runs_are_listed_by_their_attributes_across_parking_reopen_and_retention() {
    let Some(url) = pg::pg_url_or_skip() else {
        return;
    };
    let schema = format!("t_attrs_parked_{}", std::process::id());
    listed_across_parking_reopen_and_retention(|c| {
        tuned(
            Config::new(fusee::StorageConfig::postgres(&url).postgres_schema(&schema)),
            c,
        )
    })
    .await;
    pg::psql(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE"));
}

/// 40 runs parked with attributes are listed by them, after a reopen,
/// after one is loaded and sets more, and past its history retention
/// (twice reopened); past its retention it is listed no more. `config`
/// makes the store's configuration on a clock (the same store each call).
async fn listed_across_parking_reopen_and_retention(config: impl Fn(&VirtualClock) -> Config) {
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(&clock)).await.unwrap();
    register(&engine);
    for i in 0..40i64 {
        let opts = StartOptions::new().attributes(SearchAttributes::new().int("batch", i % 4));
        engine
            .start_with_options(GATE, &format!("g{i}"), &(), opts)
            .await
            .unwrap();
    }
    until(&engine, "all parked", |m| m.parked_runs == 40).await;
    let by_batch = |b: i64| {
        (0..40i64)
            .filter(move |i| i % 4 == b)
            .map(|i| format!("g{i}"))
            .collect::<BTreeSet<_>>()
    };
    let listed = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    assert_eq!(
        listed(ids(&engine, ListFilter::new().attribute("batch", 1)).await),
        by_batch(1)
    );
    // Reopened: the index is read from the snapshot the close wrote (on
    // every backend: the snapshot's frames are the run store's).
    engine.close().await.unwrap();
    let engine = Engine::open(config(&clock)).await.unwrap();
    register(&engine);
    assert_eq!(
        listed(ids(&engine, ListFilter::new().attribute("batch", 2)).await),
        by_batch(2)
    );
    assert_eq!(
        listed(ids(&engine, ListFilter::new().attribute("state", "waiting")).await).len(),
        40
    );
    // A parked run loaded by a signal sets more; it is found by them.
    engine.signal("g5", GO, &9).await.unwrap();
    engine.result(GATE, "g5").await.unwrap();
    assert_eq!(
        ids(&engine, ListFilter::new().attribute("got", 9)).await,
        ["g5"]
    );
    assert_eq!(
        listed(ids(&engine, ListFilter::new().attribute("state", "waiting")).await).len(),
        39
    );
    // Past its history time the finished run keeps only its Start and
    // Done, and still its attributes, across another reopen.
    until(&engine, "g5 parked", |m| m.parked_runs == 40).await;
    clock.advance(3_600_000);
    let mut kept = 0;
    for _ in 0..500 {
        let j = engine.journal_json("g5", None).await.unwrap();
        kept = j["records"].as_array().unwrap().len();
        if kept == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(kept, 2, "the history of g5 is dropped");
    engine.close().await.unwrap();
    let engine = Engine::open(config(&clock)).await.unwrap();
    register(&engine);
    let j = engine.journal_json("g5", None).await.unwrap();
    assert_eq!(
        j["records"].as_array().unwrap().len(),
        2,
        "history dropped: {j}"
    );
    assert_eq!(
        ids(&engine, ListFilter::new().attribute("got", 9)).await,
        ["g5"]
    );
    assert_eq!(
        shown(&engine.describe("g5").await.unwrap()),
        ["batch=int:1", "got=int:9", "state=keyword:opened"]
    );
    // Past its retention it is gone, from listings too.
    clock.advance(2 * 3_600_000);
    let mut gone = false;
    for _ in 0..500 {
        if matches!(
            engine.describe("g5").await,
            Err(fusee::Error::NotFound { .. })
        ) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "g5 expired");
    assert!(
        ids(&engine, ListFilter::new().attribute("got", 9))
            .await
            .is_empty()
    );
    assert_eq!(
        listed(ids(&engine, ListFilter::new().attribute("batch", 1)).await).len(),
        9
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_keeps_the_attributes_set_before_its_cut_and_records_none_twice() {
    let kit = TestEngine::open(register).await.unwrap();
    let opts = StartOptions::new().attributes(SearchAttributes::new().keyword("region", "eu"));
    kit.engine()
        .start_with_options(ORDER, "r", &3, opts)
        .await
        .unwrap();
    assert_eq!(kit.result(ORDER, "r").await.unwrap(), 30);
    let before = shown(&kit.engine().describe("r").await.unwrap());
    assert_eq!(
        before,
        ["amount=float:30", "customer_id=int:3", "stage=keyword:done"]
    );
    let new = kit.engine().reset("r", "charge", "again").await.unwrap();
    assert_eq!(kit.result(ORDER, "r").await.unwrap(), 30);
    let d = kit.engine().describe("r").await.unwrap();
    assert_eq!(d.run, new.run);
    assert_eq!(shown(&d), before);
    // The copied first set, replayed, is not recorded again; the second
    // is the new run's own.
    assert_eq!(attribute_records(kit.engine(), "r").await, 2);
    let listed = ids(kit.engine(), ListFilter::new().attribute("customer_id", 3)).await;
    assert_eq!(listed, ["r", "r"], "both runs of the ID");
}

const QUICK: Workflow<(), ()> = Workflow::new("quick");

/// A filtered listing right after an open (the index's background build
/// racing it): its pages, walked to the end by value and by range, hold
/// every matching run once, newest first. `runtime/tests.rs` checks the
/// same against an index the build has not begun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_right_after_an_open_pages_through_every_matching_run() {
    const RUNS: u32 = 3_000;
    let dir = temp_dir("partial");
    let config = || Config::file(&dir).shards(1).park_after(Duration::ZERO);
    let engine = Engine::open(config()).await.unwrap();
    engine.register(QUICK, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) });
    for i in 0..RUNS {
        let attrs = SearchAttributes::new().int("k", i64::from(i % 3));
        let opts = StartOptions::new().attributes(attrs);
        engine
            .start_with_options(QUICK, &format!("q{i}"), &(), opts)
            .await
            .unwrap();
    }
    until(&engine, "every run parked", |m| {
        m.parked_runs == u64::from(RUNS)
    })
    .await;
    engine.close().await.unwrap();

    let engine = Engine::open(config()).await.unwrap();
    let by_value = ids(&engine, ListFilter::new().attribute("k", 1).limit(50)).await;
    let above = ids(&engine, ListFilter::new().attribute_above("k", 1).limit(70)).await;
    let newest_first = |keep: fn(u32) -> bool| -> Vec<String> {
        (0..RUNS)
            .rev()
            .filter(|&i| keep(i))
            .map(|i| format!("q{i}"))
            .collect()
    };
    assert_eq!(by_value, newest_first(|i| i % 3 == 1));
    assert_eq!(above, newest_first(|i| i % 3 == 2));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
