//! The line protocol of the peers' programs (`benches/peers/protocol.py`
//! says it from their side): one JSON object per line on stdout.
//!
//! | line | meaning |
//! |---|---|
//! | `{"ready": true}` | set up; a chain then waits for a line on stdin |
//! | `{"done": K}` | K runs of a fanout finished |
//! | `{"result": {...}}` | the figures (last line) |
//! | `{"error": "why"}` | the workload failed |
//!
//! Any other line (an SDK's log) is no message and is skipped. Every
//! result is checked for shape and sense (a chain's gaps are as many as
//! its steps less one, every number positive and finite), so a figure
//! never comes from output that does not say what it should.

use std::time::Duration;

use serde_json::Value;

/// One message of a peer's program.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Set up, waiting for the driver.
    Ready,
    /// This many runs of a fanout finished.
    Done(u64),
    /// The workload's figures.
    Result(Value),
    /// The workload failed: why.
    Error(String),
}

impl Message {
    /// Parses one line; `None` for a line that is no message.
    pub fn parse(line: &str) -> Option<Message> {
        let v: Value = serde_json::from_str(line.trim()).ok()?;
        let o = v.as_object()?;
        if let Some(r) = o.get("result") {
            return Some(Message::Result(r.clone()));
        }
        if let Some(e) = o.get("error") {
            return Some(Message::Error(
                e.as_str().map_or_else(|| e.to_string(), str::to_string),
            ));
        }
        if let Some(d) = o.get("done") {
            return d.as_u64().map(Message::Done);
        }
        (o.get("ready") == Some(&Value::Bool(true))).then_some(Message::Ready)
    }
}

/// What a result did not hold.
pub type Malformed = String;

fn seconds(v: &Value, key: &str) -> Result<Duration, Malformed> {
    let s = v
        .get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number {key:?} in {v}"))?;
    if !(s.is_finite() && s > 0.0) {
        return Err(format!("{key} = {s}: not a positive time"));
    }
    Duration::try_from_secs_f64(s).map_err(|e| format!("{key} = {s}: {e}"))
}

fn count(v: &Value, key: &str) -> Result<u64, Malformed> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no count {key:?} in {v}"))
}

/// A chain's result: the gaps between its `steps` steps' starts.
pub fn chain_gaps(v: &Value, steps: u32) -> Result<Vec<Duration>, Malformed> {
    let gaps = v
        .get("gaps_us")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no gaps_us in {v}"))?;
    if gaps.len() + 1 != steps as usize {
        return Err(format!("{} gaps for a chain of {steps} steps", gaps.len()));
    }
    gaps.iter()
        .map(|g| {
            let us = g.as_f64().ok_or_else(|| format!("gap {g} is no number"))?;
            if !(us.is_finite() && us >= 0.0) {
                return Err(format!("gap {us} µs"));
            }
            Ok(Duration::from_nanos((us * 1e3) as u64))
        })
        .collect()
}

/// A fanout's result: its time, checked to cover `runs * steps` steps.
pub fn fanout_elapsed(v: &Value, runs: u32, steps: u32) -> Result<Duration, Malformed> {
    let n = count(v, "steps")?;
    if n != u64::from(runs) * u64::from(steps) {
        return Err(format!("{n} steps reported, {runs} x {steps} asked"));
    }
    seconds(v, "elapsed_s")
}

/// A timers result: first start to last result, never shorter than the
/// sleep (a peer whose sleepers wake early did not sleep durably).
pub fn timers_done(v: &Value, sleep: Duration) -> Result<Duration, Malformed> {
    let t = seconds(v, "all_done_s")?;
    if t < sleep {
        return Err(format!(
            "every sleeper of {} s done after {} s",
            sleep.as_secs_f64(),
            t.as_secs_f64()
        ));
    }
    Ok(t)
}

/// A recovery's result: its time, checked to cover all `runs` runs.
pub fn recovered(v: &Value, runs: u32) -> Result<Duration, Malformed> {
    let n = count(v, "completed")?;
    if n != u64::from(runs) {
        return Err(format!(
            "{n} runs completed after the restart, {runs} started"
        ));
    }
    seconds(v, "elapsed_s")
}

/// The `strace -c` summary's calls per system call, for `names`.
pub fn strace_calls(summary: &str, names: &[&str]) -> Vec<(String, u64)> {
    // Rows: `% time  seconds  usecs/call  calls  [errors]  syscall`; the
    // name is last and the calls the fourth column.
    names
        .iter()
        .map(|&name| {
            let calls = summary
                .lines()
                .filter_map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    (cols.last() == Some(&name) && cols.len() >= 5)
                        .then(|| cols.get(3).and_then(|c| c.parse::<u64>().ok()))
                        .flatten()
                })
                .sum();
            (name.to_string(), calls)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_messages_and_logs_are_skipped() {
        assert_eq!(Message::parse(r#"{"ready": true}"#), Some(Message::Ready));
        assert_eq!(Message::parse(r#"{"done":7}"#), Some(Message::Done(7)));
        assert_eq!(
            Message::parse(r#"{"error": "boom"}"#),
            Some(Message::Error("boom".into()))
        );
        assert!(matches!(
            Message::parse(r#"{"result": {"steps": 1}}"#),
            Some(Message::Result(_))
        ));
        assert_eq!(Message::parse("19:34:09 [INFO] (dbos) launched"), None);
        assert_eq!(Message::parse(r#"{"ready": false}"#), None);
        assert_eq!(Message::parse("[1, 2]"), None);
    }

    #[test]
    fn results_are_checked_not_trusted() -> Result<(), Malformed> {
        let chain: Value =
            serde_json::from_str(r#"{"gaps_us": [1500.5, 2000]}"#).map_err(|e| e.to_string())?;
        assert_eq!(
            chain_gaps(&chain, 3)?,
            [Duration::from_nanos(1_500_500), Duration::from_millis(2)]
        );
        assert!(chain_gaps(&chain, 4).is_err());
        let fan: Value = serde_json::from_str(r#"{"steps": 200, "elapsed_s": 0.5}"#)
            .map_err(|e| e.to_string())?;
        assert_eq!(fanout_elapsed(&fan, 20, 10)?, Duration::from_millis(500));
        assert!(fanout_elapsed(&fan, 21, 10).is_err());
        let early: Value =
            serde_json::from_str(r#"{"all_done_s": 0.9}"#).map_err(|e| e.to_string())?;
        assert!(timers_done(&early, Duration::from_secs(1)).is_err());
        let rec: Value = serde_json::from_str(r#"{"completed": 9, "elapsed_s": 2}"#)
            .map_err(|e| e.to_string())?;
        assert!(recovered(&rec, 10).is_err());
        assert_eq!(recovered(&rec, 9)?, Duration::from_secs(2));
        Ok(())
    }

    #[test]
    fn strace_summaries_are_read_by_column() {
        let s = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 90.00    0.009000         450        20           fdatasync
 10.00    0.001000         100        10         1 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000         333        30         1 total
";
        assert_eq!(
            strace_calls(s, &["fsync", "fdatasync", "sync_file_range"]),
            [
                ("fsync".to_string(), 10),
                ("fdatasync".to_string(), 20),
                ("sync_file_range".to_string(), 0)
            ]
        );
    }
}
