//! UDP sockets between two stacks on the memory link: every size up to 65,507 bytes across
//! MTUs, both send and both receive paths, corruption caught, the socket API's errors, and
//! delivery to the most specific socket.

mod common;

use common::capture::{assert_same_frames, captured_frames, template_tunings, SharedBytes};
use common::datagrams::{intact, payload, send_how, stack_send, udp_tuning, SendHow};
use common::router::{Hop, Routed};
use common::tamper::refragmenting;
use probestack::buf::PacketBuf;
use probestack::driver::FaultConfig;
use probestack::ip::route::{Ipv4Cidr, NextHop, Route};
use probestack::ip::IpFields;
use probestack::probe::Counter;
use probestack::sim::{ipv4_frame, ipv4_header, HostConfig, Pair, ADDR_A, ADDR_B, MAC_A, MAC_B};
use probestack::socket::udp::{UdpError, UdpHandle, MAX_UDP_PAYLOAD};
use probestack::time::Duration;
use probestack::tuning::Tuning;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::ipv4::IpProtocol;
use probestack::wire::udp::{self as udp_wire, UdpRepr};
use probestack::wire::Ipv4Address;

fn pair_with(mtu: usize, ta: Tuning, tb: Tuning) -> Pair {
    let mut a = HostConfig::with_mtu(mtu);
    let mut b = HostConfig::with_mtu(mtu);
    a.stack.tuning = ta;
    b.stack.tuning = tb;
    Pair::new(a, b).unwrap()
}

fn recv_one(p: &mut Pair, h: UdpHandle) -> Option<(Vec<u8>, (Ipv4Address, u16))> {
    let mut buf = vec![0u8; 70_000];
    let mut got = None;
    p.run_until(Duration::from_secs(2), |p| {
        match p.b.udp_recv_from(h, &mut buf) {
            Ok(r) => {
                got = Some((buf[..r.len].to_vec(), r.from));
                true
            }
            Err(UdpError::WouldBlock) => false,
            Err(e) => panic!("recv: {e}"),
        }
    });
    got
}

#[test]
fn every_size_every_mtu_every_path() {
    let sizes = [
        0,
        1,
        59,
        64,
        509,
        512,
        1472,
        1473,
        8000,
        30000,
        MAX_UDP_PAYLOAD,
    ];
    // The fused paths with the checksum on, the generic paths, each against the other,
    // and the fast preset (which elides the checksum on this one-hop CRC link).
    let fused = fast_without_elision();
    let tunings = [
        (fused, fused),
        (Tuning::bsd(), Tuning::bsd()),
        (fused, Tuning::bsd()),
        (Tuning::bsd(), fused),
        (Tuning::fast(), Tuning::fast()),
    ];
    for mtu in [576, 1500, 9000, 65535] {
        for (ta, tb) in tunings {
            let mut p = pair_with(mtu, ta, tb);
            let rx = p.b.udp_open();
            p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
            let tx = p.a.udp_open();
            for (i, &size) in sizes.iter().enumerate() {
                let data = payload(i as u32, size);
                assert_eq!(p.a.udp_send_to(tx, &data, ADDR_B, 9).unwrap(), size);
                let (got, from) =
                    recv_one(&mut p, rx).unwrap_or_else(|| panic!("mtu {mtu} size {size} lost"));
                assert_eq!(got, data, "mtu {mtu} size {size}");
                assert_eq!(from, (ADDR_A, p.a.udp_local_addr(tx).unwrap().1));
            }
        }
    }
}

/// Datagrams of every size, fragmented by IP or not, arrive whole whatever layout of
/// fragments the device hands their frames in (`common::tamper::Refragment`: headers cut
/// anywhere, the payload in up to four pieces), on both receive paths, on a frame queue
/// and through the memory NICs (with and without their offloads), with nothing dropped as
/// malformed.
#[test]
fn any_layout_of_fragments_is_read() {
    let sizes = [0, 1, 64, 512, 1472, 1473, 8000, 30000, MAX_UDP_PAYLOAD];
    for (queue, offloads, mtu, t) in [
        (true, false, 1500, Tuning::bsd()),
        (true, false, 1500, fast_without_elision()),
        (true, false, 9000, Tuning::fast()),
        (false, false, 1500, Tuning::fast()),
        (false, true, 9000, fast_without_elision()),
    ] {
        let mut a = HostConfig::with_mtu(mtu);
        let mut b = HostConfig::with_mtu(mtu);
        for h in [&mut a, &mut b] {
            h.stack.tuning = t;
            if offloads {
                h.nic = h.nic.with_offloads();
            }
        }
        let mut p = if queue {
            Pair::on_frame_queue_with(a, b, refragmenting(3), refragmenting(5)).unwrap()
        } else {
            Pair::with_devices(a, b, refragmenting(3), refragmenting(5)).unwrap()
        };
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let tx = p.a.udp_open();
        for round in 0..4 {
            for (i, &size) in sizes.iter().enumerate() {
                let data = payload((round * sizes.len() + i) as u32, size);
                assert_eq!(p.a.udp_send_to(tx, &data, ADDR_B, 9).unwrap(), size);
                let (got, _) =
                    recv_one(&mut p, rx).unwrap_or_else(|| panic!("mtu {mtu} size {size} lost"));
                assert_eq!(got, data, "mtu {mtu} size {size}");
            }
        }
        let c = p.b.ledger().counters();
        for k in [
            Counter::LinkDropMalformed,
            Counter::ArpDropMalformed,
            Counter::IpDropMalformed,
            Counter::UdpDropMalformed,
            Counter::UdpDropBadChecksum,
        ] {
            assert_eq!(c.get(k), 0, "{k:?} at MTU {mtu}");
        }
        if queue {
            assert!(c.get(Counter::StackRxLinearized) > 20, "MTU {mtu}");
        }
    }
}

#[test]
fn scatter_gather_connect_and_truncation() {
    let mut p = pair_with(1500, Tuning::fast(), Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, ADDR_B, 7000).unwrap();
    let tx = p.a.udp_open();
    p.a.udp_connect(tx, ADDR_B, 7000).unwrap();
    // sendmsg: one datagram from three pieces of odd lengths.
    let parts: [&[u8]; 3] = [b"abc", b"defgh", b"ij"];
    assert_eq!(p.a.udp_send_msg(tx, &parts, None).unwrap(), 10);
    assert_eq!(recv_one(&mut p, rx).unwrap().0, b"abcdefghij");
    // A short buffer truncates and says so.
    p.a.udp_send(tx, &payload(1, 1000)).unwrap();
    p.run_for(Duration::from_millis(1));
    let mut small = [0u8; 100];
    let r = p.b.udp_recv_from(rx, &mut small).unwrap();
    assert!(r.truncated && r.len == 100 && r.datagram_len == 1000);
    assert_eq!(&small[..], &payload(1, 1000)[..100]);
    assert_eq!(p.b.udp_recv_from(rx, &mut small), Err(UdpError::WouldBlock));
}

