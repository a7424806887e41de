/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The lwAFTR / DSTM tunnel end-point fast path (RFC 7596, RFC 2473):
 * bpf/softwire.bpf.c and crates/xdp/src/softwire.rs. A separate object
 * with its own maps (as the Teredo relay's), loaded by `v6gate softwire` /
 * the daemon's [lw4o6] when its `xdp` key asks for it. Its map types
 * (struct sw_*, ds_*, pb_block), flags (SW_F_*, DS_F_*, DS_EV_*) and
 * counter indices (SW_C_*, SW_P_*) are declared once in
 * crates/xdp/src/types/softwire.rs and generated into v6gate_abi.h with
 * size and offset asserts.
 *
 * Maps: sw_config (one struct sw_config); sw_b4: an lwB4's IPv6 address
 * (16 bytes) -> struct sw_binding; sw_v4: struct sw_v4key -> the lwB4's
 * IPv6 address; sw_addr: every IPv4 address a binding or lease holds ->
 * struct sw_addr (psid_len 0: a whole address); sw_counters (per CPU,
 * struct v6g_count by SW_* index).
 *
 * The DS-Lite AFTR's NAT44 (RFC 6333 §6.6), mirrored by the slow path per
 * mapping it would translate without a state change (UDP and ICMP echo at
 * creation, TCP from ESTABLISHED through the close, whose FIN and RST
 * pass): two entries, one per direction, ds_out (softwire -> IPv4, keyed
 * by the B4 and the inner source) and ds_in (IPv4 -> softwire, keyed by
 * the pool transport address). A TCP mapping is mirrored when the B4's SYN
 * creates it (RFC 6146 V6 INIT) with DS_F_HALF_OPEN: then only the outside
 * SYN+ACK is carried, which sets DS_F_SYN_ACK in both entries (atomic OR)
 * for the slow path to read: the mapping is ESTABLISHED from then on, and
 * the fast path carries it as such. ds_pool (LPM trie): the pool4
 * prefixes (hairpinning; the rest of a pool address without a mirrored
 * session is the slow path's).
 *
 * Mappings created here (SW_F_DS_CREATE): a B4's TCP SYN without a
 * mapping takes a port from one of the B4's port blocks (bpf/portblock.h;
 * the slow path grants the blocks and writes them into ds_blocks, a
 * BPF_F_MMAPABLE array it also maps, and lists a B4's slots in ds_b4:
 * (B4, protocol) -> struct ds_b4_val), inserts ds_out then ds_in with
 * BPF_NOEXIST (DS_F_HALF_OPEN | DS_F_XDP), and tells the slow path with a
 * struct ds_event on the ds_events ring buffer, which it drains before it
 * handles any packet. ds_events also carries (with SW_F_DS_CREATE, whose
 * slow path drains the ring) one event per TCP FIN carried here
 * (DS_EV_FIN: a FIN without SYN or RST of a mapping that is not
 * half-open), submitted with BPF_RB_NO_WAKEUP: the slow path drains the
 * ring before every packet it handles and at each loop turn, and steps its
 * state machine as if it had seen that FIN at `ns`. ds_state
 * (BPF_F_MMAPABLE, one struct ds_state) holds the table limit.
 */
#ifndef V6GATE_SOFTWIRE_H
#define V6GATE_SOFTWIRE_H

#include "v6gate_abi.h"

#endif
