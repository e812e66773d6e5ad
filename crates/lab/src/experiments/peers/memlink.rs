//! smoltcp over probestack's memory link ([`super::System::SmoltcpMemlink`]).
//!
//! The smoltcp peer of the other tables runs over a pair of plain frame queues
//! ([`super::Link`]), while probestack runs over its memory NIC model, which computes a
//! CRC-32 over every frame it sends and checks it on every frame it receives, and moves
//! frames through a transmit ring, a wire and a receive queue. Putting smoltcp on the same
//! NICs, configured exactly as probestack's hosts in this experiment have them
//! ([`HostConfig::with_mtu`]: DMA hand-off, no offloads, a notification per frame), makes
//! the only difference between the two the stacks themselves.
//!
//! Each end is a [`MemoryNic`] and a buffer [`Pool`] sharing the link's depot, as a
//! probestack stack's pool does: smoltcp writes each frame it sends into a pool buffer the
//! NIC then owns, and reads each frame it receives straight from the buffer the NIC hands
//! up, which goes back to the pool once read.

use probestack::buf::{PacketBuf, Pool};
use probestack::driver::{
    Device as NicDevice, DeviceContext, MemoryLink, MemoryNic, NicConfig, TxMeta,
};
use probestack::probe::Ledger;
use probestack::sim::HostConfig;
use probestack::time::Instant;
use smoltcp::phy::{Device, DeviceCapabilities, RxToken, TxToken};

use super::{smol_caps, End, SmolWire, ETHERNET_HEADER};

/// Two memory NICs joined by a memory link, as smoltcp devices.
pub(super) struct NicWire {
    a: NicEnd,
    b: NicEnd,
    /// The NICs count their drops and set their work apart in a ledger; smoltcp has none,
    /// so this one is theirs alone (no message is ever opened on it, so nothing is timed).
    ledger: Ledger,
    ethernet_mtu: usize,
}

/// One end: its NIC and where its frames' buffers come from.
struct NicEnd {
    nic: MemoryNic,
    pool: Pool,
    /// Received buffers smoltcp has read, for the pool at the next call (the receive
    /// token cannot reach the pool: the transmit token handed out beside it holds it).
    spent: Vec<PacketBuf>,
}

impl NicEnd {
    fn reclaim(&mut self) {
        for frame in self.spent.drain(..) {
            self.pool.free(frame);
        }
    }
}

impl NicWire {
    /// A link whose frames carry IP datagrams of up to `ip_mtu` bytes, on the NICs
    /// probestack's hosts in `lab peers` have.
    pub(super) fn new(ip_mtu: usize) -> Result<NicWire, String> {
        let config = HostConfig::with_mtu(ip_mtu).nic;
        NicWire::with_nics(config, config)
    }

    /// A link between NICs configured as `a` and `b`.
    pub(super) fn with_nics(a: NicConfig, b: NicConfig) -> Result<NicWire, String> {
        let ip_mtu = a.mtu.min(b.mtu);
        let (a, b) = MemoryLink::pair(a, b).map_err(|e| format!("memory link: {e}"))?;
        let end = |nic: MemoryNic| {
            let mut pool = Pool::with_cache(true);
            pool.set_depot(nic.buffer_depot());
            NicEnd {
                nic,
                pool,
                spent: Vec::new(),
            }
        };
        Ok(NicWire {
            a: end(a),
            b: end(b),
            ledger: Ledger::new(),
            ethernet_mtu: ip_mtu + ETHERNET_HEADER,
        })
    }

    /// `end`'s NIC's counters.
    #[cfg(test)]
    fn stats(&self, end: End) -> probestack::driver::NicStats {
        match end {
            End::A => self.a.nic.stats(),
            End::B => self.b.nic.stats(),
        }
    }
}

impl SmolWire for NicWire {
    type Port<'a> = NicPort<'a>;

    fn port(&mut self, end: End, now: Instant) -> NicPort<'_> {
        let end = match end {
            End::A => &mut self.a,
            End::B => &mut self.b,
        };
        NicPort {
            end,
            cx: DeviceContext {
                now,
                ledger: &self.ledger,
            },
            ethernet_mtu: self.ethernet_mtu,
        }
    }
}

/// One end of a [`NicWire`] for one poll, as a smoltcp device.
pub(super) struct NicPort<'w> {
    end: &'w mut NicEnd,
    cx: DeviceContext<'w>,
    ethernet_mtu: usize,
}

/// A frame the NIC handed up; its buffer goes back to the pool once read.
pub(super) struct NicFrameIn<'a> {
    frame: PacketBuf,
    spent: &'a mut Vec<PacketBuf>,
}

