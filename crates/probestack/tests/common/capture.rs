//! Two stacks on the memory link with A's transmitted frames captured (a pcap writer around
//! A's NIC into memory the test keeps a handle on), for tests that compare the frames two
//! code paths put on the wire.

use std::sync::{Arc, Mutex};

use probestack::driver::pcap::{self, PcapMode, PcapWriter};
use probestack::sim::{HostConfig, Pair};

/// A `Write` the test keeps a handle on.
#[derive(Clone, Default)]
pub struct SharedBytes(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBytes {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Two stacks configured as `host`, A's transmitted frames captured into the returned
/// handle.
pub fn captured_pair(host: HostConfig) -> (Pair, SharedBytes) {
    let out = SharedBytes::default();
    let sink = out.clone();
    let p = Pair::with_devices(
        host.clone(),
        host,
        |nic| Box::new(PcapWriter::new(nic, sink, PcapMode::TxOnly).unwrap()),
        |nic| Box::new(nic),
    )
    .unwrap();
    (p, out)
}

/// The frames captured so far, in order.
pub fn captured_frames(out: &SharedBytes) -> Vec<Vec<u8>> {
    captured_records(out).into_iter().map(|r| r.data).collect()
}

/// The records captured so far, in order, each frame with the time the device saw it.
pub fn captured_records(out: &SharedBytes) -> Vec<pcap::PcapRecord> {
    let bytes = out.0.lock().unwrap().clone();
    let (_, records) = pcap::parse(&bytes).unwrap();
    records
}

/// The settings a header template must not change the frames under: `Tuning::fast()` with
/// checksum elision on and off, and with either IP header checksum routine (in line, or
/// the general sum). The caller turns its template off in a copy to get the layers' path.
pub fn template_tunings() -> [probestack::tuning::Tuning; 3] {
    [(true, true), (false, true), (false, false)].map(|(elision, inline)| {
        probestack::tuning::Tuning {
            checksum_elision: elision,
            inline_ip_header_checksum: inline,
            ..probestack::tuning::Tuning::fast()
        }
    })
}

/// Asserts the two captures hold the same frames, byte for byte and in order; `what` says
/// which settings, in the message.
pub fn assert_same_frames(got: &[Vec<u8>], want: &[Vec<u8>], what: &str) {
    assert_eq!(got.len(), want.len(), "frame count ({what})");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "frame {i} differs ({what})");
    }
}
