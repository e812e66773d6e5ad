#!/usr/bin/python3
"""Adversarial packets for probestack, sent with scapy on the Linux side of a TAP.

Usage (inside the test's network namespace, as root):

    /usr/bin/python3 send.py IFACE SRC_MAC DST_MAC SRC_IP DST_IP CASE [key=value ...]

SRC is the Linux side (the forged packets claim to come from it), DST the stack. Each
case sends one burst of frames with `sendp`, then listens on IFACE for `listen=SECONDS`
(default 0.3) and prints one JSON object on stdout: the case, the frames sent, and a
summary of every IPv4 packet DST sent to SRC meanwhile (so the test can check that a
malformed SYN drew no SYN-ACK, or that a blind RST drew a challenge ACK).

Every forged payload contains the marker b"EVIL", so the test can check that none of it
ever reaches an application. Each case uses its own source port (`sport=`, default
40000) so that replies can be told apart.

Keys the TCP cases need, about the established connection under attack (the stack's
view): sport (Linux's port), dport (the stack's), rcv_nxt, snd_nxt, tsval (a timestamp
the stack will take, PAWS-wise; 0 for none).
"""

import json
import struct
import sys
import threading
import time

from scapy.all import IP, TCP, UDP, AsyncSniffer, Ether, Raw, sendp  # noqa: E402
from scapy.utils import checksum as inet_checksum

MARKER = b"EVIL"
ECHO_PORT = 7


def ip_bytes(pkt):
    """The IPv4 datagram of a scapy packet as bytes, with every field computed."""
    return bytearray(bytes(pkt))


def fix_ip_checksum(raw, header_len=None):
    """Recomputes the IPv4 header checksum over `header_len` bytes (default: the IHL)."""
    if header_len is None:
        header_len = (raw[0] & 0x0F) * 4
    header_len = max(20, min(header_len, len(raw)))
    raw[10:12] = b"\x00\x00"
    raw[10:12] = struct.pack("!H", inet_checksum(bytes(raw[:header_len])))
    return raw


def wrong(value):
    """A checksum value that is wrong for a field whose right value is `value`, never
    zero (a zero UDP checksum means "none") and never the other representation of the
    same sum (0x0000 and 0xFFFF)."""
    for mask in (0x5555, 0x0F0F, 0x3333):
        v = value ^ mask
        if v not in (0, 0xFFFF):
            return v
    raise AssertionError("unreachable")


