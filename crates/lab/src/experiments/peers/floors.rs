//! The speed targets against their floors: what each of the UDP, TCP and end-system
//! issues' targets allows per datagram or segment, from smoltcp's figure in this run,
//! beside the work the devices and the copying socket interface do whatever the protocol
//! code costs, timed alone in this run.
//!
//! The floors on the memory NIC (the device under the `probestack fast` row):
//!
//! - UDP, 64 bytes: the memory NICs alone carrying the datagram's frame (the devices
//!   table, through smoltcp's device interface, so with a copy of the 106 bytes into and
//!   out of the NICs' buffers);
//! - TCP bulk at 1500 and 9000 with the copying sockets: four copies of a segment's data
//!   (application → send buffer → frame → receive buffer → application) and the CRC-32
//!   computed and checked over its frame;
//! - TCP bulk at 65535 with zero-copy sockets and checksum offload (issue 7's target):
//!   the NIC model's passes: the sending NIC's one read of the loaned data for its
//!   checksum and its FCS, the receiving NIC's FCS check, and its copy of the payload
//!   into pages, summed (header split).
//!
//! On a frame queue (no CRC, no offloads, checksums computed by the stack): the queue
//! alone for UDP; two copies and two copies with the checksum fused for TCP bulk; for
//! zero-copy (issue 7's target), two sums of the data where it lies, the sender's over
//! its loan and the receiver's check, with nothing copied.
//!
//! Each pass is timed on data in cache, so a floor is the least that work can cost; a
//! transfer whose buffers do not stay in cache pays more. How much more is measured too,
//! for the copying TCP bulk targets on a frame queue: the four copies of a segment
//! streamed through buffers of the bulk workload's sizes ([`Stream`]), where each copy
//! reads what the one before wrote a step earlier, as in the transfer. Benchmarks
//! report: a floor above its budget says the target cannot be met on that device
//! whatever the stack does.

use serde::Serialize;
use std::hint::black_box;
use std::time::Duration;

use probestack::checksum;
use probestack::driver::crc32::{crc32, Crc32};
use probestack::driver::NicConfig;

use super::devices::{DeviceKind, DeviceRow};
use super::{
    find_row, smoltcp_best_bulk, Row, System, ONE_WAY_SIZES, SMOL_TCP_BUFFER, TCP_MTUS, TCP_READ,
    TCP_WRITE,
};
use crate::bench::{round_robin, Case, Effort};

/// Ethernet's header, which a frame adds to an IP datagram.
const ETHERNET_HEADER: usize = 14;
/// IPv4's and TCP's headers without options: a segment's data is taken as the MTU less
/// these (12 bytes more than probestack's segments carry beside their timestamps, so the
/// budget is a little more generous than the stacks' own segments would make it).
const TCP_IP_HEADERS: usize = 40;

// The UDP target is the one-way table's smaller size, 64 bytes.
const _: () = assert!(ONE_WAY_SIZES[0] == 64);

/// One pass over a buffer, timed alone.
#[derive(Clone, Debug, Serialize)]
pub struct Pass {
    /// `memcpy`, `copy_and_sum`, `sum` or `crc32`.
    pub pass: &'static str,
    pub bytes: usize,
    /// Median ns per pass.
    pub ns: f64,
}

/// One target beside its floors.
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    /// `udp_one_way_64_2x`, `tcp_bulk_1500_2x`, `tcp_bulk_9000_2x`,
    /// `tcp_bulk_65535_zero_copy_offload_3x`.
    pub target: &'static str,
    /// smoltcp's figure the target is a multiple of (for the last, its best TCP bulk
    /// figure on either device) and its unit.
    pub smoltcp_value: f64,
    pub smoltcp_unit: &'static str,
    /// The time per datagram or segment the target allows.
    pub budget_ns: f64,
    /// The floors, ns per datagram or segment.
    pub floor_memory_nic_ns: f64,
    /// `None` where the target's configuration has no frame-queue counterpart (the NIC
    /// offloads).
    pub floor_frame_queue_ns: Option<f64>,
    /// The frame queue's copying floor with the data where a transfer holds it: the four
    /// copies streamed through buffers of the bulk workload's sizes
    /// ([`PassKind::StreamedCopies`]), for the TCP bulk targets at 1500 and 9000 only.
    pub floor_frame_queue_streamed_ns: Option<f64>,
    /// How the memory NIC's floor is made up.
    pub memory_nic_work: String,
}