#[test]
fn socket_errors_are_values() {
    let mut p = pair_with(1500, Tuning::fast(), Tuning::fast());
    let a = p.b.udp_open();
    let b = p.b.udp_open();
    p.b.udp_bind(a, ADDR_B, 53).unwrap();
    assert_eq!(p.b.udp_bind(b, ADDR_B, 53), Err(UdpError::AddrInUse));
    assert_eq!(p.b.udp_bind(a, ADDR_B, 54), Err(UdpError::AlreadyBound));
    assert_eq!(
        p.b.udp_bind(b, Ipv4Address::new(198, 18, 9, 9), 53),
        Err(UdpError::AddrNotAvailable)
    );
    assert_eq!(p.b.udp_send(a, b"x"), Err(UdpError::NotConnected));
    assert_eq!(
        p.b.udp_send_to(a, &vec![0; MAX_UDP_PAYLOAD + 1], ADDR_A, 1),
        Err(UdpError::MessageTooBig {
            max: MAX_UDP_PAYLOAD
        })
    );
    p.b.udp_close(a).unwrap();
    assert_eq!(
        p.b.udp_send_to(a, b"x", ADDR_A, 1),
        Err(UdpError::BadHandle)
    );
    // Ephemeral ports come from 49152-65535 and differ.
    let (x, y) = (p.a.udp_open(), p.a.udp_open());
    p.a.udp_bind(x, Ipv4Address::UNSPECIFIED, 0).unwrap();
    p.a.udp_bind(y, Ipv4Address::UNSPECIFIED, 0).unwrap();
    let (px, py) = (
        p.a.udp_local_addr(x).unwrap().1,
        p.a.udp_local_addr(y).unwrap().1,
    );
    assert!(px >= 49152 && py >= 49152 && px != py);
}

#[test]
fn a_closed_port_refuses_a_connected_socket() {
    for t in [Tuning::fast(), Tuning::bsd()] {
        let mut p = pair_with(1500, t, t);
        let tx = p.a.udp_open();
        p.a.udp_connect(tx, ADDR_B, 4444).unwrap();
        p.a.udp_send(tx, b"anyone?").unwrap();
        p.run_for(Duration::from_millis(5));
        assert_eq!(p.b.ledger().counters().get(Counter::UdpDropNoSocket), 1);
        assert_eq!(p.a.udp_send(tx, b"again"), Err(UdpError::ConnectionRefused));
        // The error is reported once.
        assert!(p.a.udp_send(tx, b"again").is_ok());
    }
}

#[test]
fn the_most_specific_socket_gets_the_datagram() {
    for t in [Tuning::fast(), Tuning::bsd()] {
        let mut p = pair_with(1500, t, t);
        let wildcard = p.b.udp_open();
        p.b.udp_bind(wildcard, Ipv4Address::UNSPECIFIED, 5000)
            .unwrap();
        let connected = p.b.udp_open();
        p.b.udp_bind(connected, ADDR_B, 5000).unwrap();
        p.b.udp_connect(connected, ADDR_A, 6000).unwrap();
        let from_6000 = p.a.udp_open();
        p.a.udp_bind(from_6000, Ipv4Address::UNSPECIFIED, 6000)
            .unwrap();
        let from_6001 = p.a.udp_open();
        p.a.udp_bind(from_6001, Ipv4Address::UNSPECIFIED, 6001)
            .unwrap();
        for round in 0..3 {
            // Alternate, so a one-behind cache holding the wildcard socket is tested.
            p.a.udp_send_to(from_6001, b"to the wildcard", ADDR_B, 5000)
                .unwrap();
            p.a.udp_send_to(from_6000, b"to the connected", ADDR_B, 5000)
                .unwrap();
            p.run_for(Duration::from_millis(2));
            let mut buf = [0u8; 64];
            let r = p.b.udp_recv_from(connected, &mut buf).unwrap();
            assert_eq!(&buf[..r.len], b"to the connected", "round {round}");
            let r = p.b.udp_recv_from(wildcard, &mut buf).unwrap();
            assert_eq!(&buf[..r.len], b"to the wildcard", "round {round}");
            assert_eq!(p.b.udp_queued(wildcard) + p.b.udp_queued(connected), 0);
        }
    }
}

#[test]
fn a_full_receive_buffer_drops_and_counts() {
    let mut p = pair_with(1500, Tuning::fast(), Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    p.b.udp_set_recv_buffer(rx, 1000).unwrap();
    let tx = p.a.udp_open();
    for i in 0..5 {
        p.a.udp_send_to(tx, &payload(i, 400), ADDR_B, 9).unwrap();
    }
    p.run_for(Duration::from_millis(5));
    assert_eq!(p.b.udp_queued(rx), 2);
    assert_eq!(p.b.ledger().counters().get(Counter::UdpDropFullSocket), 3);
}

/// Bit flips with the CRC recomputed (corruption inside a router) get past the link; the
/// UDP checksum must catch every one, on both receive paths.
fn fast_without_elision() -> Tuning {
    Tuning {
        checksum_elision: false,
        ..Tuning::fast()
    }
}

/// Sends 2000 datagrams over a link that corrupts 5% of frames past the CRC; returns
/// (intact, corrupted) datagrams delivered and the corruptions caught.
fn through_a_corrupting_link(t: Tuning) -> (u32, u32, u64) {
    let mut a = HostConfig::with_mtu(1500);
    let mut b = HostConfig::with_mtu(1500);
    a.stack.tuning = t;
    b.stack.tuning = t;
    b.nic.rx_faults = FaultConfig {
        flip_passed: 0.05,
        ..FaultConfig::seeded(11)
    };
    let mut p = Pair::new(a, b).unwrap();
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    p.b.udp_set_recv_buffer(rx, 64 << 20).unwrap();
    let tx = p.a.udp_open();
    for i in 0..2000 {
        p.a.udp_send_to(tx, &payload(i, 600), ADDR_B, 9).unwrap();
        p.run_for(Duration::from_micros(20));
    }
    p.run_for(Duration::from_millis(10));
    let mut buf = [0u8; 2000];
    let (mut good, mut bad) = (0, 0);
    while let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
        if intact(&buf[..r.len]) && r.len == 600 {
            good += 1;
        } else {
            bad += 1;
        }
    }
    let c = p.b.ledger().counters();
    let caught = c.get(Counter::UdpDropBadChecksum)
        + c.get(Counter::IpDropBadChecksum)
        + c.get(Counter::UdpDropMalformed)
        + c.get(Counter::IpDropMalformed);
    (good, bad, caught)
}