class Case:
    def __init__(self, args, params):
        self.src_mac, self.dst_mac, self.src, self.dst = args
        self.p = params
        self.sport = int(params.get("sport", 40000))

    def eth(self):
        return Ether(src=self.src_mac, dst=self.dst_mac, type=0x0800)

    def frame(self, datagram):
        return self.eth() / Raw(bytes(datagram))

    def udp(self, payload, sport=None, **ip_fields):
        return IP(src=self.src, dst=self.dst, **ip_fields) / UDP(
            sport=sport or self.sport, dport=ECHO_PORT
        ) / Raw(payload)

    def syn(self, options=b"", dataofs=None, chksum=None, data=b""):
        """A SYN to the echo listener carrying `options` as raw bytes, then `data`."""
        tcp = TCP(sport=self.sport, dport=ECHO_PORT, flags="S", seq=1000, window=8192)
        if dataofs is not None:
            tcp.dataofs = dataofs
        elif options:
            tcp.dataofs = 5 + (len(options) + 3) // 4
        if chksum is not None:
            tcp.chksum = chksum
        return IP(src=self.src, dst=self.dst) / tcp / Raw(options + data)

    def conn_segment(self, flags, seq, ack=None, payload=b"", timestamp=True):
        """A segment on the established connection, forged as Linux's."""
        options = []
        tsval = int(self.p.get("tsval", 0))
        if timestamp and tsval:
            options = [("NOP", None), ("NOP", None), ("Timestamp", (tsval, 0))]
        tcp = TCP(
            sport=int(self.p["sport"]),
            dport=int(self.p["dport"]),
            flags=flags,
            seq=seq % (1 << 32),
            ack=(ack or 0) % (1 << 32),
            window=65535,
            options=options,
        )
        pkt = IP(src=self.src, dst=self.dst) / tcp
        if payload:
            pkt = pkt / Raw(payload)
        return pkt

    # --- IPv4 header ----------------------------------------------------------------

    def ip_ihl_below_5(self):
        out = []
        for ihl in (4, 0):
            raw = ip_bytes(self.udp(MARKER + b" ihl below 5"))
            raw[0] = 0x40 | ihl
            out.append(fix_ip_checksum(raw, 20))
        return out

    def ip_ihl_past_total_length(self):
        # IHL 15 (60 bytes of header) in a datagram whose total length says 40.
        raw = ip_bytes(self.udp(MARKER + b" ihl 15, total length 40" + b"." * 40))
        raw[0] = 0x4F
        raw[2:4] = struct.pack("!H", 40)
        first = fix_ip_checksum(raw, 60)
        # IHL 8 (32 bytes) in a 28-byte datagram: the header runs past the datagram.
        raw = ip_bytes(self.udp(b""))
        raw[0] = 0x48
        second = fix_ip_checksum(raw, 28)
        return [first, second]

    def ip_total_length_past_frame(self):
        out = []
        for extra in (1, 1000):
            raw = ip_bytes(self.udp(MARKER + b" total length past the frame" + b"." * 40))
            raw[2:4] = struct.pack("!H", len(raw) + extra)
            out.append(fix_ip_checksum(raw))
        return out

    def ip_total_length_below_header(self):
        out = []
        for total in (19, 0):
            raw = ip_bytes(self.udp(MARKER + b" total length below the header"))
            raw[2:4] = struct.pack("!H", total)
            out.append(fix_ip_checksum(raw))
        return out

    def ip_bad_header_checksum(self):
        raw = ip_bytes(self.udp(MARKER + b" bad IPv4 header checksum"))
        (good,) = struct.unpack("!H", raw[10:12])
        raw[10:12] = struct.pack("!H", wrong(good))
        return [raw]

    # --- UDP ------------------------------------------------------------------------

    def udp_bad_checksum(self):
        raw = ip_bytes(self.udp(MARKER + b" bad UDP checksum"))
        (good,) = struct.unpack("!H", raw[26:28])
        raw[26:28] = struct.pack("!H", wrong(good))
        return [raw]

    def udp_truncated_header(self):
        out = []
        # Four bytes of a UDP header, nothing else.
        raw = ip_bytes(IP(src=self.src, dst=self.dst, proto=17) / Raw(b"\x9c\x40\x00\x07"))
        out.append(raw)
        # A length field past the datagram, and one below the header's 8 bytes.
        for length in (200, 4):
            raw = ip_bytes(self.udp(MARKER + b" bad UDP length"))
            raw[24:26] = struct.pack("!H", length)
            raw[26:28] = b"\x00\x00"  # no checksum: only the length is wrong
            out.append(raw)
        return out

    # --- TCP header -----------------------------------------------------------------

    def tcp_bad_checksum(self):
        raw = ip_bytes(self.syn(data=MARKER + b" bad TCP checksum"))
        (good,) = struct.unpack("!H", raw[36:38])
        raw[36:38] = struct.pack("!H", wrong(good))
        return [raw]

    def tcp_data_offset_below_5(self):
        return [ip_bytes(self.syn(dataofs=d)) for d in (4, 0)]

    def tcp_data_offset_past_segment(self):
        # 60 bytes of header claimed in a 20-byte segment, and 24 in a 20-byte one.
        return [ip_bytes(self.syn(dataofs=d)) for d in (15, 6)]

    def tcp_option_length_0(self):
        # MSS (kind 2) with length 0, then padding.
        return [ip_bytes(self.syn(b"\x02\x00\x05\xb4"))]

    def tcp_option_length_1(self):
        # Window scale (kind 3) with length 1.
        return [ip_bytes(self.syn(b"\x03\x01\x07\x00"))]

    def tcp_option_length_past_header(self):
        # A timestamp option (kind 8, length 10) in a 4-byte option area, and an option
        # whose length byte itself is past the header (the kind is the last byte).
        return [
            ip_bytes(self.syn(b"\x08\x0a\x00\x01")),
            ip_bytes(self.syn(b"\x01\x01\x01\x08")),
        ]

    # --- IPv4 fragments -------------------------------------------------------------

    def ip_overlapping_fragments(self):
        """A 40-byte UDP datagram (no checksum, so any reassembly would be delivered)
        in fragments whose second overlaps the first with different bytes; then the
        rest of the datagram, and a clean piece that would complete it."""
        ident = int(self.p.get("ident", 0x0BAD))
        udp = struct.pack("!HHHH", self.sport, ECHO_PORT, 40, 0)
        first = udp + b"EVIL-AAA"  # payload bytes 0..16
        overlap = b"EVIL-BBBEVIL-BBB"  # payload bytes 8..24: rewrites 8..16
        rest = b"EVIL-CCCEVIL-CCC"  # 24..40, last fragment
        fill = b"EVIL-DDD"  # 16..24: would complete the datagram
        pieces = [(0, first, True), (8, overlap, True), (24, rest, False), (16, fill, True)]
        out = []
        for offset, data, more in pieces:
            pkt = IP(
                src=self.src,
                dst=self.dst,
                proto=17,
                id=ident,
                flags="MF" if more else 0,
                frag=offset // 8,
            ) / Raw(data)
            out.append(ip_bytes(pkt))
        return out

    def ip_fragment_flood(self):
        """`count` first fragments (1480 bytes each, More Fragments set) of as many
        datagrams, none of which ever completes."""
        count = int(self.p.get("count", 300))
        base = int(self.p.get("ident", 0x1000))
        body = struct.pack("!HHHH", self.sport, ECHO_PORT, 3000, 0) + MARKER * 368
        out = []
        for i in range(count):
            pkt = IP(
                src=self.src,
                dst=self.dst,
                proto=17,
                id=(base + i) & 0xFFFF,
                flags="MF",
                frag=0,
            ) / Raw(body)
            out.append(ip_bytes(pkt))
        return out

    # --- The established connection (RFC 5961, RFC 9293 §3.10.7.4) --------------------

    def tcp_out_of_window(self):
        rcv_nxt, snd_nxt = int(self.p["rcv_nxt"]), int(self.p["snd_nxt"])
        return [
            # Far ahead of the window, and wholly before RCV.NXT (old data).
            ip_bytes(self.conn_segment("PA", rcv_nxt + (1 << 30), snd_nxt, MARKER + b" ahead")),
            ip_bytes(self.conn_segment("PA", rcv_nxt - (1 << 20), snd_nxt, MARKER + b" behind")),
        ]

    def tcp_blind_rst(self):
        # In the window, not at RCV.NXT; no timestamp (RFC 7323 §3.2 lets a RST go without).
        rcv_nxt = int(self.p["rcv_nxt"])
        return [ip_bytes(self.conn_segment("R", rcv_nxt + 1000, timestamp=False))]

    def tcp_blind_syn(self):
        rcv_nxt = int(self.p["rcv_nxt"])
        return [ip_bytes(self.conn_segment("S", rcv_nxt + 1000))]

    def tcp_data_bad_ack(self):
        # Data at RCV.NXT acknowledging what was never sent (RFC 5961 §5.2).
        rcv_nxt, snd_nxt = int(self.p["rcv_nxt"]), int(self.p["snd_nxt"])
        return [ip_bytes(self.conn_segment("PA", rcv_nxt, snd_nxt + (1 << 20), MARKER + b" ack"))]