/// The passes a floor is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PassKind {
    /// A copy (`copy_from_slice`, which is `memcpy`).
    Copy,
    /// A copy with the RFC 1071 sum fused ([`checksum::copy_and_sum`]).
    CopyAndSum,
    /// The CRC-32 and the RFC 1071 sum from one read of the bytes
    /// ([`Crc32::update_and_sum`]).
    Crc32AndSum,
    /// The Ethernet FCS over a frame ([`crc32`]).
    Crc32,
    /// The RFC 1071 sum alone, reading the bytes where they lie ([`checksum::sum`]).
    Sum,
    /// A segment's four copies (two of them fused with the sum) as a bulk transfer lays
    /// its data out ([`Stream`]), so that each copy reads what the one before wrote a
    /// step earlier, mostly out of cache, as in the transfer; timed per segment.
    StreamedCopies,
}

impl PassKind {
    fn name(self) -> &'static str {
        match self {
            PassKind::Copy => "memcpy",
            PassKind::CopyAndSum => "copy_and_sum",
            PassKind::Crc32AndSum => "crc32_and_sum",
            PassKind::Crc32 => "crc32",
            PassKind::Sum => "sum",
            PassKind::StreamedCopies => "four_copies_streamed",
        }
    }
}

/// The bytes in front of a segment's data in its frame: Ethernet, IPv4 and TCP headers
/// without options.
const FRAME_HEADERS: usize = ETHERNET_HEADER + TCP_IP_HEADERS;

/// The TCP bulk targets' MTUs, whose copying floors are also measured streamed.
pub(super) const STREAMED_MTUS: [usize; 2] = [1500, 9000];

/// A segment's four copies through buffers laid out as the bulk workload's
/// ([`PassKind::StreamedCopies`]): A's application writes [`TCP_WRITE`] bytes at a time
/// into a send ring of the stacks' 1 MiB ([`SMOL_TCP_BUFFER`], probestack's default too);
/// each segment's data is copied out of it into a frame of its own and from there into a
/// receive ring of the same size, summed both times; B's application reads
/// [`TCP_READ`] bytes at a time. A step moves as many segments as a queue of the memory
/// NIC's depth (probestack's frame queue takes it) or the window holds, whichever is
/// fewer, so the working set is the transfer's: the rings go round through 2 MiB, each
/// step's frames hold a step's data again.
struct Stream {
    data: usize,
    per_step: usize,
    write: Vec<u8>,
    send: Vec<u8>,
    frames: Vec<Vec<u8>>,
    recv: Vec<u8>,
    read: Vec<u8>,
    /// Where the next step's data starts in each ring.
    send_at: usize,
    recv_at: usize,
}

/// The segments of `data` bytes a [`Stream`] step moves: as many as the queue or the
/// window holds, whichever is fewer.
fn segments_per_step(data: usize) -> usize {
    let queue = NicConfig::default().tx_queue_depth;
    queue.min(SMOL_TCP_BUFFER / data).max(1)
}

/// The two pieces (start and length) of `n` bytes at `at` in a ring of `len` bytes.
fn ring_span(len: usize, at: usize, n: usize) -> [(usize, usize); 2] {
    let first = n.min(len - at);
    [(at, first), (0, n - first)]
}

impl Stream {
    fn new(mtu: usize) -> Stream {
        let data = mtu - TCP_IP_HEADERS;
        let per_step = segments_per_step(data);
        Stream {
            data,
            per_step,
            write: (0..TCP_WRITE).map(|i| (i % 251) as u8).collect(),
            send: vec![0u8; SMOL_TCP_BUFFER],
            frames: vec![vec![0u8; FRAME_HEADERS + data]; per_step],
            recv: vec![0u8; SMOL_TCP_BUFFER],
            read: vec![0u8; TCP_READ],
            send_at: 0,
            recv_at: 0,
        }
    }

