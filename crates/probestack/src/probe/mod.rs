//! The cost ledger: where the time of protocol processing goes, by layer, by operation, by
//! side, per message size (DESIGN.md §4).
//!
//! - [`taxonomy`]: the layers, sides and operations, and the three ways of grouping them
//!   (paper 001's categories, paper 000's classes, Cai et al.'s categories).
//! - [`ledger`]: scoped probes with exclusive attribution, sampled per message.
//! - [`clock`]: the invariant TSC, calibrated, or the monotonic clock.
//! - [`counters`]: `netstat -s`-style event counters.
//!
//! A [`Snapshot`] is plain data: it gives the views the lab prints (per message, by
//! operation, category, layer, paper-000 class, data touching or not, Cai category) and
//! exports JSON and CSV.

pub mod clock;
pub mod counters;
pub mod ledger;
pub mod taxonomy;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Write;

pub use clock::ProbeClock;
pub use counters::{Counter, Counters};
pub use ledger::{
    Bucketing, Ledger, Message, Probe, Sampled, Sampling, Unsampled, DEFAULT_SAMPLE_EVERY, TESTED,
};
pub use taxonomy::{CaiCategory, Category, Class000, Layer, Op, Side};

/// Time charged to one (layer, side, op) in one bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotCell {
    pub layer: Layer,
    pub side: Side,
    pub op: Op,
    /// Total nanoseconds over the bucket's sampled messages.
    pub ns: f64,
    /// Probes closed.
    pub count: u64,
}

/// One message-size bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotBucket {
    /// The bucket key: the message size (or its power-of-two ceiling).
    pub size: u32,
    /// Sampled messages in the bucket.
    pub messages: u64,
    /// Their total wall time, from opening to closing the message.
    pub wall_ns: f64,
    /// The part of the wall time that was the device's work (a NIC model's), not the host's.
    pub device_ns: f64,
    /// Probes closed in these messages.
    pub probes: u64,
    /// The probes' own cost per message: probes per message times the measured cost of one.
    pub probe_overhead_ns: f64,
    pub cells: Vec<SnapshotCell>,
}

/// The ledger as plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub probes_enabled: bool,
    /// "tsc", "monotonic", or "none" without probes.
    pub clock: &'static str,
    pub ns_per_tick: f64,
    /// The measured cost of one probe to the code around it, in nanoseconds.
    pub probe_overhead_ns: f64,
    pub sample_every: u32,
    pub messages_seen: u64,
    pub buckets: Vec<SnapshotBucket>,
    pub counters: Vec<(&'static str, u64)>,
}

impl SnapshotBucket {
    /// Average nanoseconds per message, grouped by `key`.
    pub fn per_message<K: Ord>(&self, key: impl Fn(&SnapshotCell) -> K) -> BTreeMap<K, f64> {
        let mut m = BTreeMap::new();
        let n = self.messages.max(1) as f64;
        for c in &self.cells {
            *m.entry(key(c)).or_insert(0.0) += c.ns / n;
        }
        m
    }

    /// Nanoseconds per message the probes account for.
    pub fn accounted_ns(&self) -> f64 {
        self.cells.iter().map(|c| c.ns).sum::<f64>() / self.messages.max(1) as f64
    }

    /// Wall nanoseconds per message.
    pub fn wall_ns_per_message(&self) -> f64 {
        self.wall_ns / self.messages.max(1) as f64
    }

    /// Device work per message (not the host's).
    pub fn device_ns_per_message(&self) -> f64 {
        self.device_ns / self.messages.max(1) as f64
    }

    /// The host's wall time per message: the wall time less the device's work.
    pub fn host_ns_per_message(&self) -> f64 {
        (self.wall_ns - self.device_ns) / self.messages.max(1) as f64
    }

    /// Host time per message that no probe covered (unprobed code), the probes' own cost
    /// set apart.
    pub fn unaccounted_ns(&self) -> f64 {
        (self.host_ns_per_message() - self.accounted_ns() - self.probe_overhead_ns).max(0.0)
    }

    /// The stack's own processing per message: host time less the probes' cost.
    pub fn stack_ns_per_message(&self) -> f64 {
        (self.host_ns_per_message() - self.probe_overhead_ns).max(0.0)
    }

    /// The share of the stack's processing the probes account for.
    pub fn accounted_share(&self) -> f64 {
        let s = self.stack_ns_per_message();
        if s > 0.0 {
            (self.accounted_ns() / s).min(1.0)
        } else {
            0.0
        }
    }

    pub fn by_operation(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.op.name())
    }

    pub fn by_category(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.op.category().name())
    }

    pub fn by_layer(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.layer.name())
    }

    /// Paper 000's classes with COPY split (user, device, cache clear).
    pub fn by_class000(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.op.class000().name())
    }

    /// Paper 000's four coarse classes.
    pub fn by_coarse000(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.op.class000().coarse())
    }

    /// Data-touching vs non-data-touching (paper 001).
    pub fn by_data_touching(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| {
            if c.op.touches_data() {
                "data_touching"
            } else {
                "non_data_touching"
            }
        })
    }

    pub fn by_cai(&self) -> BTreeMap<&'static str, f64> {
        self.per_message(|c| c.op.cai().name())
    }

    /// One side only.
    pub fn side(&self, side: Side) -> SnapshotBucket {
        SnapshotBucket {
            cells: self
                .cells
                .iter()
                .filter(|c| c.side == side)
                .copied()
                .collect(),
            ..self.clone()
        }
    }
}

