//! Percentiles from a sorted sample: every latency is kept (a run measures
//! at most a few tens of thousands), so no histogram is needed and the
//! figures are exact order statistics.

use std::time::Duration;

/// Latencies collected one by one, summarised by nearest-rank percentiles.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    /// An empty sample with room for `n` latencies.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            nanos: Vec::with_capacity(n),
            sorted: true,
        }
    }

    /// Adds one latency.
    pub fn push(&mut self, d: Duration) {
        self.nanos
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// How many latencies were added.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    /// The sum of every latency added.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.iter().sum())
    }

    /// The sum of what each latency added beyond `threshold` (nothing for
    /// those at or below it): the time the slow ones cost over it.
    pub fn excess_over(&self, threshold: Duration) -> Duration {
        let t = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.nanos.iter().map(|&ns| ns.saturating_sub(t)).sum())
    }

    /// The nearest-rank `p`-th percentile (`p` in `0.0..=100.0`, clamped):
    /// the smallest latency at least `p`% of the sample is at or below.
    /// `None` for an empty sample.
    pub fn percentile(&mut self, p: f64) -> Option<Duration> {
        if self.nanos.is_empty() {
            return None;
        }
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
        let n = self.nanos.len();
        let rank = ((p.clamp(0.0, 100.0) / 100.0) * n as f64).ceil() as usize;
        let i = rank.clamp(1, n) - 1;
        self.nanos.get(i).map(|&ns| Duration::from_nanos(ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut values: Vec<u64> = (1..=100).collect();
        rng.shuffle(&mut values);
        let mut l = Latencies::with_capacity(100);
        for v in values {
            l.push(Duration::from_nanos(v));
        }
        assert_eq!(l.percentile(50.0), Some(Duration::from_nanos(50)));
        assert_eq!(l.percentile(99.0), Some(Duration::from_nanos(99)));
        assert_eq!(l.percentile(100.0), Some(Duration::from_nanos(100)));
        assert_eq!(l.percentile(0.0), Some(Duration::from_nanos(1)));
        assert_eq!(Latencies::default().percentile(50.0), None);
        assert_eq!(l.total(), Duration::from_nanos(5050));
        // 99 and 100 exceed 98 by 1 and 2.
        assert_eq!(
            l.excess_over(Duration::from_nanos(98)),
            Duration::from_nanos(3)
        );
        assert_eq!(l.excess_over(Duration::from_nanos(100)), Duration::ZERO);
    }
}
