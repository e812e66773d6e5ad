use super::*;
use crate::driver::{MemoryLink, NicConfig};
use crate::probe::Ledger;
use crate::wire::ethernet::{EtherType, EthernetAddress, EthernetRepr, Frame};
use crate::wire::icmpv4::{self, Icmpv4Repr};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Options, Ipv4Repr};
use crate::wire::{Checksum, Ipv4Address};

/// An Ethernet/IPv4/ICMP echo request, emitted by the stack's own wire code, from
/// 198.18.0.1 to 198.18.0.2 (the benchmarking range).
fn echo_frame(seq_no: u16, data: &[u8]) -> Vec<u8> {
    let icmp = Icmpv4Repr::EchoRequest {
        ident: 0x5053,
        seq_no,
        data,
    };
    let ip = Ipv4Repr {
        src: Ipv4Address([198, 18, 0, 1]),
        dst: Ipv4Address([198, 18, 0, 2]),
        protocol: IpProtocol::Icmp,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: seq_no,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        payload_len: icmp.buffer_len(),
        options: Ipv4Options::NONE,
    };
    let eth = EthernetRepr {
        source: EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        destination: EthernetAddress([0x02, 0, 0, 0, 0, 2]),
        ethertype: EtherType::Ipv4,
    };
    let mut buf = vec![0u8; 14 + ip.buffer_len()];
    eth.emit(&mut Frame::new_unchecked(&mut buf[..])).unwrap();
    ip.emit(
        &mut ipv4::Packet::new_unchecked(&mut buf[14..]),
        Checksum::Check,
    )
    .unwrap();
    let l4 = 14 + ip.header_len();
    icmp.emit(
        &mut icmpv4::Packet::new_unchecked(&mut buf[l4..]),
        Checksum::Check,
    )
    .unwrap();
    buf
}

/// The global header, read by hand at its documented offsets.
fn check_global_header(bytes: &[u8]) {
    assert!(bytes.len() >= 24);
    assert_eq!(
        &bytes[0..4],
        &[0x4D, 0x3C, 0xB2, 0xA1],
        "nanosecond magic, LE"
    );
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 2);
    assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), 4);
    assert_eq!(&bytes[8..16], &[0; 8], "thiszone, sigfigs");
    let snaplen = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    assert!(snaplen >= 262_144);
    assert_eq!(
        u32::from_le_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]),
        1
    );
}

#[test]
fn sink_writes_the_classic_format() {
    let mut sink = PcapSink::new(Vec::new()).unwrap();
    let f1 = echo_frame(1, b"hello");
    let f2 = echo_frame(2, &[0xAB; 1000]);
    sink.write_record(Instant::from_nanos(1_500_000_123), &f1)
        .unwrap();
    sink.write_record(Instant::from_nanos(2_000_000_000), &f2)
        .unwrap();
    sink.flush().unwrap();
    assert_eq!(sink.records(), 2);
    let bytes = sink.into_inner();
    check_global_header(&bytes);
    // The first record header by hand: 1 s, 500000123 ns, lengths.
    let r = &bytes[24..40];
    assert_eq!(u32::from_le_bytes([r[0], r[1], r[2], r[3]]), 1);
    assert_eq!(u32::from_le_bytes([r[4], r[5], r[6], r[7]]), 500_000_123);
    assert_eq!(
        u32::from_le_bytes([r[8], r[9], r[10], r[11]]) as usize,
        f1.len()
    );
    assert_eq!(
        u32::from_le_bytes([r[12], r[13], r[14], r[15]]) as usize,
        f1.len()
    );
    assert_eq!(&bytes[40..40 + f1.len()], &f1[..]);
    assert_eq!(bytes.len(), 24 + 2 * 16 + f1.len() + f2.len());

    let (h, recs) = parse(&bytes).unwrap();
    assert_eq!(
        h,
        PcapHeader {
            nanos: true,
            big_endian: false,
            version: (2, 4),
            snaplen: SNAPLEN,
            linktype: LINKTYPE_ETHERNET,
        }
    );
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].time_ns, 1_500_000_123);
    assert_eq!(recs[0].data, f1);
    assert_eq!(recs[1].time_ns, 2_000_000_000);
    assert_eq!(recs[1].orig_len as usize, f2.len());
    assert_eq!(recs[1].data, f2);
}