/// With elision on, the same link lets corruption through: the risk papers 000 and 003
/// weigh, shown rather than assumed.
#[test]
fn with_checksum_elision_corruption_gets_through() {
    let (good, bad, _) = through_a_corrupting_link(Tuning::fast());
    assert!(bad > 20, "only {bad} corrupted datagrams delivered");
    assert!(good + bad > 1800);
}

#[test]
fn checksum_elision_only_on_a_one_hop_crc_route() {
    let mut p = pair_with(1500, Tuning::fast(), Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = p.a.udp_open();
    p.a.udp_send_to(tx, b"one hop", ADDR_B, 9).unwrap();
    assert!(recv_one(&mut p, rx).is_some());
    let no_sum = |p: &Pair| p.b.ledger().counters().get(Counter::UdpNoChecksumIn);
    assert_eq!(no_sum(&p), 1, "elided on the direct route");
    // The same destination through a gateway: the checksum is back.
    p.a.routes_mut().add(Route {
        destination: Ipv4Cidr {
            address: ADDR_B,
            prefix_len: 32,
        },
        next_hop: NextHop::Gateway(ADDR_B),
        interface: 0,
    });
    p.a.udp_send_to(tx, b"via a gateway", ADDR_B, 9).unwrap();
    assert!(recv_one(&mut p, rx).is_some());
    assert_eq!(no_sum(&p), 1, "a gateway route keeps the checksum");
    // And with the switch off, never elided.
    let mut q = pair_with(1500, fast_without_elision(), fast_without_elision());
    let rx = q.b.udp_open();
    q.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = q.a.udp_open();
    q.a.udp_send_to(tx, b"one hop", ADDR_B, 9).unwrap();
    assert!(recv_one(&mut q, rx).is_some());
    assert_eq!(no_sum(&q), 0);
}

#[test]
fn corrupted_datagrams_are_caught_on_both_receive_paths() {
    for t in [fast_without_elision(), Tuning::bsd()] {
        let (good, bad, caught) = through_a_corrupting_link(t);
        assert_eq!(bad, 0, "corrupted datagrams delivered ({t:?})");
        assert!(caught > 50, "only {caught} corruptions caught");
        assert!(good > 1800, "only {good} delivered");
    }
}

#[test]
fn the_no_checksum_option_sends_zero_and_is_accepted() {
    let mut p = pair_with(1500, fast_without_elision(), fast_without_elision());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = p.a.udp_open();
    p.a.udp_set_no_checksum(tx, true).unwrap();
    p.a.udp_send_to(tx, &payload(3, 300), ADDR_B, 9).unwrap();
    assert_eq!(recv_one(&mut p, rx).unwrap().0, payload(3, 300));
    assert_eq!(p.b.ledger().counters().get(Counter::UdpNoChecksumIn), 1);
}

/// Every buffer a stack takes from its pool goes back, or leaves with a frame: after a
/// thousand datagrams each way, neither pool counts anything outstanding.
#[test]
fn no_buffer_is_leaked() {
    for t in [Tuning::fast(), Tuning::bsd()] {
        let mut p = pair_with(1500, t, t);
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let tx = p.a.udp_open();
        let mut buf = [0u8; 4000];
        for i in 0..1000 {
            p.a.udp_send_to(tx, &payload(i, 100 + (i as usize * 37) % 3000), ADDR_B, 9)
                .unwrap();
            p.run_for(Duration::from_micros(10));
            while let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
                p.b.udp_send_to(rx, &buf[..r.len], r.from.0, r.from.1)
                    .unwrap();
            }
            while p.a.udp_recv_from(tx, &mut buf).is_ok() {}
        }
        p.run_for(Duration::from_millis(10));
        while p.a.udp_recv_from(tx, &mut buf).is_ok() {}
        for (name, s) in [("A", &p.a), ("B", &p.b)] {
            let st = s.pool().stats();
            assert_eq!(st.bytes_outstanding, 0, "{name} {t:?}: {st:?}");
        }
    }
}

