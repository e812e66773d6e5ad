//! The ledger against synthetic work of known durations.

use super::*;
use std::time::{Duration, Instant};

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(feature = "probes")]
mod with_probes {
    use super::*;

    /// One message of nested busy loops: socket 2.0 ms of its own, containing UDP 1.0 ms,
    /// and IP 0.25 ms of its own containing a 0.25 ms checksum. Returns (ms by op, wall
    /// ms of the message as the ledger saw it, ms measured outside).
    fn nested_run() -> (BTreeMap<&'static str, f64>, f64, f64) {
        let l = Ledger::new();
        l.set_sample_every(1);
        let t = Instant::now();
        {
            let _m = l.message(100);
            let _s = l.probe(Sampled, Layer::Socket, Side::Send, Op::UserCopy);
            spin(Duration::from_micros(1000));
            {
                let _u = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
                spin(Duration::from_micros(1000));
            }
            {
                let _i = l.probe(Sampled, Layer::Ip, Side::Send, Op::IpProto);
                spin(Duration::from_micros(250));
                let _c = l.probe(Sampled, Layer::Ip, Side::Send, Op::Checksum);
                spin(Duration::from_micros(250));
            }
            spin(Duration::from_micros(1000));
        }
        let outside = t.elapsed().as_secs_f64() * 1e3;
        let snap = l.snapshot();
        let b = snap.bucket(100).expect("the message was sampled").clone();
        let ms = b
            .by_operation()
            .into_iter()
            .map(|(k, v)| (k, v / 1e6))
            .collect();
        (ms, b.wall_ns_per_message() / 1e6, outside)
    }

    #[test]
    fn nested_time_is_attributed_exclusively() {
        // The busy loops are wall-clock spins: a preempted test thread stretches one of
        // them. A wrong ledger (double counting, nothing subtracted) fails every attempt;
        // a noisy machine fails one now and then, so up to five attempts may be made.
        let want = [
            ("user_copy", 2.0),
            ("udp_proto", 1.0),
            ("ip_proto", 0.25),
            ("checksum", 0.25),
        ];
        let mut last = String::new();
        for _ in 0..5 {
            let (ms, wall, outside) = nested_run();
            let shares_ok = want
                .iter()
                .all(|(op, w)| ms.get(op).is_some_and(|got| (got - w).abs() <= 0.05 * w));
            let total: f64 = ms.values().sum();
            let total_ok = (total - 3.5).abs() <= 0.05 * 3.5
                && (wall - total).abs() <= 0.05 * wall
                && wall <= outside;
            if shares_ok && total_ok {
                return;
            }
            last =
                format!("{ms:?}, total {total:.3} ms, wall {wall:.3} ms, outside {outside:.3} ms");
        }
        panic!("attribution off in five attempts; last: {last}");
    }

    #[test]
    fn sampling_probes_about_one_message_in_n() {
        let l = Ledger::new();
        l.set_sample_every(4);
        for _ in 0..4000 {
            let _m = l.message(64);
            let _p = l.probe(Sampled, Layer::Udp, Side::Receive, Op::Demux);
        }
        let s = l.snapshot();
        assert_eq!(s.messages_seen, 4000);
        let sampled = s.bucket(64).map_or(0, |b| b.messages);
        // Binomial(4000, 1/4): mean 1000, standard deviation 27; 800..1200 is 7 sigma.
        assert!((800..=1200).contains(&sampled), "{sampled}");
        let cell = &s.bucket(64).unwrap().cells[0];
        assert_eq!(cell.count, sampled);

        l.clear();
        l.set_sample_every(0);
        for _ in 0..100 {
            let _m = l.message(64);
            let _p = l.probe(Sampled, Layer::Udp, Side::Receive, Op::Demux);
        }
        assert!(l.snapshot().buckets.is_empty());

        l.set_sample_every(1);
        for _ in 0..100 {
            let _m = l.message(64);
            let _p = l.probe(Sampled, Layer::Udp, Side::Receive, Op::Demux);
        }
        assert_eq!(l.snapshot().bucket(64).unwrap().messages, 100);
    }

