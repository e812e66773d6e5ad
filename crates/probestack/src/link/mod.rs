//! The link layer: Ethernet II framing and demultiplexing, and ARP (RFC 826).
//!
//! Receive: a frame from the driver is checked for its destination and type, then handed
//! to IP or ARP with its Ethernet header stripped (the buffer's window moves; nothing is
//! copied). Send: IP hands down a datagram and the next hop's address; the link resolves
//! the address (or queues the datagram while it asks), prepends the header into the
//! buffer's headroom, and gives the frame to the driver.

pub mod arp;
pub(crate) mod template;

use crate::buf::{PacketBuf, Pool};
use crate::driver::{DeviceContext, RxFrame, TxMeta};
use crate::link::arp::Resolution;
use crate::probe::{Counter, Layer, Ledger, Op, Sampling, Side};
use crate::stack::Stack;
use crate::time::Instant;
use crate::wire::arp::{self as arp_wire, ArpOperation, ArpRepr};
use crate::wire::ethernet::{self, EtherType, EthernetAddress, EthernetRepr};
use crate::wire::Ipv4Address;

impl Stack {
    /// A frame from interface `iface`'s device.
    #[inline(always)]
    pub(crate) fn link_input(&mut self, s: impl Sampling, iface: usize, rx: RxFrame, now: Instant) {
        let RxFrame {
            mut frame,
            checksum,
        } = rx;
        let (ethertype, link_broadcast) = loop {
            let parsed = {
                let _p = self
                    .ledger
                    .probe(s, Layer::Link, Side::Receive, Op::LinkProto);
                // Only the type is kept; the destination is read from the frame where it
                // lies (taken from a parsed header built on the stack, it was read back
                // with loads the CPU could not forward from the stores that built it, a
                // stall a frame).
                match ethernet::Frame::new_checked(frame.data()) {
                    Ok(f) => match EthernetRepr::parse(&f) {
                        Ok(r) => {
                            let destination = f.destination();
                            if destination == self.ifaces[iface].mac {
                                Ok((r.ethertype, false))
                            } else if destination.is_broadcast() {
                                Ok((r.ethertype, true))
                            } else {
                                Err(Counter::LinkDropNotForUs)
                            }
                        }
                        Err(_) => Err(Counter::LinkDropMalformed),
                    },
                    Err(_) => Err(Counter::LinkDropMalformed),
                }
            };
            match parsed {
                Ok((EtherType::Arp, _)) | Err(Counter::LinkDropMalformed) if frame.has_frags() => {
                    // A device may cut a frame anywhere, and this one cut it inside the
                    // Ethernet header (the layers read their headers from the window), or
                    // it holds ARP, which reads one contiguous packet: copied together,
                    // then read again.
                    frame = match self.linearize_received(s, Layer::Link, frame) {
                        Ok(whole) => whole,
                        Err(()) => return,
                    };
                }
                Ok(t) => break t,
                Err(c) => {
                    self.ledger.counters().inc(c);
                    self.pool.free(frame);
                    return;
                }
            }
        };
        // Strip the header: the window moves, the bytes stay where they are.
        if frame.trim_front(ethernet::HEADER_LEN).is_err() {
            self.ledger.counters().inc(Counter::LinkDropMalformed);
            self.pool.free(frame);
            return;
        }
        match ethertype {
            EtherType::Ipv4 if link_broadcast && !self.ip_link_broadcast_ok(iface, &frame) => {
                self.ledger.counters().inc(Counter::IpDropLinkBroadcast);
                self.pool.free(frame);
            }
            EtherType::Ipv4 => self.ip_input(s, iface, frame, checksum, now),
            EtherType::Arp => self.arp_input(s, iface, frame, now),
            _ => {
                self.ledger.counters().inc(Counter::LinkDropUnknownType);
                self.pool.free(frame);
            }
        }
    }