#[test]
fn blocking_receive_on_another_thread() {
    use probestack::driver::{MemoryLink, NicConfig};
    use probestack::ip::route::Ipv4Cidr;
    use probestack::sim::{MAC_A, MAC_B};
    use probestack::stack::{InterfaceConfig, Stack, StackConfig};
    use probestack::time::{Clock, RealClock};
    let (nic_a, nic_b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let cidr = |address| Ipv4Cidr {
        address,
        prefix_len: 15,
    };
    let b = std::thread::spawn(move || {
        let mut b = Stack::new(StackConfig::default());
        b.add_interface(
            Box::new(nic_b),
            InterfaceConfig {
                mac: MAC_B,
                cidr: cidr(ADDR_B),
            },
        );
        let rx = b.udp_open();
        b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let clock = RealClock::new();
        let mut buf = [0u8; 64];
        // Nothing comes within 20 ms: a timeout, not a hang.
        let early = b.udp_recv_from_blocking(rx, &mut buf, &clock, Duration::from_millis(20));
        assert_eq!(early, Err(UdpError::TimedOut));
        // Then A sends; a blocking receive waits for it (generous timeout).
        let r = b
            .udp_recv_from_blocking(rx, &mut buf, &clock, Duration::from_secs(20))
            .unwrap();
        buf[..r.len].to_vec()
    });
    let mut a = Stack::new(StackConfig::default());
    a.add_interface(
        Box::new(nic_a),
        InterfaceConfig {
            mac: MAC_A,
            cidr: cidr(ADDR_A),
        },
    );
    let tx = a.udp_open();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let clock = RealClock::new();
    a.udp_send_to(tx, b"wake up", ADDR_B, 9).unwrap();
    // A keeps polling (ARP) until B's thread is done.
    while !b.is_finished() {
        a.poll(clock.now());
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    assert_eq!(b.join().unwrap(), b"wake up");
}

#[test]
fn recvmsg_scatters_over_buffers_on_both_paths() {
    for t in [fast_without_elision(), Tuning::bsd()] {
        let mut p = pair_with(1500, t, t);
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let tx = p.a.udp_open();
        let data = payload(9, 1001);
        for _ in 0..2 {
            p.a.udp_send_to(tx, &data, ADDR_B, 9).unwrap();
        }
        p.run_for(Duration::from_millis(2));
        // Odd-sized pieces, so the copy-and-verify crosses odd offsets.
        let (mut x, mut y, mut z) = ([0u8; 3], [0u8; 500], [0u8; 2000]);
        let r = p.b.udp_recv_msg(rx, &mut [&mut x, &mut y, &mut z]).unwrap();
        assert_eq!((r.len, r.truncated), (1001, false));
        let joined: Vec<u8> = x.iter().chain(&y).chain(&z[..498]).copied().collect();
        assert_eq!(joined, data);
        // Too small in total: truncated, and still verified as a whole.
        let (mut x, mut y) = ([0u8; 7], [0u8; 10]);
        let r = p.b.udp_recv_msg(rx, &mut [&mut x, &mut y]).unwrap();
        assert_eq!((r.len, r.truncated), (17, true));
        assert_eq!(p.b.ledger().counters().get(Counter::UdpDropBadChecksum), 0);
        assert_eq!(p.b.udp_recv(rx, &mut x), Err(UdpError::WouldBlock));
    }
}

// ---------------------------------------------------------------------------------------
// The header template (`Tuning::udp_header_template`).

/// Two stacks with `t`, A's transmitted frames captured.
fn captured_pair(t: Tuning) -> (Pair, SharedBytes) {
    let mut host = HostConfig::with_mtu(1500);
    host.stack.tuning = t;
    common::capture::captured_pair(host)
}

/// Sends datagrams of many sizes (some fragmented, which the template leaves to the
/// layers) from A to B, to two destinations in turn; returns A's frames and B's datagrams.
fn template_run(t: Tuning) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64) {
    let (mut p, out) = captured_pair(t);
    let rx = [9, 10].map(|port| {
        let h = p.b.udp_open();
        p.b.udp_bind(h, Ipv4Address::UNSPECIFIED, port).unwrap();
        p.b.udp_set_recv_buffer(h, 8 << 20).unwrap();
        h
    });
    let tx = p.a.udp_open();
    let mut seq = 0;
    for len in [0, 1, 2, 3, 17, 64, 511, 512, 1471, 1472, 1473, 4000] {
        for port in [9, 10, 10, 9] {
            seq += 1;
            p.a.udp_send_to(tx, &payload(seq, len), ADDR_B, port)
                .unwrap();
            p.run_for(Duration::from_micros(50));
        }
    }
    // The socket's TTL and DSCP change the headers, and so does its no-checksum option.
    let fields = IpFields {
        ttl: Some(3),
        dscp: 46,
    };
    p.a.udp_set_ip_fields(tx, fields).unwrap();
    for (i, len) in [100, 4000, 100].into_iter().enumerate() {
        p.a.udp_send_to(tx, &payload(900 + i as u32, len), ADDR_B, 10)
            .unwrap();
        p.run_for(Duration::from_micros(50));
    }
    p.a.udp_set_ip_fields(tx, IpFields::default()).unwrap();
    p.a.udp_set_no_checksum(tx, true).unwrap();
    for i in 0..3 {
        p.a.udp_send_to(tx, &payload(1000 + i, 100), ADDR_B, 9)
            .unwrap();
    }
    p.run_for(Duration::from_millis(5));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 70_000];
    for h in rx {
        while let Ok(r) = p.b.udp_recv_from(h, &mut buf) {
            got.push(buf[..r.len].to_vec());
        }
    }
    let sent = p.a.ledger().counters().get(Counter::UdpTemplateSent);
    (captured_frames(&out), got, sent)
}

/// The template's frames are the layers' frames, byte for byte, with and without UDP
/// checksums (elision on and off) and with either IP header checksum routine, and B gets
/// the same datagrams.
#[test]
fn the_header_template_sends_the_frames_the_layers_send() {
    for with in template_tunings() {
        let without = Tuning {
            udp_header_template: false,
            ..with
        };
        let (frames_t, got_t, sent_t) = template_run(with);
        let (frames_l, got_l, sent_l) = template_run(without);
        assert_eq!(sent_l, 0);
        // All but the fragmented sizes and the first datagram (ARP) take the template.
        assert!(sent_t >= 35, "only {sent_t} datagrams took the template");
        let what = format!(
            "elision {}, inline {}",
            with.checksum_elision, with.inline_ip_header_checksum
        );
        assert_same_frames(&frames_t, &frames_l, &what);
        assert_eq!(got_t, got_l);
        assert_eq!(got_t.len(), 54);
        assert!(got_t.iter().all(|d| intact(d)));
    }
}

/// The IP header's TTL (byte 8) and DSCP (the six high bits of byte 1) in an Ethernet
/// frame.
fn ttl_and_dscp(frame: &[u8]) -> (u8, u8) {
    (frame[14 + 8], frame[14 + 1] >> 2)
}

/// A socket's TTL and DSCP (RFC 1122 §4.1.4) go into every datagram it sends from then on,
/// fragments included, whole ones through the header template or the layers; the stack's
/// TTL and DSCP 0 before and after; values a header cannot carry are refused.
#[test]
fn a_sockets_ttl_and_dscp_go_into_its_datagrams() {
    for template in [true, false] {
        let (mut p, out) = captured_pair(Tuning {
            udp_header_template: template,
            ..Tuning::fast()
        });
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
        let tx = p.a.udp_open();
        let send = |p: &mut Pair, len| {
            p.a.udp_send_to(tx, &payload(1, len), ADDR_B, 9).unwrap();
            assert!(recv_one(p, rx).is_some_and(|(d, _)| d.len() == len));
            captured_frames(&out).len()
        };
        let before = send(&mut p, 100);
        let fields = IpFields {
            ttl: Some(5),
            dscp: 34,
        };
        p.a.udp_set_ip_fields(tx, fields).unwrap();
        let whole = send(&mut p, 100);
        let fragmented = send(&mut p, 4000);
        p.a.udp_set_ip_fields(tx, IpFields::default()).unwrap();
        let after = send(&mut p, 100);
        let frames = captured_frames(&out);
        let ip = |range: std::ops::Range<usize>| {
            frames[range]
                .iter()
                .filter(|f| f[12..14] == [0x08, 0x00])
                .map(|f| ttl_and_dscp(f))
                .collect::<Vec<_>>()
        };
        assert_eq!(ip(0..before).last(), Some(&(64, 0)));
        assert_eq!(ip(before..whole), [(5, 34)], "template {template}");
        assert_eq!(ip(whole..fragmented), [(5, 34); 3], "template {template}");
        assert_eq!(ip(fragmented..after), [(64, 0)]);
    }
    let mut p = pair_with(1500, Tuning::fast(), Tuning::fast());
    let tx = p.a.udp_open();
    for bad in [
        IpFields {
            ttl: Some(0),
            dscp: 0,
        },
        IpFields {
            ttl: None,
            dscp: 64,
        },
    ] {
        assert_eq!(
            p.a.udp_set_ip_fields(tx, bad),
            Err(UdpError::InvalidArgument)
        );
    }
}