    /// One step: the writes, every segment's two copies with the sum, the reads.
    fn step(&mut self) {
        let ring = SMOL_TCP_BUFFER;
        let bytes = self.per_step * self.data;
        let mut at = self.send_at;
        for n in (0..bytes)
            .step_by(TCP_WRITE)
            .map(|o| TCP_WRITE.min(bytes - o))
        {
            let mut src = &self.write[..n];
            for (start, len) in ring_span(ring, at, n) {
                self.send[start..start + len].copy_from_slice(&src[..len]);
                src = &src[len..];
            }
            at = (at + n) % ring;
        }
        let (mut from, mut to) = (self.send_at, self.recv_at);
        for frame in &mut self.frames {
            let payload = &mut frame[FRAME_HEADERS..];
            let mut out = &mut payload[..];
            for (start, len) in ring_span(ring, from, self.data) {
                let (piece, rest) = out.split_at_mut(len);
                black_box(checksum::copy_and_sum(
                    piece,
                    &self.send[start..start + len],
                ));
                out = rest;
            }
            let mut src = &payload[..];
            for (start, len) in ring_span(ring, to, self.data) {
                black_box(checksum::copy_and_sum(
                    &mut self.recv[start..start + len],
                    &src[..len],
                ));
                src = &src[len..];
            }
            from = (from + self.data) % ring;
            to = (to + self.data) % ring;
        }
        let mut at = self.recv_at;
        for n in (0..bytes)
            .step_by(TCP_READ)
            .map(|o| TCP_READ.min(bytes - o))
        {
            let mut out = &mut self.read[..n];
            for (start, len) in ring_span(ring, at, n) {
                let (piece, rest) = out.split_at_mut(len);
                piece.copy_from_slice(&self.recv[start..start + len]);
                out = rest;
            }
            black_box(&self.read);
            at = (at + n) % ring;
        }
        (self.send_at, self.recv_at) = (from, to);
    }
}

/// The passes the floors are made of: for each TCP bulk MTU, a segment's data copied,
/// copied and summed, and summed, and its frame's CRC-32, alone and with the sum, each
/// timed alone on data in cache; and for the TCP bulk targets' MTUs a segment's four
/// copies streamed as a transfer holds the data ([`Stream`]). Round-robin, the median of
/// `runs` samples after a warm-up.
pub fn measure_passes(runs: usize) -> Vec<Pass> {
    let largest = TCP_MTUS.iter().copied().max().unwrap_or(1500) + ETHERNET_HEADER;
    let src: Vec<u8> = (0..largest).map(|i| (i * 7 + 3) as u8).collect();
    let mut plan: Vec<(PassKind, usize)> = TCP_MTUS
        .iter()
        .flat_map(|&mtu| {
            let data = mtu - TCP_IP_HEADERS;
            [
                (PassKind::Copy, data),
                (PassKind::CopyAndSum, data),
                (PassKind::Crc32, mtu + ETHERNET_HEADER),
                (PassKind::Crc32AndSum, mtu + ETHERNET_HEADER),
                (PassKind::Sum, data),
            ]
        })
        .collect();
    plan.extend(
        STREAMED_MTUS
            .iter()
            .map(|&mtu| (PassKind::StreamedCopies, mtu - TCP_IP_HEADERS)),
    );
    // A destination each, written by its case alone (a stream has its own buffers).
    let mut outs: Vec<Vec<u8>> = plan
        .iter()
        .map(|&(kind, n)| match kind {
            PassKind::StreamedCopies => Vec::new(),
            _ => vec![0u8; n],
        })
        .collect();
    // What one call of each case does, in units of the pass (a stream's step moves many
    // segments).
    let per_call: Vec<usize> = plan
        .iter()
        .map(|&(kind, n)| match kind {
            PassKind::StreamedCopies => segments_per_step(n),
            _ => 1,
        })
        .collect();
    let mut cases: Vec<Case<'_>> = plan
        .iter()
        .zip(outs.iter_mut())
        .map(|(&(kind, n), out)| {
            let src = &src[..n];
            match kind {
                PassKind::Copy => Case::new(kind.name(), move || {
                    out.copy_from_slice(black_box(src));
                }),
                PassKind::CopyAndSum => Case::new(kind.name(), move || {
                    black_box(checksum::copy_and_sum(out, black_box(src)));
                }),
                PassKind::Crc32AndSum => Case::new(kind.name(), move || {
                    let mut crc = Crc32::new();
                    black_box(crc.update_and_sum(black_box(src)));
                    black_box(crc.finish());
                }),
                PassKind::Crc32 => Case::new(kind.name(), move || {
                    black_box(crc32(black_box(src)));
                }),
                PassKind::Sum => Case::new(kind.name(), move || {
                    black_box(checksum::sum(black_box(src)));
                }),
                PassKind::StreamedCopies => {
                    let mut stream = Stream::new(n + TCP_IP_HEADERS);
                    Case::new(kind.name(), move || stream.step())
                }
            }
        })
        .collect();
    let effort = Effort {
        samples: runs.max(1),
        sample_time: Duration::from_millis(5),
    };
    let ns = round_robin(effort, &mut cases);
    plan.iter()
        .zip(ns)
        .zip(per_call)
        .map(|((&(kind, bytes), ns), units)| Pass {
            pass: kind.name(),
            bytes,
            ns: ns / units as f64,
        })
        .collect()
}