    #[test]
    fn the_gaps_between_probed_messages_are_geometric() {
        // 1 in 8 over 2000 messages: about 250 probed, the gaps between them averaging 7
        // skipped messages (geometric), with no periodic pattern.
        let l = Ledger::new();
        l.set_sample_every(8);
        l.set_sample_seed(99);
        let mut probed_at = Vec::new();
        for i in 0..2000u64 {
            let before = l.snapshot().buckets.first().map_or(0, |b| b.messages);
            {
                let _m = l.message(1);
                let _p = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
            }
            if l.snapshot().buckets.first().map_or(0, |b| b.messages) > before {
                probed_at.push(i);
            }
        }
        let gaps: Vec<u64> = probed_at.windows(2).map(|w| w[1] - w[0] - 1).collect();
        let mean = gaps.iter().sum::<u64>() as f64 / gaps.len().max(1) as f64;
        assert!((4.0..11.0).contains(&mean), "mean gap {mean}");
        let distinct: std::collections::BTreeSet<_> = gaps.iter().collect();
        assert!(distinct.len() > 8, "gaps look periodic: {gaps:?}");
    }

    #[test]
    fn the_size_can_be_learned_late_and_buckets_round() {
        let l = Ledger::new();
        l.set_sample_every(1);
        {
            let m = l.message(0);
            let _p = l.probe(Sampled, Layer::Driver, Side::Receive, Op::DeviceQueue);
            m.set_size(1000);
        }
        assert!(l.snapshot().bucket(1000).is_some());
        l.clear();
        l.set_bucketing(Bucketing::PowerOfTwo);
        {
            let _m = l.message(1000);
            // A nested message joins the outer one.
            let _n = l.message(7);
            let _p = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
        }
        let s = l.snapshot();
        assert_eq!(s.buckets.len(), 1);
        assert_eq!(s.buckets[0].size, 1024);
        assert_eq!(Bucketing::PowerOfTwo.bucket(0), 0);
        assert_eq!(Bucketing::PowerOfTwo.bucket(usize::MAX), u32::MAX);
    }

    #[test]
    fn device_work_is_nobodys_but_leaves_the_wall_time() {
        for _ in 0..5 {
            let l = Ledger::new();
            l.set_sample_every(1);
            {
                let _m = l.message(1);
                let _d = l.probe(Sampled, Layer::Driver, Side::Send, Op::DeviceQueue);
                spin(Duration::from_micros(200));
                let _nic = l.device_work(Sampled);
                spin(Duration::from_micros(800));
            }
            let s = l.snapshot();
            let b = s.bucket(1).unwrap();
            let driver = b.by_layer()["driver"] / 1e3;
            let device = b.device_ns_per_message() / 1e3;
            if (driver - 200.0).abs() < 20.0 && (device - 800.0).abs() < 40.0 {
                assert!(b.host_ns_per_message() < b.wall_ns_per_message());
                assert_eq!(b.cells.len(), 1);
                return;
            }
        }
        panic!("device work was not kept apart in five attempts");
    }

    /// The copy of a path compiled for unprobed messages records nothing even inside a
    /// probed message; the probed copy records, and tests the flag where it stands.
    #[test]
    fn only_the_sampled_copy_records() {
        let l = Ledger::new();
        l.set_sample_every(1);
        {
            let _m = l.message(10);
            assert!(l.sampled());
            let _u = l.probe(Unsampled, Layer::Udp, Side::Send, Op::UdpProto);
            let _d = l.device_work(Unsampled);
        }
        let b = l
            .snapshot()
            .bucket(10)
            .cloned()
            .expect("the message was probed");
        assert!(b.cells.is_empty() && b.probes == 0, "{b:?}");
        l.clear();
        {
            let _m = l.message(10);
            let _s = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
        }
        assert_eq!(l.snapshot().bucket(10).unwrap().cells.len(), 1);
        assert!(!l.sampled(), "the flag outlived its message");
        l.clear();
        l.set_sample_every(0);
        {
            let _m = l.message(10);
            assert!(!l.sampled());
            let _s = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
        }
        assert!(l.snapshot().buckets.is_empty());
    }

    /// The count of messages seen, kept by the countdown, through changes of rate and
    /// seed, nested messages (one message with its outermost) and a clear.
    #[test]
    fn messages_seen_counts_outermost_messages_at_every_rate() {
        let l = Ledger::new();
        let mut want = 0;
        for (n, seed) in [(1024, 1), (1, 2), (0, 3), (3, 4), (64, 5)] {
            l.set_sample_every(n);
            l.set_sample_seed(seed);
            for _ in 0..500 {
                let _m = l.message(1);
                let _inner = l.message(1);
                want += 1;
            }
            assert_eq!(l.messages_seen(), want, "1 in {n}");
        }
        l.clear();
        assert_eq!(l.messages_seen(), 0);
        let _m = l.message(1);
        assert_eq!(l.messages_seen(), 1);
    }

