//! Event counters beside the ledger, in the spirit of `netstat -s`: drops by reason, cache
//! hits and misses, fragments, retransmissions. Always compiled (a counter is one add),
//! readable at any time, exported with the ledger.

use std::cell::Cell;

macro_rules! counters {
    ($( $(#[$doc:meta])* $c:ident = $name:literal; )*) => {
        /// One counted event. Names are `layer.event`, drops `layer.drop.reason`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Counter {
            $( $(#[$doc])* $c, )*
        }

        impl Counter {
            pub const ALL: &'static [Counter] = &[$(Counter::$c),*];
            /// How many counters there are.
            pub const COUNT: usize = Counter::ALL.len();

            pub const fn name(self) -> &'static str {
                match self { $(Counter::$c => $name,)* }
            }
        }
    };
}

counters! {
    /// Frames the driver received from the device.
    DriverFramesIn = "driver.frames_in";
    /// Frames the driver handed to the device.
    DriverFramesOut = "driver.frames_out";
    /// Frames whose CRC-32 frame check sequence failed (dropped as a NIC would).
    DriverDropBadFcs = "driver.drop.bad_fcs";
    /// Frames dropped because a device queue was full.
    DriverDropQueueFull = "driver.drop.queue_full";
    /// Device notifications (interrupts) handled.
    DriverNotifications = "driver.notifications";
    /// Frames longer than the receiving device's MTU allows (dropped as a NIC would).
    DriverDropTooLong = "driver.drop.too_long";
    /// Frames dropped because the device's receive queue was full (the host was slow).
    DriverDropRxOverrun = "driver.drop.rx_overrun";
    /// Frames whose external fragments (loaned data) the driver copied into one buffer
    /// because the device cannot gather them (no scatter-gather), or to loop them back.
    DriverTxLinearized = "driver.tx_linearized";
    /// Frames a memory NIC with DMA handed to the other end with their fragments, uncopied
    /// (data a stack sent by reference).
    DriverTxFragmentsPassed = "driver.tx_fragments_passed";
    /// Frames with fragments a memory NIC gathered on receipt because it reads frames
    /// whole (a faulty wire, PIO, header split, receive checksum offload).
    DriverRxGathered = "driver.rx_gathered";
    /// DMA frames without 4 bytes of tailroom for the FCS, copied into a larger buffer.
    DriverTxBounce = "driver.tx_bounce";
    /// Faults a memory link's wire injected (fault injection, not real events): frames dropped,
    DriverFaultDrop = "driver.fault.drop";
    /// frames duplicated,
    DriverFaultDuplicate = "driver.fault.duplicate";
    /// frames delivered after the frame behind them,
    DriverFaultReorder = "driver.fault.reorder";
    /// frames given a nonzero latency,
    DriverFaultDelay = "driver.fault.delay";
    /// frames with bits flipped after the FCS (the CRC catches them),
    DriverFaultFlipCaught = "driver.fault.flip_caught";
    /// frames with bits flipped and the FCS recomputed (they reach the stack corrupted).
    DriverFaultFlipPassed = "driver.fault.flip_passed";
    /// Ethernet frames too short or malformed.
    LinkDropMalformed = "link.drop.malformed";
    /// Ethernet frames for another station.
    LinkDropNotForUs = "link.drop.not_for_us";
    /// Ethernet frames of a type the stack does not carry.
    LinkDropUnknownType = "link.drop.unknown_ethertype";
    /// Packet buffers refused because the buffer memory limit was reached.
    BufDropExhausted = "buf.drop.exhausted";
    /// Packet buffers taken from the one-behind cache.
    BufCacheHits = "buf.cache_hits";
    /// Packet buffers the one-behind cache could not supply.
    BufCacheMisses = "buf.cache_misses";
    /// ARP packets malformed or for another protocol.
    ArpDropMalformed = "arp.drop.malformed";
    ArpRequestsIn = "arp.requests_in";
    ArpRepliesIn = "arp.replies_in";
    ArpRequestsOut = "arp.requests_out";
    ArpRepliesOut = "arp.replies_out";
    /// Learned entries forgotten on a transport's negative advice (a TCP connection's
    /// third retransmission of a segment, RFC 1122 §4.2.3.5): the next packet asks again.
    ArpForgottenOnAdvice = "arp.forgotten_on_advice";
    /// Packets dropped because their next hop never answered ARP.
    ArpDropUnresolved = "arp.drop.unresolved";
    /// Packets pushed out of a full queue waiting for ARP.
    ArpDropQueueFull = "arp.drop.queue_full";
    /// Packets for a new address dropped because the ARP cache was full
    /// (`ArpConfig::max_entries`).
    ArpDropTableFull = "arp.drop.table_full";
    /// IPv4 datagrams received (before validation).
    IpPacketsIn = "ip.packets_in";
    /// IPv4 datagrams with a bad version, header length, total length or option.
    IpDropMalformed = "ip.drop.malformed";
    /// IPv4 datagrams whose header checksum failed.
    IpDropBadChecksum = "ip.drop.bad_checksum";
    /// IPv4 datagrams for an address that is not ours (a host does not forward).
    IpDropNotForUs = "ip.drop.not_for_us";
    /// Datagrams from a source no single host has: a broadcast, multicast, class E or
    /// loopback address (RFC 1122 §3.2.1.3).
    IpDropBadSource = "ip.drop.bad_source";
    /// Datagrams that came in a link-layer broadcast frame but name one of this host's
    /// unicast addresses (RFC 1122 §3.3.6: discarded silently).
    IpDropLinkBroadcast = "ip.drop.link_broadcast";
    /// Datagrams carrying a source route, dropped because the stack takes none
    /// (`StackConfig::accept_source_route` off).
    IpDropSourceRoute = "ip.drop.source_route";
    /// Datagrams whose source route goes on past this host, which does not forward them
    /// (RFC 1122 §3.3.5; answered with Source Route Failed).
    IpDropSourceRouteFailed = "ip.drop.source_route_failed";
    /// IPv4 datagrams for a protocol nobody handles.
    IpDropUnknownProtocol = "ip.drop.unknown_protocol";
    /// Datagrams handed to the transports or ICMP.
    IpDelivered = "ip.delivered";
    /// Datagrams sent (each fragment counts once in `ip.fragments_out`).
    IpPacketsOut = "ip.packets_out";
    IpDropNoRoute = "ip.drop.no_route";
    /// Sends refused: don't-fragment set and larger than the MTU.
    IpDropNeedFrag = "ip.drop.need_frag";
    /// Fragments made on output.
    IpFragmentsOut = "ip.fragments_out";
    /// Fragments received.
    IpFragmentsIn = "ip.fragments_in";
    /// Datagrams reassembled from fragments.
    IpReassembled = "ip.reassembled";
    /// Fragments dropped as overlapping, or for a datagram an overlap poisoned.
    IpDropFragOverlap = "ip.drop.frag_overlap";
    /// Fragments dropped as malformed (a middle fragment not a multiple of 8, too long).
    IpDropFragMalformed = "ip.drop.frag_malformed";
    /// Fragments refused at the reassembly memory cap (their datagram could not fit even
    /// alone), and incomplete datagrams evicted (oldest first) to make room under it or
    /// under the cap on datagrams held.
    IpDropFragMemory = "ip.drop.frag_memory";
    IpFragEvicted = "ip.drop.frag_evicted";
    /// Datagrams whose reassembly timed out.
    IpReassemblyTimeout = "ip.reassembly_timeouts";
    /// Lookups of the defrag queue for a datagram that was not a fragment (paper 001 §7.6).
    IpDefragLookups = "ip.defrag_lookups";
    IcmpIn = "icmp.in";
    IcmpOut = "icmp.out";
    IcmpDropMalformed = "icmp.drop.malformed";
    /// Source Quench messages, discarded unheeded (RFC 6633 §5, RFC 9293 MUST-55).
    IcmpDropSourceQuench = "icmp.drop.source_quench";
    IcmpDropBadChecksum = "icmp.drop.bad_checksum";
    IcmpEchoRequestsIn = "icmp.echo_requests_in";
    IcmpEchoRepliesIn = "icmp.echo_replies_in";
    /// Destination unreachable and time exceeded messages received.
    IcmpErrorsIn = "icmp.errors_in";
    /// Destination unreachable and time exceeded messages sent.
    IcmpErrorsOut = "icmp.errors_out";
    /// ICMP errors not sent because of the rate limit.
    IcmpErrorsRateLimited = "icmp.errors_rate_limited";
    /// Echo replies dropped because nobody collected the earlier ones.
    IcmpDropEchoQueueFull = "icmp.drop.echo_queue_full";
    /// UDP datagrams received and sent.
    UdpDatagramsIn = "udp.datagrams_in";
    UdpDatagramsOut = "udp.datagrams_out";
    /// UDP datagrams sent with the socket's header template (`Tuning::udp_header_template`),
    /// and templates built (a first datagram to a destination, or a stale template).
    UdpTemplateSent = "udp.template.sent";
    UdpTemplateBuilt = "udp.template.built";
    /// UDP datagrams a batch (`Stack::udp_send_batch`) sent on the checks and template of
    /// its first datagram (every datagram of a batch after the first, when it fits the
    /// template).
    UdpBatchSent = "udp.batch.sent";
    /// TCP segments sent under the connection's link template (`Tuning::
    /// tcp_header_template`), and templates built (a connection's first segment with its
    /// next hop resolved, or a stale template).
    TcpTemplateSent = "tcp.template.sent";
    TcpTemplateBuilt = "tcp.template.built";
    /// UDP datagrams too short, with a bad length, or to port 0.
    UdpDropMalformed = "udp.drop.malformed";
    /// UDP datagrams whose checksum failed (at input, or while copied out).
    UdpDropBadChecksum = "udp.drop.bad_checksum";
    /// UDP datagrams for a port nobody listens on (a port unreachable goes back).
    UdpDropNoSocket = "udp.drop.no_socket";
    /// The same, to a broadcast address (no ICMP goes back).
    UdpDropNoSocketBroadcast = "udp.drop.no_socket_broadcast";
    /// UDP datagrams dropped because the socket's receive buffer was full.
    UdpDropFullSocket = "udp.drop.socket_full";
    /// UDP datagrams received with no checksum (a zero field).
    UdpNoChecksumIn = "udp.no_checksum_in";
    /// Connected sockets told their peer's port is unreachable, and told any ICMP
    /// error about their datagrams (RFC 1122 §4.1.3.3).
    UdpConnectionRefused = "udp.connection_refused";
    UdpIcmpErrors = "udp.icmp_errors";
    /// UDP PCB lookups for received datagrams (paper 002 §6.3).
    UdpPcbLookups = "udp.pcb_lookups";
    /// PCBs (or hash buckets) the lookup strategy examined; cache checks not included.
    UdpPcbExamined = "udp.pcb_examined";
    /// Lookups answered by the one-behind receive cache (paper 002 §6.3.1),
    UdpPcbRecvCacheHits = "udp.pcb_recv_cache_hits";
    /// and those it could not answer.
    UdpPcbRecvCacheMisses = "udp.pcb_recv_cache_misses";
    /// Lookups answered by the one-behind send cache (paper 002 §6.3.2),
    UdpPcbSendCacheHits = "udp.pcb_send_cache_hits";
    /// and those it could not answer (counted only after a receive-cache miss).
    UdpPcbSendCacheMisses = "udp.pcb_send_cache_misses";
    /// TCP segments received (any state, checksum verified or elided).
    TcpSegmentsIn = "tcp.segments_in";
    /// TCP segments sent, and of those the retransmissions.
    TcpSegmentsOut = "tcp.segments_out";
    TcpRetransmittedSegments = "tcp.retransmitted_segments";
    /// Super-segments TCP cut into frames itself (`Tuning::software_segmentation`); their
    /// frames count in `tcp.segments_out`.
    TcpSoftwareSegmented = "tcp.software_segmented";
    /// Segments sent with loaned data attached by reference (zero-copy send, paper 004
    /// §3.1).
    TcpZeroCopySegments = "tcp.zero_copy.segments_out";
    /// Segments sent with copied data by reference: the blocks of a send buffer that
    /// shares them (`Tuning::tcp_send_by_reference`).
    TcpSegmentsByReference = "tcp.by_reference.segments_out";
    /// Segments whose data arrived by reference (fragments a sender's device passed on)
    /// and went into the receive buffer as they were, uncopied.
    TcpSegmentsInByReference = "tcp.by_reference.segments_in";
    /// In-order segments kept by reference whose checksum input left to the application's
    /// read (`Tuning::tcp_verify_on_read`).
    TcpSegmentsDeferred = "tcp.verify_on_read.deferred";
    /// Of those, segments verified as a read copied them.
    TcpVerifiedOnRead = "tcp.verify_on_read.verified_in_read";
    /// Of those, segments no read took before the connection's delayed-ACK timer (or a
    /// segment TCP input processed in full, or a zero-copy read), verified in a pass of
    /// their own.
    TcpVerifiedUnread = "tcp.verify_on_read.verified_unread";
    /// Unverified segments dropped because one before them failed its checksum (they
    /// followed a hole; the sender sends them again).
    TcpDropBehindBadChecksum = "tcp.drop.behind_bad_checksum";
    /// Datagrams sent with loaned data by reference (zero-copy send).
    UdpZeroCopyDatagrams = "udp.zero_copy.datagrams_out";
    /// Bytes the application of a zero-copy receive connection got as whole pages by
    /// reference, and the "odd data" it got by copy (not whole pages, out of order, not
    /// page-aligned, or read with a copying read; paper 004 §4).
    TcpZeroCopyRxBytes = "tcp.zero_copy.rx_page_bytes";
    TcpZeroCopyRxOddBytes = "tcp.zero_copy.rx_odd_bytes";
    /// Segments too short, with a bad data offset or bad options.
    TcpDropMalformed = "tcp.drop.malformed";
    /// Segments whose checksum failed.
    TcpDropBadChecksum = "tcp.drop.bad_checksum";
    /// Segments for no connection or listener (answered with RST).
    TcpDropNoSocket = "tcp.drop.no_socket";
    /// Segments to a listener or to no socket that were sent to a broadcast address or
    /// from a broadcast, multicast or unspecified one: dropped unanswered (RFC 9293
    /// MUST-57, MUST-63).
    TcpDropNotUnicast = "tcp.drop.not_unicast";
    /// Segments received without a checksum because both ends agreed (RFC 1146).
    TcpNoChecksumIn = "tcp.no_checksum_in";
    /// Connections opened actively (connect) and passively (accepted by a listener).
    TcpActiveOpens = "tcp.active_opens";
    TcpPassiveOpens = "tcp.passive_opens";
    /// SYNs a listener dropped because its backlog was full (SYN cookies off, or its
    /// accept queue full), and SYN-cookie ACKs dropped because the accept queue was full.
    TcpDropListenOverflow = "tcp.drop.listen_overflow";
    /// SYN cookies (RFC 4987 §3.6): SYN-ACKs sent with a cookie because the backlog was
    /// full, ACKs whose valid cookie made a connection, and ACKs to a listener whose
    /// cookie was bad or expired (dropped; RFC 9293's RST for such an ACK is sent too).
    TcpSynCookiesSent = "tcp.syn_cookies_sent";
    TcpSynCookiesAccepted = "tcp.syn_cookies_accepted";
    TcpSynCookiesRejected = "tcp.syn_cookies_rejected";
    /// Connections in TIME-WAIT that a newer SYN from the same peer and port replaced
    /// with a new incarnation through the listener (RFC 9293 §3.6.1 MAY-2, RFC 6191).
    TcpTimeWaitReopened = "tcp.time_wait_reopened";
    /// RSTs sent and accepted.
    TcpResetsOut = "tcp.resets_out";
    TcpResetsIn = "tcp.resets_in";
    /// Header prediction (4.4BSD): pure ACKs and pure data taken on the fast path, and
    /// segments that took the full path with the switch on.
    TcpPredictionAckHits = "tcp.prediction.ack_hits";
    TcpPredictionDataHits = "tcp.prediction.data_hits";
    TcpPredictionMisses = "tcp.prediction.misses";
    /// Calls of TCP output that found at once, before any route lookup or segment
    /// decision, that the connection had nothing to send (an established connection
    /// with no unsent data, no ACK owed, no probe or retransmission due).
    TcpOutputIdle = "tcp.output_idle";
    /// RFC 5961 challenge ACKs sent, and those the rate limit held back.
    TcpChallengeAcks = "tcp.challenge_acks";
    TcpChallengeAcksSuppressed = "tcp.challenge_acks_suppressed";
    /// ACKs not sent in answer to segments without data failing PAWS or outside the
    /// window within 500 ms of the last such answer: the per-connection limit that ends
    /// ACK loops (Linux's `tcp_invalid_ratelimit`).
    TcpInvalidAcksSuppressed = "tcp.invalid_acks_suppressed";
    /// Segments failing PAWS (RFC 7323 §5), outside the receive window, or acknowledging
    /// data not sent or too old (RFC 5961 §5).
    TcpDropPaws = "tcp.drop.paws";
    /// Segments without a timestamp on a connection that negotiated them (RFC 7323 §3.2).
    TcpDropNoTimestamp = "tcp.drop.no_timestamp";
    TcpDropOutOfWindow = "tcp.drop.out_of_window";
    /// Data at RCV.NXT into a shut window, a window probe's byte among them: not taken,
    /// answered with an ACK (RFC 9293 §3.10.7.4; Linux's `TCPZeroWindowDrop`).
    TcpDropZeroWindow = "tcp.drop.zero_window";
    TcpDropAckTooNew = "tcp.drop.ack_too_new";
    TcpDropAckTooOld = "tcp.drop.ack_too_old";
    /// Fast retransmits (RFC 5681 §3.2) and retransmission timeouts (RFC 6298).
    TcpFastRetransmits = "tcp.fast_retransmits";
    TcpRetransmitTimeouts = "tcp.retransmit_timeouts";
    /// Retransmissions found lost during recovery (data sent after them SACKed) and sent
    /// again before the retransmission timer.
    TcpLostRetransmissions = "tcp.lost_retransmissions";
    /// Congestion responses undone: every retransmission they made was reported by a
    /// D-SACK as not needed (RFC 3708).
    TcpSpuriousUndos = "tcp.spurious_undos";
    /// Fast retransmits started when the reordering window passed with SACKed data above
    /// the first unacknowledged segment (`Connection::reorder_window`).
    TcpReorderWindowLosses = "tcp.reorder_window_losses";
    /// Tail loss probes sent (RFC 8985 §7).
    TcpLossProbes = "tcp.loss_probes";
    /// Connections dropped after too many retransmissions or unanswered keepalives.
    TcpDropTimeout = "tcp.drop.timeout";
    /// Segments received out of order, and those the out-of-order queue had no room for.
    TcpOutOfOrderSegments = "tcp.out_of_order_segments";
    TcpDropOutOfOrderFull = "tcp.drop.out_of_order_full";
    /// Data for a socket the application had closed (the connection is reset).
    TcpDataAfterClose = "tcp.data_after_close";
    /// FINs received in order.
    TcpFinsIn = "tcp.fins_in";
    /// Urgent pointers received that began urgent data or moved its end on, each a
    /// signal to the application (RFC 9293 §3.8.5).
    TcpUrgentSignals = "tcp.urgent_signals";
    /// ACKs sent because the delayed-ACK timer ran out.
    TcpDelayedAcks = "tcp.delayed_acks";
    /// Zero-window probes and keepalive probes sent.
    TcpWindowProbes = "tcp.window_probes";
    TcpKeepalives = "tcp.keepalives";
    /// ICMP fragmentation-needed messages that lowered a connection's MSS (RFC 1191), and
    /// ICMP errors ignored: quoting a sequence number not in flight (RFC 5927 §4.1), for
    /// no connection, or with an MTU no smaller than the path's or below the floor.
    TcpPathMtuReductions = "tcp.path_mtu_reductions";
    TcpIcmpIgnored = "tcp.icmp_ignored";
    /// ECN (RFC 3168): data segments that arrived with CE set, and window reductions for
    /// the peer's ECE.
    TcpEcnCeIn = "tcp.ecn.ce_in";
    TcpEcnReductions = "tcp.ecn.reductions";
    /// Other ICMP errors taken by a connection (RFC 9293 §3.9.2.2): soft ones kept for
    /// the application, hard ones that ended a connection in SYN-SENT.
    TcpIcmpErrors = "tcp.icmp_errors";
    /// Sends refused because no packet buffer could be had.
    StackDropNoBuffer = "stack.drop.no_buffer";
    /// Received datagrams with fragments (data a sender passed by reference across an
    /// in-memory device with scatter-gather) copied into one buffer: not TCP, an IP
    /// fragment, or TCP data that could not be kept by reference (out of order, say, or
    /// `Tuning::tcp_send_by_reference` off here).
    StackRxLinearized = "stack.rx_linearized";
    /// Sockets refused, and SYNs or SYN-cookie ACKs dropped, because their buffers would
    /// pass `StackConfig::socket_memory_limit`.
    StackDropSocketMemory = "stack.drop.socket_memory";
    /// Frames a device refused on transmit.
    StackDropDeviceRefused = "stack.drop.device_refused";
}

/// The counters of one stack.
#[derive(Debug)]
pub struct Counters {
    /// One per counter, by its index: an array of the right length, so that counting
    /// needs no bounds check.
    values: Box<[Cell<u64>; Counter::COUNT]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    pub fn new() -> Counters {
        Counters {
            values: Box::new(std::array::from_fn(|_| Cell::new(0))),
        }
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        let v = &self.values[c as usize];
        v.set(v.get().wrapping_add(n));
    }

    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize].get()
    }

    /// Every counter and its value, in declaration order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        Counter::ALL
            .iter()
            .map(|&c| (c.name(), self.get(c)))
            .collect()
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        for v in self.values.iter() {
            v.set(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_snapshots_and_resets() {
        let c = Counters::new();
        c.inc(Counter::DriverDropBadFcs);
        c.add(Counter::DriverFramesIn, 41);
        c.inc(Counter::DriverFramesIn);
        assert_eq!(c.get(Counter::DriverFramesIn), 42);
        let snap = c.snapshot();
        assert!(snap.contains(&("driver.drop.bad_fcs", 1)));
        assert_eq!(snap.len(), Counter::ALL.len());
        c.reset();
        assert!(c.snapshot().iter().all(|&(_, v)| v == 0));
    }

    #[test]
    fn names_are_unique() {
        let mut n: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        n.sort_unstable();
        n.dedup();
        assert_eq!(n.len(), Counter::ALL.len());
    }
}