fn pass_ns(passes: &[Pass], kind: PassKind, bytes: usize) -> Option<f64> {
    passes
        .iter()
        .find(|p| p.pass == kind.name() && p.bytes == bytes)
        .map(|p| p.ns)
}

fn device_ns(devices: &[DeviceRow], kind: DeviceKind) -> Option<f64> {
    devices
        .iter()
        .find(|d| d.device == kind.name())
        .map(|d| d.ns_per_frame)
}

/// The targets beside their floors, from this run's rows, devices and passes; a target
/// whose smoltcp figure is missing (a failed row) is left out.
pub fn floors(rows: &[Row], devices: &[DeviceRow], passes: &[Pass]) -> Vec<Floor> {
    let mut out = Vec::new();
    let small = ONE_WAY_SIZES[0];
    if let (Some(smol), Some(nic), Some(queue)) = (
        find_row(rows, &format!("udp_one_way_{small}"), System::Smoltcp),
        device_ns(devices, DeviceKind::MemoryNic),
        device_ns(devices, DeviceKind::FrameQueue),
    ) {
        out.push(Floor {
            target: "udp_one_way_64_2x",
            smoltcp_value: smol.value,
            smoltcp_unit: smol.unit,
            budget_ns: 1e9 / smol.value / 2.0,
            floor_memory_nic_ns: nic,
            floor_frame_queue_ns: Some(queue),
            floor_frame_queue_streamed_ns: None,
            memory_nic_work: "the memory NICs alone carrying the frame".into(),
        });
    }
    for (mtu, target) in [(1500, "tcp_bulk_1500_2x"), (9000, "tcp_bulk_9000_2x")] {
        let data = mtu - TCP_IP_HEADERS;
        let frame = mtu + ETHERNET_HEADER;
        let (Some(smol), Some(copy), Some(summed), Some(crc)) = (
            find_row(rows, &format!("tcp_bulk_{mtu}"), System::Smoltcp),
            pass_ns(passes, PassKind::Copy, data),
            pass_ns(passes, PassKind::CopyAndSum, data),
            pass_ns(passes, PassKind::Crc32, frame),
        ) else {
            continue;
        };
        out.push(Floor {
            target,
            smoltcp_value: smol.value,
            smoltcp_unit: smol.unit,
            budget_ns: segment_ns(data, 2.0 * smol.value),
            floor_memory_nic_ns: 4.0 * copy + 2.0 * crc,
            floor_frame_queue_ns: Some(2.0 * copy + 2.0 * summed),
            floor_frame_queue_streamed_ns: pass_ns(passes, PassKind::StreamedCopies, data),
            memory_nic_work: format!(
                "4 copies of {data} B ({copy:.0} ns each) + 2 CRC-32 of {frame} B \
                 ({crc:.0} ns each)"
            ),
        });
    }
    let largest = TCP_MTUS.iter().copied().max().unwrap_or(1500);
    let data = largest - TCP_IP_HEADERS;
    let frame = largest + ETHERNET_HEADER;
    let smol_best = smoltcp_best_bulk(rows);
    // The NIC model's passes over a zero-copy, offloaded segment: the sending NIC reads
    // the loaned data where it lies once, for its checksum and its FCS (the segment goes
    // across by reference), the receiving NIC checks the FCS and copies the payload into
    // its pages, summing it (`driver/memlink.rs`). On a frame queue the data crosses by
    // reference and reaches the application so: the sender sums its loan, the receiver
    // checks the segment, and neither copies.
    if let (true, Some(copied), Some(crc_sum), Some(crc), Some(summed)) = (
        smol_best > 0.0,
        pass_ns(passes, PassKind::CopyAndSum, data),
        pass_ns(passes, PassKind::Crc32AndSum, frame),
        pass_ns(passes, PassKind::Crc32, frame),
        pass_ns(passes, PassKind::Sum, data),
    ) {
        out.push(Floor {
            target: "tcp_bulk_65535_zero_copy_offload_3x",
            smoltcp_value: smol_best,
            smoltcp_unit: "Gbit/s",
            budget_ns: segment_ns(data, 3.0 * smol_best),
            floor_memory_nic_ns: crc_sum + crc + copied,
            floor_frame_queue_ns: Some(2.0 * summed),
            floor_frame_queue_streamed_ns: None,
            memory_nic_work: format!(
                "the NIC model's CRC-32 and sum of {frame} B in one read ({crc_sum:.0} ns), \
                 a CRC-32 of {frame} B ({crc:.0} ns) and a copy-and-sum of {data} B \
                 ({copied:.0} ns)"
            ),
        });
    }
    out
}