    /// The countdown and the open message share one word: a new rate set while a
    /// message is open changes the countdown and leaves the message as it was, probed or
    /// not, to be closed by its end.
    #[test]
    fn a_rate_set_inside_a_message_leaves_it_open() {
        let l = Ledger::new();
        l.set_sample_every(1);
        {
            let _m = l.message(10);
            l.set_sample_every(0);
            assert!(l.sampled(), "the probed message stays probed");
            let _s = l.probe(Sampled, Layer::Udp, Side::Send, Op::UdpProto);
        }
        assert!(!l.sampled());
        assert_eq!(l.snapshot().bucket(10).unwrap().messages, 1);
        {
            let _m = l.message(20);
            l.set_sample_every(1);
            assert!(!l.sampled(), "the unprobed message stays unprobed");
        }
        {
            let _m = l.message(30);
            assert!(l.sampled(), "the next message follows the new rate");
        }
        assert!(!l.sampled());
        assert_eq!(l.messages_seen(), 3);
        assert!(l.snapshot().bucket(20).is_none());
    }

    #[test]
    fn probes_outside_a_message_record_nothing() {
        let l = Ledger::new();
        l.set_sample_every(1);
        {
            let _p = l.probe(Sampled, Layer::Tcp, Side::Send, Op::TcpProto);
        }
        assert!(l.snapshot().buckets.is_empty());
    }

    #[test]
    fn views_add_up_and_export() {
        let l = Ledger::new();
        l.set_sample_every(1);
        for size in [64, 512] {
            for _ in 0..10 {
                let _m = l.message(size);
                let _a = l.probe(Sampled, Layer::Socket, Side::Send, Op::UserCopy);
                let _b = l.probe(Sampled, Layer::Udp, Side::Send, Op::Checksum);
                let _c = l.probe(Sampled, Layer::Ip, Side::Send, Op::IpProto);
                spin(Duration::from_micros(5));
            }
        }
        l.counters().inc(Counter::DriverFramesOut);
        let s = l.snapshot();
        assert_eq!(s.buckets.len(), 2);
        for b in &s.buckets {
            let acc = b.accounted_ns();
            for view in [
                b.by_operation(),
                b.by_category(),
                b.by_layer(),
                b.by_class000(),
                b.by_coarse000(),
                b.by_data_touching(),
                b.by_cai(),
            ] {
                let sum: f64 = view.values().sum();
                assert!((sum - acc).abs() < 1e-6 * acc.max(1.0), "{sum} vs {acc}");
            }
            assert!(b.by_data_touching()["data_touching"] > 0.0);
            assert!(b.unaccounted_ns() >= 0.0);
        }
        // The probes' own cost was measured, and three probes per message were counted.
        assert!(s.probe_overhead_ns > 0.0 && s.probe_overhead_ns < 10_000.0);
        assert_eq!(s.buckets[0].probes, 30);
        assert!(s.buckets[0].probe_overhead_ns > 0.0);
        let m = s.merged();
        assert_eq!(m.messages, 20);
        assert_eq!(m.cells.len(), 3);
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).expect("valid JSON");
        assert_eq!(v["buckets"][0]["size"], 64);
        assert_eq!(v["counters"]["driver.frames_out"], 1);
        assert!(v["buckets"][1]["by_layer"]["ip"].as_f64().unwrap() > 0.0);
        let csv = s.to_csv();
        assert_eq!(csv.lines().count(), 1 + 6);
        assert!(csv.contains("64,udp,send,checksum,Checksum,checksum,etc,true,10,"));
    }
}

/// Without the `probes` feature the guards are empty types and nothing is recorded
/// (`cargo test -p probestack --no-default-features` runs this).
#[cfg(not(feature = "probes"))]
#[test]
fn probes_compile_to_nothing() {
    assert_eq!(std::mem::size_of::<Probe<'static>>(), 0);
    assert_eq!(std::mem::size_of::<Message<'static>>(), 0);
    assert!(!Ledger::enabled());
    let l = Ledger::new();
    l.set_sample_every(1);
    for _ in 0..10 {
        let _m = l.message(64);
        let _p = l.probe(Sampled, Layer::Udp, Side::Send, Op::Checksum);
        spin(Duration::from_micros(1));
    }
    let s = l.snapshot();
    assert!(!s.probes_enabled);
    assert!(s.buckets.is_empty());
    // Counters stay on.
    l.counters().inc(Counter::DriverFramesIn);
    assert_eq!(l.counters().get(Counter::DriverFramesIn), 1);
}