/// A template goes stale when the next hop's MAC changes, when the route changes, and
/// when the route goes: the next datagram follows the new facts.
#[test]
fn a_stale_header_template_is_rebuilt_or_refused() {
    let (mut p, out) = captured_pair(Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = p.a.udp_open();
    p.a.udp_send_to(tx, b"first", ADDR_B, 9).unwrap();
    assert!(recv_one(&mut p, rx).is_some());
    p.a.udp_send_to(tx, b"templated", ADDR_B, 9).unwrap();
    assert!(recv_one(&mut p, rx).is_some());
    let c = |p: &Pair, k| p.a.ledger().counters().get(k);
    assert_eq!(c(&p, Counter::UdpTemplateSent), 1);
    // B's MAC, as A knows it, changes: the next frame goes to the new MAC.
    let moved = probestack::wire::ethernet::EthernetAddress([2, 0, 0, 0, 0, 0x42]);
    p.a.add_static_arp(0, ADDR_B, moved);
    p.a.udp_send_to(tx, b"to the new MAC", ADDR_B, 9).unwrap();
    p.run_for(Duration::from_micros(50));
    let last = captured_frames(&out).pop().unwrap();
    assert_eq!(&last[..6], &moved.0, "the stale MAC was used");
    assert_eq!(c(&p, Counter::UdpTemplateBuilt), 2);
    // No route to B any more: the send fails as it does through the layers.
    let subnet: Ipv4Cidr = "198.18.0.0/15".parse().unwrap();
    assert!(p.a.routes_mut().remove(subnet));
    assert_eq!(
        p.a.udp_send_to(tx, b"nowhere", ADDR_B, 9),
        Err(UdpError::NoRoute)
    );
}

/// Behind A's NIC, a spoofer: each datagram A sends is answered with one to port 7 from
/// the next (source, destination, destination MAC) on its list (no UDP checksum), as if
/// from the wire.
struct Spoofer(Vec<(Ipv4Address, Ipv4Address, EthernetAddress)>);

impl Spoofer {
    /// Answers from each of `sources` to A, in order.
    fn from(sources: &[Ipv4Address]) -> Spoofer {
        Spoofer(sources.iter().rev().map(|&s| (s, ADDR_A, MAC_A)).collect())
    }
}

/// A (with `tuning`) with `spoofer` behind its NIC and a socket on port 7, after one
/// datagram to B for each answer the spoofer has, each given a millisecond.
fn answered_by(spoofer: Spoofer, tuning: Tuning) -> (Pair, UdpHandle) {
    let answers = spoofer.0.len();
    let mut host = HostConfig::with_mtu(1500);
    host.stack.tuning = tuning;
    let mut p = Pair::with_devices(
        host.clone(),
        host,
        move |nic| Box::new(Routed::new(nic, spoofer)),
        |nic| Box::new(nic),
    )
    .unwrap();
    let a = p.a.udp_open();
    p.a.udp_bind(a, Ipv4Address::UNSPECIFIED, 7).unwrap();
    for _ in 0..answers {
        p.a.udp_send_to(a, b"draw an answer", ADDR_B, 9).unwrap();
        p.run_for(Duration::from_millis(1));
    }
    (p, a)
}

impl Hop for Spoofer {
    fn forward(&mut self, _frame: &mut PacketBuf) -> (bool, Option<PacketBuf>) {
        let Some((src, dst, mac)) = self.0.pop() else {
            return (true, None);
        };
        let payload = b"spoofed";
        let len = udp_wire::HEADER_LEN + payload.len();
        let ip = ipv4_header(src, dst, IpProtocol::Udp, len);
        let f = ipv4_frame(MAC_B, mac, &ip, |b| {
            let repr = UdpRepr {
                src_port: 9,
                dst_port: 7,
            };
            repr.emit_header(
                &mut udp_wire::Packet::new_unchecked(&mut b[..]),
                payload.len(),
            )
            .unwrap();
            b[udp_wire::HEADER_LEN..].copy_from_slice(payload);
        });
        (true, Some(PacketBuf::from_slice(&f, 0).unwrap()))
    }
}

/// Datagrams from a source no single host has (the limited broadcast, the subnet's
/// broadcast, a multicast or class E address, loopback) are dropped silently and counted
/// (RFC 1122 §3.2.1.3 and §4.1.3.6), on the short receive path and the general one; from
/// a host's address, and from 0.0.0.0 (a host learning its address), they arrive.
#[test]
fn datagrams_from_invalid_sources_are_dropped() {
    for short_path in [true, false] {
        let tuning = Tuning {
            udp_rx_short_path: short_path,
            ..Tuning::fast()
        };
        let bad = [
            Ipv4Address::BROADCAST,
            Ipv4Address::new(198, 19, 255, 255),
            Ipv4Address::new(224, 0, 0, 1),
            Ipv4Address::new(240, 0, 0, 1),
            Ipv4Address::new(127, 0, 0, 1),
        ];
        let good = [Ipv4Address::new(198, 18, 0, 77), Ipv4Address::UNSPECIFIED];
        let sources = [&good[..], &bad[..]].concat();
        let (mut p, a) = answered_by(Spoofer::from(&sources), tuning);
        let mut buf = [0u8; 16];
        let mut from = Vec::new();
        while let Ok(r) = p.a.udp_recv_from(a, &mut buf) {
            from.push(r.from.0);
        }
        assert_eq!(from, good, "short path {short_path}");
        let dropped = p.a.ledger().counters().get(Counter::IpDropBadSource);
        assert_eq!(dropped, bad.len() as u64, "short path {short_path}");
    }
}

/// A datagram that comes in a link-layer broadcast frame but names this host's unicast
/// address is discarded silently and counted (RFC 1122 §3.3.6); in a broadcast frame to
/// the limited or the subnet's broadcast address, or in a frame to this host's MAC, it
/// arrives.
#[test]
fn unicast_datagrams_in_link_broadcast_frames_are_dropped() {
    let subnet_broadcast = Ipv4Address::new(198, 19, 255, 255);
    let source = Ipv4Address::new(198, 18, 0, 77);
    let every = EthernetAddress::BROADCAST;
    let answers = [
        (source, ADDR_A, MAC_A),
        (source, ADDR_A, every),
        (source, Ipv4Address::BROADCAST, every),
        (source, subnet_broadcast, every),
    ];
    // Popped from the end: the first answers first.
    let spoofer = Spoofer(answers.iter().rev().copied().collect());
    let (mut p, a) = answered_by(spoofer, Tuning::fast());
    let mut buf = [0u8; 16];
    let mut to = Vec::new();
    while let Ok(r) = p.a.udp_recv_from(a, &mut buf) {
        to.push(r.to);
    }
    assert_eq!(to, [ADDR_A, Ipv4Address::BROADCAST, subnet_broadcast]);
    let dropped = p.a.ledger().counters().get(Counter::IpDropLinkBroadcast);
    assert_eq!(dropped, 1);
}

// ---------------------------------------------------------------------------------------
// Batched sends (`udp_send_batch`, sendmmsg).

/// The batches of [`batch_run`]: small datagrams, then sizes the link's MTU leaves whole
/// and fragments in one batch, then a full burst.
fn batches() -> Vec<Vec<usize>> {
    vec![
        vec![64; 5],
        vec![0, 1, 1472, 1473, 4000, 64, MAX_UDP_PAYLOAD, 17],
        vec![512; 32],
    ]
}

/// Sends [`batches`] from A to B, each batch with one `udp_send_batch` or (`batched`
/// false) datagram by datagram; `connected` sends to the connected peer rather than with
/// sendto. Returns A's frames, B's datagrams and both stacks' counters.
fn batch_run(t: Tuning, batched: bool, connected: bool) -> BatchRun {
    let (mut p, out) = captured_pair(t);
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    p.b.udp_set_recv_buffer(rx, 8 << 20).unwrap();
    let tx = p.a.udp_open();
    let to = if connected {
        p.a.udp_connect(tx, ADDR_B, 9).unwrap();
        None
    } else {
        Some((ADDR_B, 9))
    };
    let mut seq = 0;
    for sizes in batches() {
        let datagrams: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&len| {
                seq += 1;
                payload(seq, len)
            })
            .collect();
        let parts: Vec<&[u8]> = datagrams.iter().map(|d| &d[..]).collect();
        if batched {
            assert_eq!(p.a.udp_send_batch(tx, &parts, to), Ok(parts.len()));
        } else {
            for d in &parts {
                p.a.udp_send_msg(tx, &[d], to).unwrap();
            }
        }
        p.run_for(Duration::from_millis(2));
    }
    let mut got = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
        got.push(buf[..r.len].to_vec());
    }
    BatchRun {
        frames: captured_frames(&out),
        got,
        counters: [p.a.ledger(), p.b.ledger()].map(|l| l.counters().snapshot()),
    }
}