#[test]
fn parse_reads_other_byte_orders_and_refuses_garbage() {
    // A big-endian microsecond capture with one 3-byte record, built by hand.
    let mut be = Vec::new();
    be.extend_from_slice(&MAGIC_MICROS.to_be_bytes());
    be.extend_from_slice(&2u16.to_be_bytes());
    be.extend_from_slice(&4u16.to_be_bytes());
    be.extend_from_slice(&[0; 8]);
    be.extend_from_slice(&65535u32.to_be_bytes());
    be.extend_from_slice(&1u32.to_be_bytes());
    be.extend_from_slice(&7u32.to_be_bytes());
    be.extend_from_slice(&250u32.to_be_bytes());
    be.extend_from_slice(&3u32.to_be_bytes());
    be.extend_from_slice(&60u32.to_be_bytes());
    be.extend_from_slice(&[1, 2, 3]);
    let (h, recs) = parse(&be).unwrap();
    assert!(h.big_endian && !h.nanos);
    assert_eq!(h.snaplen, 65535);
    assert_eq!(recs[0].time_ns, 7_000_250_000);
    assert_eq!(
        (recs[0].orig_len, &recs[0].data[..]),
        (60, &[1u8, 2, 3][..])
    );

    assert_eq!(parse(&[0; 10]), Err(PcapError::Truncated { offset: 0 }));
    assert!(matches!(parse(&[0; 24]), Err(PcapError::BadMagic(0))));
    let cut = &be[..be.len() - 1];
    assert_eq!(parse(cut), Err(PcapError::Truncated { offset: 40 }));
    let mut huge = be.clone();
    huge[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(parse(&huge), Err(PcapError::BadRecord { offset: 24 }));
    assert!(PcapError::BadMagic(1).to_string().contains("not a pcap"));
}

#[test]
fn writer_captures_both_directions_without_the_fcs() {
    let (a, mut b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let mut a = PcapWriter::new(a, Vec::new(), PcapMode::Both).unwrap();
    let l = Ledger::new();
    let cx = |ns| DeviceContext {
        now: Instant::from_nanos(ns),
        ledger: &l,
    };
    let sent: Vec<Vec<u8>> = (0..5).map(|i| echo_frame(i, &[i as u8; 56])).collect();
    for (i, f) in sent.iter().enumerate() {
        let mut buf = PacketBuf::new(0, 32, f.len() + 4).unwrap();
        buf.extend_from_slice(f).unwrap();
        a.transmit(buf, TxMeta::default(), &cx(1_000 * i as u64))
            .unwrap();
    }
    // Replies the other way.
    for f in &sent[..2] {
        let mut buf = PacketBuf::new(0, 0, f.len() + 4).unwrap();
        buf.extend_from_slice(f).unwrap();
        b.transmit(buf, TxMeta::default(), &cx(10_000)).unwrap();
    }
    assert!(a.take_notification(&cx(20_000)));
    let mut got = 0;
    while let Some(rx) = a.receive(&cx(20_000 + got)) {
        assert_eq!(rx.frame.data(), &sent[got as usize][..]);
        got += 1;
    }
    assert_eq!(got, 2);
    assert!(a.tx_ready());
    assert_eq!(a.caps(), a.inner().caps());
    assert_eq!(a.next_deadline(), None);
    // A refused frame is not captured.
    let too_big = PacketBuf::new(2000, 0, 4).unwrap();
    assert!(a.transmit(too_big, TxMeta::default(), &cx(30_000)).is_err());
    a.flush().unwrap();
    assert!(a.take_error().is_none());
    assert!(format!("{a:?}").contains("records: 7"));
    let (_, sink) = a.into_parts();
    let bytes = sink.into_inner();
    check_global_header(&bytes);
    let (_, recs) = parse(&bytes).unwrap();
    assert_eq!(recs.len(), 7);
    for (i, r) in recs[..5].iter().enumerate() {
        assert_eq!(r.data, sent[i], "no FCS on transmitted frames");
        assert_eq!(r.time_ns, 1_000 * i as u64);
    }
    assert_eq!(recs[5].data, sent[0]);
    assert_eq!(recs[6].data, sent[1]);
    assert_eq!((recs[5].time_ns, recs[6].time_ns), (20_000, 20_001));
}

#[test]
fn modes_choose_directions_and_write_errors_stop_capture() {
    for (mode, want) in [(PcapMode::TxOnly, 1), (PcapMode::RxOnly, 1)] {
        let (a, mut b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
        let mut a = PcapWriter::new(a, Vec::new(), mode).unwrap();
        let l = Ledger::new();
        let cx = DeviceContext {
            now: Instant::ZERO,
            ledger: &l,
        };
        let f = echo_frame(1, b"x");
        a.transmit(
            PacketBuf::from_slice(&f, 0).unwrap(),
            TxMeta::default(),
            &cx,
        )
        .unwrap();
        b.transmit(
            PacketBuf::from_slice(&f, 0).unwrap(),
            TxMeta::default(),
            &cx,
        )
        .unwrap();
        assert!(a.receive(&cx).is_some());
        a.recycle(PacketBuf::new(10, 0, 0).unwrap());
        assert_eq!(a.sink().records(), want, "{mode:?}");
        assert!(b.receive(&cx).is_some());
    }

    /// A writer that fails after the header.
    struct Failing(usize);
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 >= 24 {
                return Err(io::Error::other("disk full"));
            }
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (a, mut b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let mut a = PcapWriter::new(a, Failing(0), PcapMode::Both).unwrap();
    let l = Ledger::new();
    let cx = DeviceContext {
        now: Instant::ZERO,
        ledger: &l,
    };
    let f = echo_frame(1, b"x");
    for _ in 0..3 {
        // The device goes on working; the capture stopped at the first error.
        a.transmit(
            PacketBuf::from_slice(&f, 0).unwrap(),
            TxMeta::default(),
            &cx,
        )
        .unwrap();
    }
    assert_eq!(
        a.take_error().map(|e| e.to_string()),
        Some("disk full".into())
    );
    assert!(a.take_error().is_none());
    let mut n = 0;
    while b.receive(&cx).is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn tshark_reads_the_capture() {
    let have = std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !have {
        eprintln!("skipped: tshark is not installed (apt-get install tshark to run this check)");
        return;
    }
    let path = std::env::temp_dir().join(format!("probestack-pcap-{}.pcap", std::process::id()));
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut sink = PcapSink::new(std::io::BufWriter::new(file)).unwrap();
        for i in 0..4u16 {
            let f = echo_frame(i, &[i as u8; 48]);
            sink.write_record(Instant::from_millis(i as u64), &f)
                .unwrap();
        }
        sink.flush().unwrap();
    }
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-T", "fields", "-e", "ip.checksum.status", "-e", "icmp.seq"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for (i, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        // Status 1 is "Good".
        assert_eq!(fields.first(), Some(&"1"), "{stdout}");
        assert_eq!(fields.get(1), Some(&i.to_string().as_str()), "{stdout}");
    }
}