    /// An ARP packet (RFC 826 "Packet Reception").
    fn arp_input(&mut self, s: impl Sampling, iface: usize, packet: PacketBuf, now: Instant) {
        let (arp, released, reply) = {
            let _p = self.ledger.probe(s, Layer::Link, Side::Receive, Op::Arp);
            let parsed =
                arp_wire::Packet::new_checked(packet.data()).and_then(|p| ArpRepr::parse(&p));
            let Ok(arp) = parsed else {
                self.ledger.counters().inc(Counter::ArpDropMalformed);
                drop(_p);
                return self.free(s, Layer::Link, Side::Receive, packet);
            };
            let ours = self.ifaces[iface].cidr.address;
            let for_us = arp.target_protocol_addr == ours;
            match arp.operation {
                ArpOperation::Request => self.ledger.counters().inc(Counter::ArpRequestsIn),
                ArpOperation::Reply => self.ledger.counters().inc(Counter::ArpRepliesIn),
            }
            // A sender claiming our own address or a non-unicast MAC teaches nothing.
            let sender_ok = arp.sender_hardware_addr.is_unicast()
                && !arp.sender_protocol_addr.is_unspecified()
                && arp.sender_protocol_addr != ours;
            // "Merge": update an entry we have; create one if we are the target.
            let released = if sender_ok {
                self.ifaces[iface].arp.learn(
                    arp.sender_protocol_addr,
                    arp.sender_hardware_addr,
                    for_us,
                    now,
                )
            } else {
                Vec::new()
            };
            let reply =
                (for_us && sender_ok && arp.operation == ArpOperation::Request).then(|| ArpRepr {
                    operation: ArpOperation::Reply,
                    sender_hardware_addr: self.ifaces[iface].mac,
                    sender_protocol_addr: ours,
                    target_hardware_addr: arp.sender_hardware_addr,
                    target_protocol_addr: arp.sender_protocol_addr,
                });
            (arp, released, reply)
        };
        self.free(s, Layer::Link, Side::Receive, packet);
        for p in released {
            self.link_send_ipv4(s, iface, arp.sender_hardware_addr, p, now);
        }
        if let Some(reply) = reply {
            if self.send_arp(s, iface, &reply, arp.sender_hardware_addr, now) {
                self.ledger.counters().inc(Counter::ArpRepliesOut);
            }
        }
    }

    /// Asks who has `target` on interface `iface`.
    pub(crate) fn send_arp_request(
        &mut self,
        s: impl Sampling,
        iface: usize,
        target: Ipv4Address,
        now: Instant,
    ) {
        let i = &self.ifaces[iface];
        let req = ArpRepr {
            operation: ArpOperation::Request,
            sender_hardware_addr: i.mac,
            sender_protocol_addr: i.cidr.address,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        };
        if self.send_arp(s, iface, &req, EthernetAddress::BROADCAST, now) {
            self.ledger.counters().inc(Counter::ArpRequestsOut);
        }
    }

    fn send_arp(
        &mut self,
        s: impl Sampling,
        iface: usize,
        arp: &ArpRepr,
        to: EthernetAddress,
        now: Instant,
    ) -> bool {
        let Ok(mut buf) = self.alloc(s, Layer::Link, Side::Send, arp.buffer_len()) else {
            return false;
        };
        let emitted = {
            let _p = self.ledger.probe(s, Layer::Link, Side::Send, Op::Arp);
            arp.emit(&mut arp_wire::Packet::new_unchecked(buf.data_mut()))
        };
        if emitted.is_err() {
            self.pool.free(buf);
            return false;
        }
        self.link_send(s, iface, to, EtherType::Arp, buf, now)
    }

    /// Sends an IP datagram to `next_hop` on `iface`: now if its MAC is known, else after
    /// ARP answers.
    pub(crate) fn link_output(
        &mut self,
        s: impl Sampling,
        iface: usize,
        next_hop: Ipv4Address,
        datagram: PacketBuf,
        now: Instant,
    ) {
        let i = &self.ifaces[iface];
        if next_hop.is_broadcast() || Some(next_hop) == i.broadcast {
            self.link_send_ipv4(s, iface, EthernetAddress::BROADCAST, datagram, now);
            return;
        }
        let resolution = {
            let _p = self.ledger.probe(s, Layer::Link, Side::Send, Op::Arp);
            self.ifaces[iface].arp.resolve(next_hop, datagram, now)
        };
        match resolution {
            Resolution::Resolved(mac, d) => self.link_send_ipv4(s, iface, mac, d, now),
            Resolution::QueuedSendRequest => self.send_arp_request(s, iface, next_hop, now),
            Resolution::Queued => {}
            Resolution::TableFull(p) => {
                self.ledger.counters().inc(Counter::ArpDropTableFull);
                self.pool.free(p);
            }
            Resolution::QueuedDropped(old) => {
                self.ledger.counters().inc(Counter::ArpDropQueueFull);
                self.pool.free(old);
            }
        }
    }

    pub(crate) fn link_send_ipv4(
        &mut self,
        s: impl Sampling,
        iface: usize,
        to: EthernetAddress,
        datagram: PacketBuf,
        now: Instant,
    ) {
        self.link_send(s, iface, to, EtherType::Ipv4, datagram, now);
    }

    /// Prepends the Ethernet header into the buffer's headroom and transmits.
    fn link_send(
        &mut self,
        s: impl Sampling,
        iface: usize,
        to: EthernetAddress,
        ethertype: EtherType,
        mut buf: PacketBuf,
        now: Instant,
    ) -> bool {
        {
            let _p = self.ledger.probe(s, Layer::Link, Side::Send, Op::LinkProto);
            let repr = EthernetRepr {
                source: self.ifaces[iface].mac,
                destination: to,
                ethertype,
            };
            let ok = match buf.prepend(ethernet::HEADER_LEN) {
                Ok(h) => repr.emit(&mut ethernet::Frame::new_unchecked(h)).is_ok(),
                Err(_) => false,
            };
            if !ok {
                self.ledger.counters().inc(Counter::StackDropNoBuffer);
                self.pool.free(buf);
                return false;
            }
        }
        self.device_transmit(s, iface, buf, now)
    }