def summarize(pkt):
    ip = pkt[IP]
    out = {"proto": ip.proto, "len": ip.len}
    if TCP in pkt:
        t = pkt[TCP]
        out.update(
            sport=t.sport,
            dport=t.dport,
            flags=str(t.flags),
            seq=t.seq,
            ack=t.ack,
            payload=len(t.payload),
        )
    elif UDP in pkt:
        u = pkt[UDP]
        out.update(sport=u.sport, dport=u.dport, payload=len(u.payload))
    elif ip.proto == 1:
        out.update(icmp_type=bytes(ip.payload)[0])
    return out


def main(argv):
    if len(argv) < 7:
        sys.stderr.write(__doc__)
        return 2
    iface, src_mac, dst_mac, src, dst, name = argv[1:7]
    params = dict(kv.split("=", 1) for kv in argv[7:])
    case = Case((src_mac, dst_mac, src, dst), params)
    build = getattr(case, name, None)
    if build is None or name.startswith("_") or not callable(build):
        sys.stderr.write(f"unknown case {name}\n")
        return 2
    datagrams = build()
    frames = [case.frame(d) for d in datagrams]
    listen = float(params.get("listen", 0.3))

    def from_stack(pkt):
        return IP in pkt and pkt[IP].src == dst and pkt[IP].dst == src

    # The sniffer's socket opens on its own thread: wait for it before sending.
    started = threading.Event()
    sniffer = AsyncSniffer(
        iface=iface, lfilter=from_stack, store=True, started_callback=started.set
    )
    sniffer.start()
    if not started.wait(5):
        sys.stderr.write("the sniffer did not start\n")
        return 1
    sendp(frames, iface=iface, verbose=False)
    time.sleep(listen)
    got = sniffer.stop() or []
    print(json.dumps({"case": name, "sent": len(frames), "replies": [summarize(p) for p in got]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
