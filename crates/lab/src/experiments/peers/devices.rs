//! The devices alone: what carrying one frame from A to B costs on each of the two
//! devices the smoltcp rows run over, with no stack above them.
//!
//! smoltcp on its frame queue ([`super::Link`]) and smoltcp on probestack's memory NICs
//! ([`super::memlink::NicWire`]) differ only in the device; this measures that difference
//! directly, through the same smoltcp device interface the stacks use: A's device is asked
//! for a transmit token and the frame is written into it, B's for a receive token and the
//! frame is read (its sequence number checked), in bursts of [`BURST`]. The frame is the
//! length a 64-byte UDP datagram makes (14 + 20 + 8 + 64 = 106 bytes), so the figure sits
//! beside the UDP one-way table's.

use serde::Serialize;
use smoltcp::phy::{Device, RxToken, TxToken};
use std::time::Instant as WallInstant;

use probestack::time::{Clock, RealClock};

use super::memlink::NicWire;
use super::{End, Link, SmolWire, BURST};
use crate::bench::median;

/// The frame a 64-byte UDP datagram makes: Ethernet, IPv4 and UDP headers and the data.
pub const FRAME_BYTES: usize = 14 + 20 + 8 + 64;

/// The devices measured, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// The smoltcp rows' pair of frame queues.
    FrameQueue,
    /// probestack's memory NICs, as probestack's hosts in `lab peers` have them.
    MemoryNic,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 2] = [DeviceKind::FrameQueue, DeviceKind::MemoryNic];

    /// The name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::FrameQueue => "frame_queue",
            DeviceKind::MemoryNic => "memory_nic",
        }
    }

    /// The name in the table.
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::FrameQueue => "frame queue (smoltcp rows)",
            DeviceKind::MemoryNic => "memory NIC (probestack and smoltcp, memory NIC rows)",
        }
    }
}

/// One device's figure.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceRow {
    /// `frame_queue` or `memory_nic`.
    pub device: &'static str,
    pub frame_bytes: usize,
    /// The median over the runs of ns per frame carried from A to B.
    pub ns_per_frame: f64,
    pub run_min: f64,
    pub run_max: f64,
}

/// Frames sent by A and read by B so far.
#[derive(Default)]
struct Carried {
    sent: u64,
    read: u64,
}

/// One burst: A's device takes [`BURST`] frames of `len` bytes, each stamped with its
/// sequence number, then B's gives up everything it has, which must be all of them, in
/// order and whole.
fn burst<W: SmolWire>(
    wire: &mut W,
    len: usize,
    clock: &RealClock,
    c: &mut Carried,
) -> Result<(), String> {
    let ts = smoltcp::time::Instant::ZERO;
    let now = clock.now();
    let mut a = wire.port(End::A, now);
    for _ in 0..BURST {
        let token = a
            .transmit(ts)
            .ok_or("the device had no room for a frame in an empty queue")?;
        token.consume(len, |frame| {
            frame.fill(0xA5);
            frame[..8].copy_from_slice(&c.sent.to_le_bytes());
        });
        c.sent += 1;
    }
    drop(a);
    let mut b = wire.port(End::B, now);
    while let Some((rx, _)) = b.receive(ts) {
        let (n, seq) = rx.consume(|frame| {
            let seq = frame.get(..8).and_then(|s| s.try_into().ok());
            (frame.len(), seq.map(u64::from_le_bytes))
        });
        if n != len || seq != Some(c.read) {
            return Err(format!(
                "frame {} arrived as {n} bytes with sequence {seq:?}",
                c.read
            ));
        }
        c.read += 1;
    }
    if c.read != c.sent {
        return Err(format!(
            "{} of {} frames did not arrive",
            c.sent - c.read,
            c.sent
        ));
    }
    Ok(())
}

/// Frames of `len` bytes from A to B on `wire` for `millis` ms, after a warm-up of a
/// thousand bursts: ns per frame B read.
fn carry<W: SmolWire>(wire: &mut W, len: usize, millis: u64) -> Result<f64, String> {
    let clock = RealClock::new();
    let mut c = Carried::default();
    for _ in 0..1000 {
        burst(wire, len, &clock, &mut c)?;
    }
    let first = c.read;
    let start = WallInstant::now();
    while start.elapsed().as_millis() < u128::from(millis) {
        burst(wire, len, &clock, &mut c)?;
    }
    Ok(start.elapsed().as_nanos() as f64 / (c.read - first) as f64)
}

/// One run on `device`, built afresh: ns per frame.
pub fn frame_cost(device: DeviceKind, millis: u64) -> Result<f64, String> {
    match device {
        DeviceKind::FrameQueue => carry(&mut Link::new(1500), FRAME_BYTES, millis),
        DeviceKind::MemoryNic => carry(&mut NicWire::new(1500)?, FRAME_BYTES, millis),
    }
}

/// Both devices, round-robin, a warm-up round and `runs` rounds of `millis` ms.
pub fn measure(runs: usize, millis: u64) -> Result<Vec<DeviceRow>, String> {
    let mut values = vec![Vec::new(); DeviceKind::ALL.len()];
    for round in 0..=runs {
        for k in 0..DeviceKind::ALL.len() {
            let i = (round + k) % DeviceKind::ALL.len();
            let ns = frame_cost(DeviceKind::ALL[i], millis)
                .map_err(|e| format!("{}: {e}", DeviceKind::ALL[i].name()))?;
            if round > 0 {
                values[i].push(ns);
            }
        }
    }
    Ok(DeviceKind::ALL
        .iter()
        .zip(values)
        .map(|(d, mut v)| DeviceRow {
            device: d.name(),
            frame_bytes: FRAME_BYTES,
            run_min: v.iter().copied().fold(f64::INFINITY, f64::min),
            run_max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ns_per_frame: median(&mut v),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_devices_carry_every_frame_in_order() {
        let rows = measure(1, 2).unwrap();
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert!(r.ns_per_frame > 0.0 && r.ns_per_frame.is_finite(), "{r:?}");
            assert_eq!(r.frame_bytes, 106);
        }
    }

    #[test]
    fn a_lost_frame_is_an_error() {
        // A NIC that drops every frame on the wire into B: nothing arrives.
        use probestack::driver::{FaultConfig, NicConfig};
        let config = NicConfig::default();
        let lossy = NicConfig {
            rx_faults: FaultConfig {
                drop: 1.0,
                ..FaultConfig::seeded(3)
            },
            ..config
        };
        let mut wire = NicWire::with_nics(config, lossy).unwrap();
        let e = carry(&mut wire, FRAME_BYTES, 1).unwrap_err();
        assert!(e.contains("did not arrive"), "{e}");
    }
}
