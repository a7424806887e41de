/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The Teredo relay fast path (RFC 4380 §5.4): bpf/teredo.bpf.c and
 * crates/xdp/src/teredo.rs. Kept apart from the gateway's object: a
 * separate object with its own maps, loaded only when the relay's `xdp`
 * key asks for it. Its map types (struct td_config, td_peer), flags
 * (TD_F_*) and counter indices (TD_C_*, TD_P_*) are declared once in
 * crates/xdp/src/types/teredo.rs and generated into v6gate_abi.h with
 * size and offset asserts.
 *
 * Maps: teredo_config (one struct td_config); teredo_peers: a trusted
 * peer's Teredo address (16 bytes, as on the wire) -> struct td_peer,
 * written by the slow path when the RFC 4380 §5.4 trust procedure
 * completes and deleted on expiry; teredo_ifmac: an attached interface's
 * index -> struct v6g_ifmac (frames to another destination pass, as the
 * kernel does not route them, PACKET_OTHERHOST); teredo_counters (per
 * CPU, struct v6g_count by TD_* index).
 */
#ifndef V6GATE_TEREDO_H
#define V6GATE_TEREDO_H

#include "v6gate_abi.h"

#endif