/// Nanoseconds a segment of `data` bytes may take at `gbits` Gbit/s of payload.
fn segment_ns(data: usize, gbits: f64) -> f64 {
    data as f64 * 8.0 / gbits
}

/// The table's and the JSON's explanation.
pub const NOTE: &str = "budget: the time per datagram or segment the target allows, from \
    smoltcp's figure in this run (a segment's data taken as the MTU less 40 bytes). \
    floor: work the device and the copying socket interface do whatever the stacks' \
    protocol code costs, each pass timed alone in this run on data in cache (so the least \
    it can cost): on the memory NIC, the NICs alone for a 64-byte datagram (through \
    smoltcp's device interface, with a copy into and out of the NICs' buffers), four \
    copies and two CRC-32s for a TCP segment, and the NIC model's CRC-32 with the sum in \
    one read, a CRC-32 and a copy-and-sum for a zero-copy, offloaded one (sent by \
    reference, copied into pages); \
    on a frame queue, the queue alone, two copies and two copies fused with the \
    checksum for a TCP segment, and two sums of its data for a zero-copy one (the \
    sender's over its loan, the receiver's check: the queue has no offloads, and the \
    data crosses by reference). streamed: the frame queue's four copies of a TCP \
    segment (two fused with the checksum) through buffers of the bulk workload's sizes \
    (1 MiB rings each way, a frame each for as many segments as a 256-frame queue or the \
    window holds, 64 KiB writes, 256 KiB reads), so that each copy reads what the one \
    before wrote a step earlier, mostly out of cache, as in the transfer: what the \
    copies cost there, the stack's work aside. A floor above its budget means the \
    target cannot be met on that device, whatever the stack does; below it, the rest of \
    the budget is what the protocol work may take.";

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, system: System, value: f64, unit: &'static str) -> Row {
        Row {
            workload: workload.to_string(),
            system: system.name(),
            value,
            unit,
            higher_is_better: true,
            ratio_vs_probestack: 1.0,
            run_min: value,
            run_max: value,
            ns_per_datagram: None,
            delivered_fraction: None,
            link_mtu: None,
            retransmitted_segments: None,
        }
    }

    fn pass(kind: PassKind, bytes: usize, ns: f64) -> Pass {
        Pass {
            pass: kind.name(),
            bytes,
            ns,
        }
    }

    fn device(kind: DeviceKind, ns: f64) -> DeviceRow {
        DeviceRow {
            device: kind.name(),
            frame_bytes: 106,
            ns_per_frame: ns,
            run_min: ns,
            run_max: ns,
        }
    }

    #[test]
    fn budgets_and_floors_follow_from_the_figures() {
        let rows = [
            row("udp_one_way_64", System::Smoltcp, 1e7, "datagrams/s"),
            row("tcp_bulk_1500", System::Smoltcp, 29.2, "Gbit/s"),
            row("tcp_bulk_9000", System::Smoltcp, 40.0, "Gbit/s"),
            row("tcp_bulk_65535", System::SmoltcpMemlink, 52.4, "Gbit/s"),
        ];
        let devices = [
            device(DeviceKind::FrameQueue, 10.0),
            device(DeviceKind::MemoryNic, 70.0),
        ];
        let passes = [
            pass(PassKind::Copy, 1460, 20.0),
            pass(PassKind::CopyAndSum, 1460, 25.0),
            pass(PassKind::Crc32, 1514, 40.0),
            pass(PassKind::Copy, 8960, 90.0),
            pass(PassKind::CopyAndSum, 8960, 150.0),
            pass(PassKind::Crc32, 9014, 170.0),
            pass(PassKind::CopyAndSum, 65495, 1400.0),
            pass(PassKind::Crc32AndSum, 65549, 1300.0),
            pass(PassKind::Crc32, 65549, 1200.0),
            pass(PassKind::Sum, 65495, 300.0),
            pass(PassKind::StreamedCopies, 1460, 150.0),
            pass(PassKind::StreamedCopies, 8960, 600.0),
        ];
        let f = floors(&rows, &devices, &passes);
        let targets: Vec<&str> = f.iter().map(|f| f.target).collect();
        assert_eq!(
            targets,
            [
                "udp_one_way_64_2x",
                "tcp_bulk_1500_2x",
                "tcp_bulk_9000_2x",
                "tcp_bulk_65535_zero_copy_offload_3x"
            ]
        );
        // 10 M datagrams/s is 100 ns each; 2x allows 50.
        assert_eq!(f[0].budget_ns, 50.0);
        assert_eq!(
            (f[0].floor_memory_nic_ns, f[0].floor_frame_queue_ns),
            (70.0, Some(10.0))
        );
        // 1460 bytes at 2 x 29.2 Gbit/s: 200 ns.
        assert!((f[1].budget_ns - 200.0).abs() < 1e-9);
        assert_eq!(f[1].floor_memory_nic_ns, 4.0 * 20.0 + 2.0 * 40.0);
        assert_eq!(f[1].floor_frame_queue_ns, Some(2.0 * 20.0 + 2.0 * 25.0));
        assert_eq!(f[2].floor_memory_nic_ns, 4.0 * 90.0 + 2.0 * 170.0);
        // The streamed copies are the TCP bulk targets' only.
        let streamed: Vec<Option<f64>> =
            f.iter().map(|f| f.floor_frame_queue_streamed_ns).collect();
        assert_eq!(streamed, [None, Some(150.0), Some(600.0), None]);
        // smoltcp's best is on either device: 52.4, 3x of which moves 65495 bytes in
        // 65495 * 8 / 157.2 ns.
        assert_eq!(f[3].smoltcp_value, 52.4);
        assert!((f[3].budget_ns - 65495.0 * 8.0 / 157.2).abs() < 1e-6);
        assert_eq!(f[3].floor_memory_nic_ns, 1300.0 + 1200.0 + 1400.0);
        assert_eq!(f[3].floor_frame_queue_ns, Some(2.0 * 300.0));
    }

    #[test]
    fn a_target_without_smoltcps_figure_is_left_out() {
        let passes = [
            pass(PassKind::Copy, 1460, 20.0),
            pass(PassKind::CopyAndSum, 1460, 25.0),
            pass(PassKind::Crc32, 1514, 40.0),
        ];
        let rows = [row("tcp_bulk_1500", System::Smoltcp, 30.0, "Gbit/s")];
        let f = floors(&rows, &[], &passes);
        let targets: Vec<&str> = f.iter().map(|f| f.target).collect();
        // No UDP row and no devices; no passes at 9000 or 65535.
        assert_eq!(targets, ["tcp_bulk_1500_2x"]);
    }

    /// The stream really makes the four copies: after steps that wrap both rings, what
    /// B's application read is what A's wrote, byte for byte, by way of the frames.
    #[test]
    fn a_streamed_step_carries_the_written_bytes_through_every_copy() {
        // The table's note names the queue's depth.
        assert_eq!(NicConfig::default().tx_queue_depth, 256);
        let mut s = Stream::new(1500);
        let bytes = s.per_step * s.data;
        assert_eq!(s.per_step, 256.min(SMOL_TCP_BUFFER / 1460));
        // Enough steps to wrap the rings at least once.
        let steps = SMOL_TCP_BUFFER / bytes + 2;
        for _ in 0..steps {
            let start = s.send_at;
            s.step();
            // Both rings advanced by the step's bytes.
            assert_eq!(s.send_at, (start + bytes) % SMOL_TCP_BUFFER);
            assert_eq!(s.recv_at, s.send_at);
            // The step's bytes, in the order A wrote them: 64 KiB writes of the pattern.
            let written: Vec<u8> = (0..bytes).map(|i| s.write[i % TCP_WRITE]).collect();
            let ring_bytes = |ring: &[u8]| -> Vec<u8> {
                ring_span(ring.len(), start, bytes)
                    .iter()
                    .flat_map(|&(at, n)| ring[at..at + n].to_vec())
                    .collect()
            };
            assert_eq!(ring_bytes(&s.send), written);
            assert_eq!(ring_bytes(&s.recv), written);
            // The last frame holds the last segment; the read buffer the last read.
            let last = &s.frames[s.per_step - 1][FRAME_HEADERS..];
            assert_eq!(last, &written[bytes - s.data..]);
            let tail = bytes - (bytes - 1) / TCP_READ * TCP_READ;
            assert_eq!(&s.read[..tail], &written[bytes - tail..]);
        }
    }

    #[test]
    fn passes_are_timed_for_every_mtu() {
        let p = measure_passes(1);
        assert_eq!(p.len(), 5 * TCP_MTUS.len() + STREAMED_MTUS.len());
        for mtu in STREAMED_MTUS {
            let ns = pass_ns(&p, PassKind::StreamedCopies, mtu - TCP_IP_HEADERS).unwrap();
            assert!(ns > 0.0 && ns.is_finite(), "streamed at {mtu}");
        }
        for mtu in TCP_MTUS {
            for (kind, bytes) in [
                (PassKind::Copy, mtu - TCP_IP_HEADERS),
                (PassKind::CopyAndSum, mtu - TCP_IP_HEADERS),
                (PassKind::Crc32, mtu + ETHERNET_HEADER),
                (PassKind::Crc32AndSum, mtu + ETHERNET_HEADER),
                (PassKind::Sum, mtu - TCP_IP_HEADERS),
            ] {
                let ns = pass_ns(&p, kind, bytes).unwrap();
                assert!(ns > 0.0 && ns.is_finite(), "{} of {bytes}", kind.name());
            }
        }
    }
}
