//! IPv4 input's short path for the common datagram (`Tuning::udp_rx_short_path`): UDP,
//! a 20-byte header (no options), not a fragment, addressed to the receiving interface's
//! own address, in one whole buffer.
//!
//! Such a datagram is recognised from its header bytes alone
//! ([`Stack::udp_short_eligible`]), with the very conditions under which the general
//! path's `Ipv4Repr::parse` succeeds and its `accepts` and fragment tests pass. The short
//! path then runs what the general path runs after parsing, in the same order and with the
//! same counters: `ip.packets_in`, the header checksum (`ip.drop.bad_checksum`), the
//! link-layer padding trimmed, the search of the reassembly queue when
//! `defrag_check_only_fragments` is off (`ip.defrag_lookups`), `ip.delivered`, and UDP
//! input. What it leaves out is only what produces nothing for this datagram: the
//! `Ipv4Repr` (about 70 bytes built, returned and copied), the walk over the interfaces for
//! broadcast and own addresses, the fragment tests. UDP builds the header representation
//! only if it has to quote the datagram in an ICMP error.
//!
//! Every other datagram (options, fragments, broadcast, another of our addresses, another
//! protocol, a total length that does not fit, loopback, a split buffer) is not touched
//! here and takes the general path, which counts and refuses it as before. The tests below
//! feed the same frames through both paths and compare everything the stacks count.

use crate::buf::PacketBuf;
use crate::driver::RxChecksum;
use crate::ip::reassembly::FragKey;
use crate::probe::{Counter, Layer, Op, Sampling, Side};
use crate::stack::Stack;
use crate::time::Instant;
use crate::udp::UdpInputIp;
use crate::wire::ipv4::MIN_HEADER_LEN;
use crate::wire::Ipv4Address;

/// Version 4 and an IHL of 5 words: a header without options (RFC 791 §3.1).
const VERSION_4_IHL_5: u8 = 0x45;
/// The IP protocol number of UDP.
const PROTOCOL_UDP: u8 = 17;
/// More Fragments and the fragment offset: both zero for a whole datagram.
const MORE_FRAGS_AND_OFFSET: u16 = 0x3FFF;

/// What the short path learned from the header of an eligible datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShortUdp {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    /// The total length field: at least 20 and at most the buffer's length.
    pub total_len: usize,
    /// The identification field (for the search of the reassembly queue).
    pub ident: u16,
}

impl Stack {
    /// Whether the datagram in `buf`, received on `iface`, takes the short path; if so, the
    /// header fields it needs. Counts nothing and changes nothing.
    #[inline]
    pub(crate) fn udp_short_eligible(&self, iface: usize, buf: &PacketBuf) -> Option<ShortUdp> {
        // A split buffer stays on the general path (only TCP is taken split).
        if !self.tuning.udp_rx_short_path || buf.has_frags() {
            return None;
        }
        // Loopback's index names no interface: `get` refuses it.
        let i = self.ifaces.get(iface)?;
        let ours = i.cidr.address;
        let data = buf.data();
        let h = data.first_chunk::<MIN_HEADER_LEN>()?;
        let flags_frag = u16::from_be_bytes([h[6], h[7]]);
        let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let dst = Ipv4Address([h[16], h[17], h[18], h[19]]);
        let src = Ipv4Address([h[12], h[13], h[14], h[15]]);
        // A source the general path would drop goes there to be dropped and counted.
        let eligible = h[0] == VERSION_4_IHL_5
            && h[9] == PROTOCOL_UDP
            && flags_frag & MORE_FRAGS_AND_OFFSET == 0
            && (MIN_HEADER_LEN..=data.len()).contains(&total_len)
            && dst == ours
            && super::valid_source_on(src, i.broadcast);
        eligible.then(|| ShortUdp {
            src,
            dst,
            total_len,
            ident: u16::from_be_bytes([h[4], h[5]]),
        })
    }

