/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The XDP tester's contract with userspace: struct v6g_tgen_* and
 * v6g_trecv_*, declared once in crates/xdp/src/types.rs (the tester
 * section) and generated into v6gate_abi.h with size and offset asserts.
 * Multi-byte fields are host order unless named _be.
 */
#ifndef V6GATE_TESTER_H
#define V6GATE_TESTER_H

#include "v6gate_abi.h"

#endif
