/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * v6gate XDP fast path: the contract with userspace.
 *
 * Every map key and value (struct v6g_*), flag (V6G_*) and counter index
 * (V6G_C_*, V6G_P_*) is declared once in crates/xdp/src/types.rs and
 * generated into v6gate_abi.h by crates/xdp/build.rs, each struct followed
 * by static asserts of its size and of every field's offset and size.
 * Addresses are in network byte order, IPv4 ones IPv4-mapped
 * (::ffff:a.b.c.d) in 16-byte fields; ports are network order; MTUs host
 * order.
 */
#ifndef V6GATE_H
#define V6GATE_H

#include "v6gate_abi.h"

#endif