    /// The general path's work after parsing, for a datagram [`udp_short_eligible`]
    /// (Self::udp_short_eligible) accepted.
    #[inline]
    pub(crate) fn udp_short_input(
        &mut self,
        s: impl Sampling,
        ip: ShortUdp,
        mut buf: PacketBuf,
        rx: RxChecksum,
        now: Instant,
    ) {
        self.ledger.counters().inc(Counter::IpPacketsIn);
        // Never loopback here, so only a NIC's verdict spares the sum.
        if rx != RxChecksum::Verified {
            let ok = {
                let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::Checksum);
                let header = &buf.data()[..MIN_HEADER_LEN];
                crate::checksum::verifies(self.ip_header_sum(header))
            };
            if !ok {
                self.ledger.counters().inc(Counter::IpDropBadChecksum);
                return self.free(s, Layer::Ip, Side::Receive, buf);
            }
        }
        let trimmed = {
            let _p = self.ledger.probe(s, Layer::Ip, Side::Receive, Op::IpProto);
            // Link-layer padding past the total length.
            match buf.len().saturating_sub(ip.total_len) {
                0 => Ok(()),
                extra => buf.trim_back(extra),
            }
        };
        if trimmed.is_err() {
            self.ledger.counters().inc(Counter::IpDropMalformed);
            return self.free(s, Layer::Ip, Side::Receive, buf);
        }
        if !self.tuning.defrag_check_only_fragments {
            // Paper 001 §7.6: Ultrix searched the defrag queue for every datagram.
            let _p = self
                .ledger
                .probe(s, Layer::Ip, Side::Receive, Op::DefragQueue);
            self.ledger.counters().inc(Counter::IpDefragLookups);
            let key = FragKey {
                src: ip.src,
                dst: ip.dst,
                protocol: PROTOCOL_UDP,
                ident: ip.ident,
            };
            std::hint::black_box(self.reassembler.contains(&key));
        }
        self.ledger.counters().inc(Counter::IpDelivered);
        let udp = UdpInputIp {
            src: ip.src,
            dst: ip.dst,
            header_len: MIN_HEADER_LEN,
            repr: None,
        };
        self.udp_input_from(s, udp, buf, rx, now);
    }
}

#[cfg(test)]
mod tests {
    //! The short path against the general one: two stacks alike but for the switch get the
    //! same frames (valid, and each kind of malformed or not-for-the-short-path datagram,
    //! then thousands of random mutants), and must end every step with the same
    //! deliveries, counters, pool and PCB statistics, and device counters.

    use super::*;
    use crate::driver::{MemoryLink, MemoryNic, NicConfig, RxFrame};
    use crate::ip::route::Ipv4Cidr;
    use crate::ip::LOOPBACK;
    use crate::rng::Rng;
    use crate::sim::{ipv4_frame, ipv4_header, ADDR_A, ADDR_B, MAC_A, MAC_B};
    use crate::socket::udp::{UdpError, UdpHandle, UdpRecv};
    use crate::stack::{InterfaceConfig, StackConfig};
    use crate::tuning::Tuning;
    use crate::wire::ethernet::{self, EthernetAddress};
    use crate::wire::ipv4::{IpProtocol, Ipv4Options, Ipv4Repr};
    use crate::wire::udp::{self as udp_wire, UdpRepr};
    use crate::wire::Checksum;

