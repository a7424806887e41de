/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The kernel datapath of the B4s (the DS-Lite B4, RFC 6333 §5, the DSTM
 * host once it holds a lease, and the host-integrated lwB4's own traffic,
 * RFC 7596): bpf/b4.bpf.c and crates/xdp/src/b4.rs. Its map types (struct
 * b4_config), flags (B4_F_*) and counter indices (B4_C_*, B4_P_*) are
 * declared once in crates/xdp/src/types/b4.rs and generated into
 * v6gate_abi.h with size and offset asserts.
 *
 * Maps: b4_config (one struct b4_config); b4_ifmac: interface index ->
 * struct v6g_ifmac; b4_counters (per CPU, struct v6g_count by B4_* index:
 * what the kernel path did, and why it passed a packet to the TUN engine,
 * the slow path).
 */
#ifndef V6GATE_B4_H
#define V6GATE_B4_H

#include "v6gate_abi.h"

#endif