impl Snapshot {
    /// Every bucket added together, for an aggregate over all sizes.
    pub fn merged(&self) -> SnapshotBucket {
        let mut cells: BTreeMap<(Layer, Side, Op), SnapshotCell> = BTreeMap::new();
        let (mut messages, mut wall_ns, mut device_ns, mut probes) = (0, 0.0, 0.0, 0);
        for b in &self.buckets {
            messages += b.messages;
            wall_ns += b.wall_ns;
            device_ns += b.device_ns;
            probes += b.probes;
            for c in &b.cells {
                let e = cells
                    .entry((c.layer, c.side, c.op))
                    .or_insert(SnapshotCell {
                        ns: 0.0,
                        count: 0,
                        ..*c
                    });
                e.ns += c.ns;
                e.count += c.count;
            }
        }
        SnapshotBucket {
            size: 0,
            messages,
            wall_ns,
            device_ns,
            probes,
            probe_overhead_ns: probes as f64 * self.probe_overhead_ns / messages.max(1) as f64,
            cells: cells.into_values().collect(),
        }
    }

    /// The bucket for `size`, if any message of that size was sampled.
    pub fn bucket(&self, size: u32) -> Option<&SnapshotBucket> {
        self.buckets.iter().find(|b| b.size == size)
    }

    /// One row per (bucket, layer, side, op) with every grouping key, for spreadsheets.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "size,layer,side,op,category,class000,cai,touches_data,count,ns_total,ns_per_message\n",
        );
        for b in &self.buckets {
            for c in &b.cells {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{:.1},{:.3}",
                    b.size,
                    c.layer.name(),
                    c.side.name(),
                    c.op.name(),
                    c.op.category().name(),
                    c.op.class000().name(),
                    c.op.cai().name(),
                    c.op.touches_data(),
                    c.count,
                    c.ns,
                    c.ns / b.messages.max(1) as f64
                );
            }
        }
        out
    }

    /// The whole snapshot as one JSON object: settings, counters, and per bucket the
    /// messages, wall time, unaccounted time, the cells, and the views.
    pub fn to_json(&self) -> String {
        let mut o = String::new();
        let _ = write!(
            o,
            "{{\"probes_enabled\":{},\"clock\":\"{}\",\"ns_per_tick\":{},\"probe_overhead_ns\":{},\"sample_every\":{},\"messages_seen\":{},",
            self.probes_enabled,
            self.clock,
            json_num(self.ns_per_tick),
            json_num(self.probe_overhead_ns),
            self.sample_every,
            self.messages_seen
        );
        o.push_str("\"counters\":{");
        for (i, (name, v)) in self.counters.iter().enumerate() {
            let _ = write!(o, "{}\"{}\":{}", if i > 0 { "," } else { "" }, name, v);
        }
        o.push_str("},\"buckets\":[");
        for (i, b) in self.buckets.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "{{\"size\":{},\"messages\":{},\"wall_ns_per_message\":{},\"device_ns_per_message\":{},\"probe_overhead_ns_per_message\":{},\"accounted_share\":{},\"accounted_ns_per_message\":{},\"unaccounted_ns_per_message\":{},",
                b.size,
                b.messages,
                json_num(b.wall_ns_per_message()),
                json_num(b.device_ns_per_message()),
                json_num(b.probe_overhead_ns),
                json_num(b.accounted_share()),
                json_num(b.accounted_ns()),
                json_num(b.unaccounted_ns())
            );
            for (name, view) in [
                ("by_operation", b.by_operation()),
                ("by_category", b.by_category()),
                ("by_layer", b.by_layer()),
                ("by_class000", b.by_class000()),
                ("by_coarse000", b.by_coarse000()),
                ("by_data_touching", b.by_data_touching()),
                ("by_cai", b.by_cai()),
            ] {
                let _ = write!(o, "\"{name}\":{{");
                for (j, (k, v)) in view.iter().enumerate() {
                    let _ = write!(
                        o,
                        "{}\"{}\":{}",
                        if j > 0 { "," } else { "" },
                        k,
                        json_num(*v)
                    );
                }
                o.push_str("},");
            }
            o.push_str("\"cells\":[");
            for (j, c) in b.cells.iter().enumerate() {
                let _ = write!(
                    o,
                    "{}{{\"layer\":\"{}\",\"side\":\"{}\",\"op\":\"{}\",\"count\":{},\"ns\":{}}}",
                    if j > 0 { "," } else { "" },
                    c.layer.name(),
                    c.side.name(),
                    c.op.name(),
                    c.count,
                    json_num(c.ns)
                );
            }
            o.push_str("]}");
        }
        o.push_str("]}");
        o
    }
}

/// A finite number as JSON (JSON has no NaN or infinity; those become 0).
fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "0".to_string()
    }
}