    /// The second interface's address: a datagram to it arriving on the first is ours
    /// (the weak end-system model) but not the short path's.
    const ADDR_OTHER: Ipv4Address = Ipv4Address::new(198, 19, 0, 2);
    const MAC_OTHER: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 3]);
    const SUBNET_BROADCAST: Ipv4Address = Ipv4Address::new(198, 18, 0, 255);
    const NOT_US: Ipv4Address = Ipv4Address::new(198, 18, 0, 3);
    /// Bound on every address; a small receive buffer on the second socket.
    const PORT: u16 = 9;
    const PORT_SMALL: u16 = 7;
    const NO_SOCKET: u16 = 10;

    struct Host {
        stack: Stack,
        sockets: [UdpHandle; 2],
        /// The far ends of the memory links, kept open.
        _peers: [MemoryNic; 2],
    }

    fn host(preset: Tuning, short_path: bool) -> Host {
        let mut stack = Stack::new(StackConfig {
            tuning: Tuning {
                udp_rx_short_path: short_path,
                ..preset
            },
            ..StackConfig::default()
        });
        let mut peers = Vec::new();
        for (mac, address) in [(MAC_B, ADDR_B), (MAC_OTHER, ADDR_OTHER)] {
            let (peer, nic) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
            let cidr = Ipv4Cidr {
                address,
                prefix_len: 24,
            };
            stack.add_interface(Box::new(nic), InterfaceConfig { mac, cidr });
            peers.push(peer);
        }
        stack.add_static_arp(0, ADDR_A, MAC_A);
        let any = stack.udp_open();
        stack.udp_bind(any, Ipv4Address::UNSPECIFIED, PORT).unwrap();
        let small = stack.udp_open();
        stack.udp_bind(small, ADDR_B, PORT_SMALL).unwrap();
        stack.udp_set_recv_buffer(small, 150).unwrap();
        Host {
            stack,
            sockets: [any, small],
            _peers: peers.try_into().unwrap_or_else(|_| unreachable!()),
        }
    }

    /// A frame from A carrying a UDP datagram, checksums right.
    fn udp_frame(dst: Ipv4Address, port: u16, payload: &[u8], options: &[u8]) -> Vec<u8> {
        let udp = UdpRepr {
            src_port: 40000,
            dst_port: port,
        };
        let ip = Ipv4Repr {
            ident: 0x4242,
            options: Ipv4Options::new(options).unwrap(),
            ..ipv4_header(ADDR_A, dst, IpProtocol::Udp, udp.buffer_len(payload.len()))
        };
        ipv4_frame(MAC_A, MAC_B, &ip, |b| {
            udp.emit(
                &mut udp_wire::Packet::new_unchecked(b),
                ADDR_A,
                dst,
                payload,
                Checksum::Check,
            )
            .unwrap()
        })
    }

    /// The IP datagram of a frame.
    fn ip_of(frame: &mut [u8]) -> &mut [u8] {
        &mut frame[ethernet::HEADER_LEN..]
    }

    /// `frame` after `edit`, with the IP header checksum and, where the lengths allow,
    /// the UDP checksum made right again.
    fn edited(mut frame: Vec<u8>, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
        edit(ip_of(&mut frame));
        crate::fuzz::fix_checksums(&mut frame);
        frame
    }

    /// `frame` after `edit`, checksums left as they are.
    fn edited_raw(mut frame: Vec<u8>, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
        edit(ip_of(&mut frame));
        frame
    }

    /// How a frame is handed to the stack.
    #[derive(Clone, Copy, Debug)]
    enum Via {
        /// From interface 0's device, with this much checksum work done.
        Device(Mode),
        /// Through the loopback queue's entry into IP (no Ethernet header).
        Loopback,
    }

    #[derive(Clone, Copy, Debug)]
    enum Mode {
        None,
        Verified,
        /// The raw sum of the transport bytes, as the frame's total length bounds them.
        RawSum,
        /// A raw sum one bit off.
        WrongRawSum,
    }

    const MODES: [Mode; 4] = [Mode::None, Mode::Verified, Mode::RawSum, Mode::WrongRawSum];

    /// The raw sum a NIC would report: over the IP payload as the header bounds it.
    fn raw_sum(frame: &[u8]) -> u16 {
        let ip = frame.get(ethernet::HEADER_LEN..).unwrap_or(&[]);
        let ihl = ip.first().map_or(0, |b| usize::from(b & 0x0F) * 4);
        let total = ip
            .get(2..4)
            .map_or(0, |t| usize::from(u16::from_be_bytes([t[0], t[1]])));
        let l4 = ip.get(ihl.min(ip.len())..total.clamp(ihl.min(ip.len()), ip.len()));
        crate::checksum::sum(l4.unwrap_or(&[]))
    }

    /// Everything the two stacks must agree on after a step.
    #[derive(Debug, PartialEq, Eq)]
    struct Outcome {
        deliveries: Vec<(usize, Result<UdpRecv, UdpError>, Vec<u8>)>,
        counters: Vec<(&'static str, u64)>,
        pool: crate::buf::PoolStats,
        pcbs: crate::udp::pcb::PcbStats,
        held: usize,
        devices: Vec<Vec<(&'static str, u64)>>,
    }

    fn feed(h: &mut Host, frames: &[(Vec<u8>, Via)], now: Instant) -> Outcome {
        for (frame, via) in frames {
            match *via {
                Via::Device(mode) => {
                    let checksum = match mode {
                        Mode::None => RxChecksum::None,
                        Mode::Verified => RxChecksum::Verified,
                        Mode::RawSum => RxChecksum::RawSum(raw_sum(frame)),
                        Mode::WrongRawSum => RxChecksum::RawSum(raw_sum(frame) ^ 0x0010),
                    };
                    let frame = PacketBuf::from_slice(frame, 0).unwrap();
                    let rx = RxFrame { frame, checksum };
                    h.stack.link_input(crate::probe::TESTED, 0, rx, now);
                }
                Via::Loopback => {
                    let ip = &frame[ethernet::HEADER_LEN..];
                    let buf = PacketBuf::from_slice(ip, 0).unwrap();
                    h.stack
                        .ip_input(crate::probe::TESTED, LOOPBACK, buf, RxChecksum::None, now);
                }
            }
        }
        let mut deliveries = Vec::new();
        for (i, &s) in h.sockets.iter().enumerate() {
            let mut buf = [0u8; 2048];
            loop {
                let r = h.stack.udp_recv_from(s, &mut buf);
                let bytes = r.as_ref().map_or(Vec::new(), |r| buf[..r.len].to_vec());
                let done = r.is_err();
                deliveries.push((i, r, bytes));
                if done {
                    break;
                }
            }
        }
        let st = &h.stack;
        Outcome {
            deliveries,
            counters: st.ledger().counters().snapshot(),
            pool: st.pool().stats(),
            pcbs: st.udp_pcb_stats(),
            held: st.reassembler().datagrams_held(),
            devices: (0..2).map(|i| st.interface_counters(i)).collect(),
        }
    }

    /// Whether the short path would take the datagram of `frame` arriving on interface 0.
    fn eligible(h: &Host, frame: &[u8]) -> bool {
        let buf = PacketBuf::from_slice(&frame[ethernet::HEADER_LEN..], 0).unwrap();
        h.stack.udp_short_eligible(0, &buf).is_some()
    }

    /// The frames of the fixed cases, each named for the assertion messages.
    fn cases() -> Vec<(&'static str, Vec<u8>)> {
        let payload: Vec<u8> = (0..64u8).collect();
        let valid = udp_frame(ADDR_B, PORT, &payload, &[]);
        let set_total = |ip: &mut [u8], total: u16| ip[2..4].copy_from_slice(&total.to_be_bytes());
        let set_udp_len = |ip: &mut [u8], len: u16| ip[24..26].copy_from_slice(&len.to_be_bytes());
        let mut padded = valid.clone();
        padded.extend_from_slice(&[0xEE; 10]);
        let half = udp_frame(ADDR_B, PORT, &[7u8; 120], &[]);
        // Two fragments of one datagram: 64 bytes, then the rest.
        let first = edited(half.clone(), |ip| {
            set_total(ip, 20 + 64);
            ip[6] = 0x20;
        });
        let first = first[..ethernet::HEADER_LEN + 20 + 64].to_vec();
        let second = {
            let mut f = half[..ethernet::HEADER_LEN + 20].to_vec();
            f.extend_from_slice(&half[ethernet::HEADER_LEN + 20 + 64..]);
            edited(f, |ip| {
                set_total(ip, 20 + 128 - 64);
                ip[6] = 0x00;
                ip[7] = 64 / 8;
            })
        };
        vec![
            ("valid", valid.clone()),
            (
                "no UDP checksum",
                edited_raw(valid.clone(), |ip| ip[26..28].fill(0)),
            ),
            ("Ethernet padding", padded),
            ("empty payload", udp_frame(ADDR_B, PORT, &[], &[])),
            (
                "to the small socket",
                udp_frame(ADDR_B, PORT_SMALL, &payload, &[]),
            ),
            (
                "other interface's address",
                udp_frame(ADDR_OTHER, PORT, &payload, &[]),
            ),
            (
                "limited broadcast",
                udp_frame(Ipv4Address::BROADCAST, PORT, &payload, &[]),
            ),
            (
                "subnet broadcast",
                udp_frame(SUBNET_BROADCAST, PORT, &payload, &[]),
            ),
            ("no socket", udp_frame(ADDR_B, NO_SOCKET, &payload, &[])),
            (
                "no socket, broadcast",
                udp_frame(Ipv4Address::BROADCAST, NO_SOCKET, &payload, &[]),
            ),
            ("not for us", udp_frame(NOT_US, PORT, &payload, &[])),
            ("destination port 0", udp_frame(ADDR_B, 0, &payload, &[])),
            ("options", udp_frame(ADDR_B, PORT, &payload, &[1, 1, 1, 0])),
            (
                "bad option",
                edited(udp_frame(ADDR_B, PORT, &payload, &[1, 1, 1, 0]), |ip| {
                    ip[20..24].copy_from_slice(&[7, 9, 0, 0])
                }),
            ),
            ("first fragment", first),
            ("last fragment", second),
            ("don't fragment", edited(valid.clone(), |ip| ip[6] = 0x40)),
            ("reserved flag", edited(valid.clone(), |ip| ip[6] = 0x80)),
            (
                "bad IP checksum",
                edited_raw(valid.clone(), |ip| ip[10] ^= 0x01),
            ),
            (
                "bad UDP checksum",
                edited_raw(valid.clone(), |ip| ip[40] ^= 0x01),
            ),
            (
                "UDP length past IP",
                edited(valid.clone(), |ip| set_udp_len(ip, 8 + 65)),
            ),
            (
                "UDP length under 8",
                edited(valid.clone(), |ip| set_udp_len(ip, 7)),
            ),
            (
                "UDP length short of IP",
                edited(valid.clone(), |ip| set_udp_len(ip, 8 + 60)),
            ),
            (
                "total length past frame",
                edited(valid.clone(), |ip| set_total(ip, 20 + 8 + 65)),
            ),
            (
                "total length under header",
                edited(valid.clone(), |ip| set_total(ip, 19)),
            ),
            (
                "total length = header",
                edited(valid.clone(), |ip| set_total(ip, 20)),
            ),
            (
                "no room for UDP header",
                edited(valid.clone(), |ip| set_total(ip, 24)),
            ),
            ("version 6", edited(valid.clone(), |ip| ip[0] = 0x65)),
            ("IHL 4", edited(valid.clone(), |ip| ip[0] = 0x44)),
            ("IHL past frame", edited(valid.clone(), |ip| ip[0] = 0x4F)),
            ("another protocol", edited(valid.clone(), |ip| ip[9] = 253)),
            ("ICMP", edited(valid.clone(), |ip| ip[9] = 1)),
            (
                "ten bytes of IP",
                valid[..ethernet::HEADER_LEN + 10].to_vec(),
            ),
            (
                "UDP header cut",
                valid[..ethernet::HEADER_LEN + 24].to_vec(),
            ),
        ]
    }

    fn run(short: &mut Host, general: &mut Host, step: u64, what: &str, frames: &[(Vec<u8>, Via)]) {
        let now = Instant::from_millis(step);
        let a = feed(short, frames, now);
        let b = feed(general, frames, now);
        assert_eq!(a, b, "step {step}: {what}");
    }

    #[test]
    fn the_short_path_matches_the_general_path_frame_for_frame() {
        matches_frame_for_frame(Tuning::fast());
    }

    /// The 1993 switches around it: linear PCB scan, no caches, the whole UDP checksum at
    /// input, the reassembly queue searched for every datagram.
    #[test]
    fn the_short_path_matches_the_general_path_among_the_bsd_switches() {
        matches_frame_for_frame(Tuning::bsd());
    }

    fn matches_frame_for_frame(preset: Tuning) {
        let (mut short, mut general) = (host(preset, true), host(preset, false));
        let mut step = 0;
        let mut taken = Vec::new();
        for (what, frame) in cases() {
            if eligible(&short, &frame) {
                taken.push(what);
            }
            assert!(!eligible(&general, &frame), "{what}: the switch is off");
            let vias = MODES.map(Via::Device).into_iter().chain([Via::Loopback]);
            for via in vias {
                step += 1;
                run(
                    &mut short,
                    &mut general,
                    step,
                    what,
                    &[(frame.clone(), via)],
                );
            }
        }
        // Whatever is UDP to our own address, whole and without options, whatever else is
        // wrong with it (UDP input, shared by both paths, refuses it then).
        let expected = [
            "valid",
            "no UDP checksum",
            "Ethernet padding",
            "empty payload",
            "to the small socket",
            "no socket",
            "destination port 0",
            "don't fragment",
            "reserved flag",
            "bad IP checksum",
            "bad UDP checksum",
            "UDP length past IP",
            "UDP length under 8",
            "UDP length short of IP",
            "total length = header",
            "no room for UDP header",
        ];
        assert_eq!(taken, expected, "the cases the short path takes");

        // More than the small socket holds, in one batch: `udp.drop.full_socket`.
        let burst = udp_frame(ADDR_B, PORT_SMALL, &[3u8; 64], &[]);
        let burst: Vec<_> = (0..4)
            .map(|_| (burst.clone(), Via::Device(Mode::None)))
            .collect();
        step += 1;
        run(&mut short, &mut general, step, "a burst", &burst);

        // Random mutants of valid datagrams: one to three bytes of the IP and UDP headers
        // changed, the checksums made right again for half of them.
        let mut rng = Rng::new(0x5EED);
        let bases = [
            udp_frame(ADDR_B, PORT, &[0x5A; 64], &[]),
            udp_frame(ADDR_B, PORT_SMALL, &[0xA5; 17], &[]),
            udp_frame(ADDR_B, NO_SOCKET, &[1; 8], &[]),
        ];
        let mut mutants_taken = 0;
        for _ in 0..3000 {
            let base = bases[rng.below(bases.len() as u64) as usize].clone();
            let fix = rng.chance(0.5);
            let mut f = base;
            for _ in 0..=rng.below(3) {
                let at = ethernet::HEADER_LEN + rng.below(28) as usize;
                f[at] = rng.next_u32() as u8;
            }
            if rng.chance(0.1) {
                let cut = rng.below(f.len() as u64) as usize;
                f.truncate(cut.max(ethernet::HEADER_LEN));
            }
            if fix {
                crate::fuzz::fix_checksums(&mut f);
            }
            mutants_taken += usize::from(eligible(&short, &f));
            let via = Via::Device(MODES[rng.below(4) as usize]);
            step += 1;
            run(&mut short, &mut general, step, "a mutant", &[(f, via)]);
        }
        assert!(
            mutants_taken > 100,
            "{mutants_taken} mutants took the short path"
        );
        // The stacks did something: datagrams delivered and malformed ones counted.
        let c = short.stack.ledger().counters();
        for counter in [
            Counter::UdpDatagramsIn,
            Counter::UdpDropBadChecksum,
            Counter::UdpDropMalformed,
            Counter::UdpDropNoSocket,
            Counter::UdpDropFullSocket,
            Counter::IpDropBadChecksum,
            Counter::IpDropMalformed,
            Counter::IpDropNotForUs,
            Counter::IpFragmentsIn,
            Counter::IpReassembled,
        ] {
            assert!(c.get(counter) > 0, "{counter:?} never counted");
        }
    }
}