    /// Hands a whole frame to the interface's device. A full transmit queue drops the
    /// frame here, counted, and its buffer goes back to the pool.
    pub(crate) fn device_transmit(
        &mut self,
        s: impl Sampling,
        iface: usize,
        frame: PacketBuf,
        now: Instant,
    ) -> bool {
        let frame = if frame.has_frags() && !self.ifaces[iface].caps.scatter_gather {
            match self.linearize(s, frame) {
                Ok(f) => f,
                Err(()) => return false,
            }
        } else {
            frame
        };
        let refused = {
            let _p = self
                .ledger
                .probe(s, Layer::Driver, Side::Send, Op::DeviceQueue);
            let cx = DeviceContext {
                now,
                ledger: &self.ledger,
            };
            let dev = &mut self.ifaces[iface].device;
            if dev.tx_ready() {
                // The frame leaves the stack: the pool stops counting it (the device, or
                // the stack at the other end of a memory link, frees it).
                let frame = self.pool.detach(frame);
                let meta = TxMeta::for_frame(frame.data(), frame.tx_offload());
                let sent = if s.on() {
                    dev.transmit(frame, meta, &cx)
                } else {
                    dev.transmit_unprobed(frame, meta, &cx)
                };
                sent.err().map(|_| None)
            } else {
                Some(Some(frame))
            }
        };
        match refused {
            None => true,
            Some(kept) => {
                self.ledger.counters().inc(Counter::StackDropDeviceRefused);
                if let Some(f) = kept {
                    self.free(s, Layer::Driver, Side::Send, f);
                }
                false
            }
        }
    }

    /// The frame with its external fragments copied into its window (the driver's copy
    /// for a device that cannot gather, Linux's `skb_linearize`), charged to the driver:
    /// in place if the tailroom allows, else into a new buffer. Counted.
    pub(crate) fn linearize(
        &mut self,
        s: impl Sampling,
        frame: PacketBuf,
    ) -> Result<PacketBuf, ()> {
        self.ledger.counters().inc(Counter::DriverTxLinearized);
        let _p = self
            .ledger
            .probe(s, Layer::Driver, Side::Send, Op::DeviceCopy);
        gather_frags(&mut self.pool, &self.ledger, frame)
    }

    /// A received datagram's fragments copied behind its bytes, for a layer that reads
    /// one contiguous buffer (counted; the copy charged to `layer`).
    #[cold]
    pub(crate) fn linearize_received(
        &mut self,
        s: impl Sampling,
        layer: Layer,
        frame: PacketBuf,
    ) -> Result<PacketBuf, ()> {
        self.ledger.counters().inc(Counter::StackRxLinearized);
        let _p = self.ledger.probe(s, layer, Side::Receive, Op::SocketCopy);
        gather_frags(&mut self.pool, &self.ledger, frame)
    }

    /// Gives a buffer back to the pool, charged to the layer that is done with it.
    pub(crate) fn free(&mut self, s: impl Sampling, layer: Layer, side: Side, buf: PacketBuf) {
        let _p = self.ledger.probe(s, layer, side, Op::BufFree);
        self.pool.free(buf);
    }

    /// A packet buffer for `len` bytes with headroom for every header below, charged to
    /// the layer that asks.
    pub(crate) fn alloc(
        &mut self,
        s: impl Sampling,
        layer: Layer,
        side: Side,
        len: usize,
    ) -> Result<PacketBuf, ()> {
        let _p = self.ledger.probe(s, layer, side, Op::BufAlloc);
        match self.pool.alloc(len, crate::buf::HEADROOM) {
            Ok(b) => Ok(b),
            Err(_) => {
                self.ledger.counters().inc(Counter::StackDropNoBuffer);
                Err(())
            }
        }
    }
}

/// The frame's fragments copied behind its bytes: into its tailroom if they fit, else
/// into a new buffer from `pool` (the old one freed).
fn gather_frags(pool: &mut Pool, ledger: &Ledger, mut frame: PacketBuf) -> Result<PacketBuf, ()> {
    if frame.linearize_in_place().is_ok() {
        return Ok(frame);
    }
    let Ok(mut whole) = pool.alloc(frame.total_len(), frame.headroom()) else {
        ledger.counters().inc(Counter::StackDropNoBuffer);
        pool.free(frame);
        return Err(());
    };
    // The sizes match by construction.
    let _ = frame.gather_into(whole.data_mut());
    whole.set_tx_offload(frame.tx_offload());
    pool.free(frame);
    Ok(whole)
}