struct BatchRun {
    frames: Vec<Vec<u8>>,
    got: Vec<Vec<u8>>,
    counters: [Vec<(&'static str, u64)>; 2],
}

/// A batch puts the frames on the link that the same datagrams sent one at a time do, byte
/// for byte and in order, and both stacks count the same: with the header template (the
/// batch's own path) and without, with the checksum elided and computed, connected and
/// with sendto (BSD's sendto connects the PCB for each datagram), sizes the template
/// takes and fragmented ones among them.
#[test]
fn a_batch_sends_what_single_sends_send() {
    let mut tunings = template_tunings().to_vec();
    tunings.push(Tuning {
        udp_header_template: false,
        ..Tuning::fast()
    });
    tunings.push(Tuning::bsd());
    for t in tunings {
        for connected in [true, false] {
            let what = format!(
                "template {}, elision {}, connected {connected}",
                t.udp_header_template, t.checksum_elision
            );
            let batched = batch_run(t, true, connected);
            let single = batch_run(t, false, connected);
            assert_same_frames(&batched.frames, &single.frames, &what);
            assert_eq!(batched.got, single.got, "{what}");
            let want = batches().iter().map(Vec::len).sum::<usize>();
            assert_eq!(batched.got.len(), want, "{what}");
            assert!(batched.got.iter().all(|d| intact(d)), "{what}");
            // The batch's own path, where the template is on; the rest counted alike.
            let [mut a, b] = batched.counters;
            let at = a
                .iter()
                .position(|(name, _)| *name == "udp.batch.sent")
                .unwrap();
            let (_, by_batch) = a.remove(at);
            // All but each batch's first, the first batch's (ARP is not answered yet, so
            // there is no template) and the three the MTU makes IP fragment.
            let template = t.udp_header_template && (connected || t.sendto_without_connect);
            assert_eq!(by_batch, if template { 35 } else { 0 }, "{what}");
            let [mut a1, b1] = single.counters;
            assert_eq!(a1.remove(at), ("udp.batch.sent", 0));
            assert_eq!([a, b], [a1, b1], "{what}");
        }
    }
}

/// sendmmsg's answer: the number sent, up to the first datagram refused (the rest are not
/// sent); that datagram's error when it is the first; nothing for an empty batch.
#[test]
fn a_batch_stops_at_the_first_refusal() {
    let (mut p, _out) = captured_pair(Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = p.a.udp_open();
    let small = payload(1, 64);
    let huge = vec![0u8; MAX_UDP_PAYLOAD + 1];
    let to = Some((ADDR_B, 9));
    assert_eq!(p.a.udp_send_batch(tx, &[], to), Ok(0));
    assert_eq!(
        p.a.udp_send_batch(tx, &[&huge, &small], to),
        Err(UdpError::MessageTooBig {
            max: MAX_UDP_PAYLOAD
        })
    );
    assert_eq!(
        p.a.udp_send_batch(tx, &[&small], None),
        Err(UdpError::NotConnected)
    );
    // The template is built by now (ARP answered): the refusal comes on its path.
    assert_eq!(p.a.udp_send_batch(tx, &[&small], to), Ok(1));
    p.run_for(Duration::from_millis(2));
    let sent = p.a.ledger().counters().get(Counter::UdpTemplateSent);
    assert_eq!(
        p.a.udp_send_batch(tx, &[&small, &small, &huge, &small], to),
        Ok(2)
    );
    assert_eq!(
        p.a.ledger().counters().get(Counter::UdpTemplateSent),
        sent + 2
    );
    p.run_for(Duration::from_millis(2));
    assert_eq!(
        p.b.udp_queued(rx),
        3,
        "one, then two of the last batch's four"
    );
}

/// Each datagram of a batch is a message of the ledger's own, probed as a single send's
/// would be but for the checks the batch makes once: with every message sampled, a batch
/// of five opens five messages, each with its copy probed, and the socket layer's
/// argument checks are probed once, in the first.
#[test]
fn each_datagram_of_a_batch_is_a_ledger_message() {
    use probestack::probe::{Layer, Op, Side};
    let (mut p, _out) = captured_pair(Tuning::fast());
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, Ipv4Address::UNSPECIFIED, 9).unwrap();
    let tx = p.a.udp_open();
    let to = Some((ADDR_B, 9));
    // ARP answered and the template built.
    p.a.udp_send_batch(tx, &[b"first"], to).unwrap();
    p.run_for(Duration::from_millis(2));
    if !p.a.ledger().snapshot().probes_enabled {
        println!("the probes are compiled out: no messages to count");
        return;
    }
    p.a.ledger().set_sample_every(1);
    p.a.ledger().clear();
    let seen = p.a.ledger().messages_seen();
    let d = payload(1, 100);
    assert_eq!(p.a.udp_send_batch(tx, &[&d[..]; 5], to), Ok(5));
    assert_eq!(p.a.ledger().messages_seen() - seen, 5);
    let snapshot = p.a.ledger().snapshot();
    let sampled: u64 = snapshot.buckets.iter().map(|b| b.messages).sum();
    assert_eq!(sampled, 5);
    let probed = |op| -> u64 {
        let cells = snapshot.buckets.iter().flat_map(|b| &b.cells);
        cells
            .filter(|c| (c.layer, c.side, c.op) == (Layer::Socket, Side::Send, op))
            .map(|c| c.count)
            .sum()
    };
    assert_eq!(probed(Op::UserCopy), 5);
    assert_eq!(probed(Op::ArgCheck), 1);
}

// ---------------------------------------------------------------------------------------
// Random traffic against a model of what was sent.

#[derive(Clone, Copy, Debug)]
enum Traffic {
    Send {
        len: usize,
        how: SendHow,
    },
    Recv {
        max: usize,
    },
    Wait {
        ms: u64,
    },
    /// A's application closes its sending socket and opens another in its place, on a
    /// new ephemeral port, so that the send cache and the header templates meet sockets
    /// that come and go.
    Resend,
    /// B's application closes its receiving socket (what it held is discarded), or opens
    /// it again: bound to B's address and the port, more specific than the socket bound
    /// to the wildcard and the port that B holds throughout (RFC 1122 §4.1.3.3's choice;
    /// paper 002 §6.3's cache hiding: a receive cache that kept the wildcard socket
    /// across the bind would hand it the specific one's datagrams).
    Receiver,
}

#[derive(Clone, Debug)]
struct UdpSetup {
    mtu: usize,
    on_frame_queue: bool,
    tunings: [Tuning; 2],
    /// Per thousand frames: lost, duplicated, reordered, corrupted (past the CRC); seed.
    faults: Option<(u64, u64, u64, u64, u64)>,
    connected: bool,
    no_checksum: bool,
    recv_buffer: usize,
}

fn udp_setup() -> impl proptest::strategy::Strategy<Value = UdpSetup> {
    use proptest::prelude::*;
    let rate = || prop_oneof![4 => 0..30u64, 1 => 30..100u64];
    (
        prop_oneof![Just(576), Just(1500), Just(4352), Just(9000), Just(65535)],
        any::<bool>(),
        [udp_tuning(), udp_tuning()],
        proptest::option::of((rate(), rate(), rate(), rate(), any::<u64>())),
        any::<bool>(),
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![Just(8 << 10), Just(64 << 10), Just(1 << 20)],
    )
        .prop_map(
            |(mtu, on_frame_queue, tunings, faults, connected, no_checksum, recv_buffer)| {
                UdpSetup {
                    mtu,
                    on_frame_queue,
                    tunings,
                    faults,
                    connected,
                    no_checksum,
                    recv_buffer,
                }
            },
        )
}

fn traffic() -> impl proptest::strategy::Strategy<Value = Traffic> {
    use proptest::prelude::*;
    let len = prop_oneof![4 => 4..600usize, 2 => 600..9000usize, 1 => 9000..=MAX_UDP_PAYLOAD];
    prop_oneof![
        5 => (len, send_how()).prop_map(|(len, how)| Traffic::Send { len, how }),
        4 => prop_oneof![4..64usize, 64..70_000usize].prop_map(|max| Traffic::Recv { max }),
        2 => prop_oneof![Just(0u64), 1..50u64, 50..40_000u64].prop_map(|ms| Traffic::Wait { ms }),
        1 => prop_oneof![Just(Traffic::Resend), Just(Traffic::Receiver)],
    ]
}

const TRAFFIC_PORT: u16 = 4000;

/// A sends datagrams to B as `ops` say while B's application reads; then B reads what is
/// left. Every datagram B reads is one A sent, whole or (read into a smaller buffer)
/// truncated and flagged so, from A's address and port, never twice unless the link
/// duplicates; on a clean link B gets every datagram, in order, but those its full
/// receive buffer dropped and counted.
fn udp_traffic(setup: &UdpSetup, ops: &[Traffic]) {
    let host = |t: Tuning| {
        let mut h = HostConfig::with_mtu(setup.mtu);
        h.stack.tuning = t;
        h
    };
    let (mut a, mut b) = (host(setup.tunings[0]), host(setup.tunings[1]));
    // Corruption that passes the CRC reaches the reader where the checksum may be left
    // out (RFC 1146 / paper 000's elision on the NICs' CRC link, or A's no-checksum
    // socket): by design, so not drawn there.
    let elided = setup.no_checksum
        || !setup.on_frame_queue && setup.tunings.iter().any(|t| t.checksum_elision);
    let mut tampers = None;
    // Where frames are corrupted, datagrams go in one frame each: two fragments of one
    // datagram each with a bit flipped in the same column, one 0 to 1 and one 1 to 0,
    // cancel in the ones'-complement sum (the Internet checksum's known blind spot; with a
    // few percent of frames corrupted, a 50-fragment datagram got through so about once
    // in a few thousand cases).
    let mut largest = MAX_UDP_PAYLOAD;
    if let Some((lose, duplicate, reorder, corrupt, seed)) = setup.faults {
        let corrupt = if elided { 0 } else { corrupt };
        if corrupt > 0 {
            largest = setup.mtu - 28;
        }
        if setup.on_frame_queue {
            tampers = Some((lose, duplicate, reorder, corrupt, seed));
        } else {
            for (i, h) in [&mut a, &mut b].into_iter().enumerate() {
                h.nic.rx_faults = FaultConfig {
                    seed: seed ^ i as u64,
                    drop: lose as f64 / 1000.0,
                    duplicate: duplicate as f64 / 1000.0,
                    reorder: reorder as f64 / 1000.0,
                    reorder_depth: 3,
                    flip_passed: corrupt as f64 / 1000.0,
                    ..FaultConfig::lossy(0)
                };
            }
        }
    }
    let mut p = match (setup.on_frame_queue, tampers) {
        (false, _) => Pair::new(a, b).unwrap(),
        (true, None) => Pair::on_frame_queue(a, b).unwrap(),
        (true, Some((lose, duplicate, hold, corrupt, seed))) => {
            use common::tamper::{SeededFaults, Tampered};
            let wrap = |s: u64| {
                move |dev| -> Box<dyn probestack::driver::Device + Send> {
                    let tamper = SeededFaults::new(seed ^ s, lose, duplicate, hold, corrupt);
                    Box::new(Tampered { dev, tamper })
                }
            };
            Pair::on_frame_queue_with(a, b, wrap(1), wrap(2)).unwrap()
        }
    };
    // Each other's link addresses known: a datagram in more fragments than ARP holds for
    // an unresolved address (`ArpConfig::queue_per_address`, 8) loses its first ones,
    // counted at A, not at B.
    p.a.add_static_arp(0, ADDR_B, MAC_B);
    p.b.add_static_arp(0, ADDR_A, MAC_A);
    let receiver = |p: &mut Pair, addr: Ipv4Address| {
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, addr, TRAFFIC_PORT).unwrap();
        p.b.udp_set_recv_buffer(rx, setup.recv_buffer).unwrap();
        rx
    };
    // B's two receivers: the specific one (while open), and the wildcard one, which gets
    // only what comes while the specific one is closed.
    let wildcard = receiver(&mut p, Ipv4Address::UNSPECIFIED);
    let sender = |p: &mut Pair| {
        let tx = p.a.udp_open();
        p.a.udp_bind(tx, Ipv4Address::UNSPECIFIED, 0).unwrap();
        if setup.connected {
            p.a.udp_connect(tx, ADDR_B, TRAFFIC_PORT).unwrap();
        }
        p.a.udp_set_no_checksum(tx, setup.no_checksum).unwrap();
        (tx, (ADDR_A, p.a.udp_local_addr(tx).unwrap().1))
    };
    let mut rx = Some(receiver(&mut p, ADDR_B));
    let (mut tx, mut from) = sender(&mut p);
    let to = (!setup.connected).then_some((ADDR_B, TRAFFIC_PORT));

    // The model: the length and source of each datagram sent, by sequence number, and
    // whether B's specific receiver was open then; what each of B's receivers read (the
    // specific one first); what B's closed receivers held and discarded.
    let mut sent: Vec<(usize, (Ipv4Address, u16), bool)> = Vec::new();
    let mut got: [Vec<u32>; 2] = Default::default();
    let mut discarded = 0;
    let duplicates = setup.faults.is_some_and(|f| f.1 > 0);
    let clean = setup.faults.is_none();
    let recv = |p: &mut Pair,
                rx: Option<UdpHandle>,
                max: usize,
                got: &mut [Vec<u32>; 2],
                sent: &[(usize, _, bool)]|
     -> bool {
        let mut buf = vec![0u8; max];
        let (h, at) = rx.map_or((wildcard, 1), |rx| (rx, 0));
        match p.b.udp_recv_from(h, &mut buf) {
            Ok(r) => {
                let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
                let &(len, from, specific) = sent
                    .get(seq as usize)
                    .unwrap_or_else(|| panic!("datagram {seq} was never sent"));
                assert_eq!(r.from, from, "datagram {seq}'s source");
                // On a clean link a datagram arrives before the next step: with the
                // specific receiver open then, there.
                assert!(
                    !(clean && specific && at == 1),
                    "datagram {seq}, sent with the specific receiver open, went to the wildcard one"
                );
                assert_eq!(r.datagram_len, len, "datagram {seq}'s length");
                assert_eq!(r.len, len.min(max));
                assert_eq!(r.truncated, len > max);
                assert!(
                    buf[..r.len] == payload(seq, len)[..r.len],
                    "datagram {seq} ({len} bytes) altered"
                );
                assert!(
                    duplicates || !got.iter().any(|g| g.contains(&seq)),
                    "datagram {seq} twice"
                );
                got[at].push(seq);
                true
            }
            Err(UdpError::WouldBlock) => false,
            Err(e) => panic!("recv: {e}"),
        }
    };
    for &op in ops {
        match op {
            Traffic::Send { len, how } => {
                let len = len.min(largest);
                let datagrams: Vec<Vec<u8>> = (0..how.datagrams())
                    .map(|i| payload((sent.len() + i) as u32, len))
                    .collect();
                let r = stack_send(&mut p.a, tx, how, &datagrams, to);
                match r {
                    Ok(k) => sent.extend(std::iter::repeat_n((len, from, rx.is_some()), k)),
                    // The device's queue is full: nothing sent (a batch stops there).
                    Err(UdpError::WouldBlock | UdpError::NoBuffer) => {}
                    Err(e) => panic!("send of {len} bytes: {e}"),
                }
            }
            Traffic::Recv { max } => {
                recv(&mut p, rx, max, &mut got, &sent);
            }
            Traffic::Wait { ms } => p.run_for(Duration::from_millis(ms)),
            Traffic::Resend => {
                p.a.udp_close(tx).unwrap();
                (tx, from) = sender(&mut p);
            }
            Traffic::Receiver => match rx.take() {
                Some(h) => {
                    discarded += p.b.udp_queued(h);
                    p.b.udp_close(h).unwrap();
                }
                None => rx = Some(receiver(&mut p, ADDR_B)),
            },
        }
        p.settle();
    }
    // Reassembly gives up on a datagram's missing fragments within a minute.
    p.run_for(Duration::from_secs(61));
    while recv(&mut p, rx, 70_000, &mut got, &sent) {}
    while recv(&mut p, None, 70_000, &mut got, &sent) {}
    if setup.faults.is_none() {
        // Every datagram arrives, but those B's full socket dropped, those a closed
        // receiver discarded, and those a fragment of which A's device refused (its
        // queue full: counted, and like Linux's UDP without IP_RECVERR, not an error to
        // the sender), each counted.
        let full = p.b.ledger().counters().get(Counter::UdpDropFullSocket) as usize;
        let dropped = full + discarded;
        let refused = p.a.ledger().counters().get(Counter::StackDropDeviceRefused) as usize;
        let missing = sent.len() - got[0].len() - got[1].len();
        assert!(
            missing >= dropped && missing - dropped <= refused,
            "read {got:?} of {}; B's sockets dropped {dropped}, A's device refused {refused}",
            sent.len()
        );
        for got in &got {
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(common::conversation::config(128))]

    /// Datagrams of every size, sent every way, through either device at any MTU with any
    /// of UDP's and IP's switches, on a clean or a faulty link, checked against what was
    /// sent (`PROBESTACK_CONVERSATIONS` and `PROBESTACK_CONVERSATION_SEED` as for TCP's
    /// conversations).
    #[test]
    fn any_traffic_delivers_only_what_was_sent_and_all_of_it_on_a_clean_link(
        setup in udp_setup(),
        ops in proptest::collection::vec(traffic(), 0..60),
    ) {
        udp_traffic(&setup, &ops);
    }
}