/// Room for one frame in the NIC's transmit ring.
pub(super) struct NicFrameOut<'a> {
    nic: &'a mut MemoryNic,
    pool: &'a mut Pool,
    cx: DeviceContext<'a>,
}

impl RxToken for NicFrameIn<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        // These NICs split no headers, so a frame is one buffer; were it not, it is made
        // whole here as a driver would.
        let r = if self.frame.has_frags() {
            let mut whole = vec![0u8; self.frame.total_len()];
            let _ = self.frame.gather_into(&mut whole);
            f(&whole)
        } else {
            f(self.frame.data())
        };
        self.spent.push(self.frame);
        r
    }
}

impl TxToken for NicFrameOut<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let Ok(mut frame) = self.pool.alloc(len, 0) else {
            // No buffer: smoltcp writes its frame nowhere and it is lost, as a frame a
            // driver has no descriptor for.
            return f(&mut vec![0u8; len]);
        };
        let r = f(frame.data_mut());
        // The frame leaves this end (the NIC, then the stack at the other end, frees it).
        let frame = self.pool.detach(frame);
        // A refused frame is lost on the wire, as probestack's are; smoltcp's timers and
        // the workloads' checks deal with it. `transmit` asked `tx_ready` first.
        let _ = self.nic.transmit(frame, TxMeta::default(), &self.cx);
        r
    }
}

impl Device for NicPort<'_> {
    type RxToken<'a>
        = NicFrameIn<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = NicFrameOut<'a>
    where
        Self: 'a;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.end.reclaim();
        let rx = self.end.nic.receive(&self.cx)?;
        let NicEnd { nic, pool, spent } = &mut *self.end;
        Some((
            NicFrameIn {
                frame: rx.frame,
                spent,
            },
            NicFrameOut {
                nic,
                pool,
                cx: self.cx,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        if !self.end.nic.tx_ready() {
            return None;
        }
        self.end.reclaim();
        Some(NicFrameOut {
            nic: &mut self.end.nic,
            pool: &mut self.end.pool,
            cx: self.cx,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        // As on the queue link: smoltcp computes and verifies every checksum itself (it
        // has no use for the NIC's CRC).
        smol_caps(self.ethernet_mtu)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{template, Peers, SmolPeers};
    use super::*;
    use probestack::driver::FaultConfig;
    use probestack::time::{Clock, RealClock};

    #[test]
    fn smoltcp_frames_cross_the_memory_nics_and_their_crc_is_checked() {
        let clock = RealClock::new();
        let config = HostConfig::with_mtu(1500).nic;
        // Every frame into B has a bit flipped that the CRC-32 catches.
        let garbling = NicConfig {
            rx_faults: FaultConfig {
                flip_caught: 1.0,
                ..FaultConfig::seeded(7)
            },
            ..config
        };
        let wire = NicWire::with_nics(config, garbling).unwrap();
        let mut p = SmolPeers::new(wire, clock.now()).unwrap();
        let data = template(64);
        let mut buf = vec![0u8; 2048];
        for _ in 0..4 {
            assert!(p.send_a(&data).unwrap());
            let now = clock.now();
            p.poll_a(now);
            p.poll_b(now);
        }
        // A's frames (ARP requests: it never hears a reply) went out through its NIC and
        // B's NIC dropped every one for its FCS: nothing reaches smoltcp at B.
        assert!(p.link.stats(End::A).tx_frames > 0);
        assert_eq!(
            p.link.stats(End::B).rx_bad_fcs,
            p.link.stats(End::A).tx_frames
        );
        assert_eq!(p.link.stats(End::B).tx_frames, 0);
        assert_eq!(p.recv_b(&mut buf).unwrap(), None);

        // On clean NICs the same exchange delivers, through both NICs.
        let mut p = SmolPeers::new(NicWire::new(1500).unwrap(), clock.now()).unwrap();
        assert!(p.send_a(&data).unwrap());
        for _ in 0..4 {
            let now = clock.now();
            p.poll_a(now);
            p.poll_b(now);
        }
        assert_eq!(p.recv_b(&mut buf).unwrap(), Some(64));
        assert_eq!(buf[..64], data[..]);
        // ARP request and reply, then the datagram.
        assert_eq!(p.link.stats(End::A).tx_frames, 2);
        assert_eq!(p.link.stats(End::B).tx_frames, 1);
        assert_eq!(p.link.stats(End::B).rx_bad_fcs, 0);
    }
}
