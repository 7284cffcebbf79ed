//go:build amd64 && !purego

#include "textflag.h"

// Keys of the block hash: the state's start and the two closing rounds.
// Arbitrary odd constants.
DATA hashKeys<>+0x00(SB)/8, $0xa0761d6478bd642f
DATA hashKeys<>+0x08(SB)/8, $0xe7037ed1a0b428db
DATA hashKeys<>+0x10(SB)/8, $0x8ebc6af09c88c6e3
DATA hashKeys<>+0x18(SB)/8, $0x589965cc75374cc3
DATA hashKeys<>+0x20(SB)/8, $0x1d8e4e27c47d124f
DATA hashKeys<>+0x28(SB)/8, $0xc2b2ae3d27d4eb4f
GLOBL hashKeys<>(SB), RODATA|NOPTR, $48

// The chaining multiplier (odd).
DATA chainMul<>+0x00(SB)/8, $0x9e3779b97f4a7c15
GLOBL chainMul<>(SB), RODATA|NOPTR, $8

// SETUP loads the hash's keys into X8–X10.
#define SETUP \
	VMOVDQU hashKeys<>+0x00(SB), X8; \
	VMOVDQU hashKeys<>+0x10(SB), X9; \
	VMOVDQU hashKeys<>+0x20(SB), X10

// CHAIN turns BX, a parent's key, into the key of the block of 16 tokens at
// SI; it uses X0 and AX. The block's hash: tokens 0–3 into the state, 4–15
// as round keys (VEX encoding: unaligned memory operands, no separate
// loads), then two rounds with fixed keys, so that every bit of the last
// 16 bytes has gone through two full rounds. The key: parent·chainMul +
// hash (mod 2⁶⁴), the only serial step, four cycles of latency; the rounds
// of consecutive blocks overlap.
#define CHAIN \
	VPXOR 0(SI), X8, X0; \
	VAESENC 16(SI), X0, X0; \
	VAESENC 32(SI), X0, X0; \
	VAESENC 48(SI), X0, X0; \
	VAESENC X9, X0, X0; \
	VAESENC X10, X0, X0; \
	VMOVQ X0, AX; \
	IMULQ chainMul<>(SB), BX; \
	ADDQ AX, BX

// func chainKeys16AES(parent uint64, tokens *uint32, n int, out *uint64) uint64
TEXT ·chainKeys16AES(SB), NOSPLIT, $0-40
	MOVQ parent+0(FP), BX
	MOVQ tokens+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+24(FP), DI
	SETUP

loop:
	CHAIN
	MOVQ BX, 0(DI)

	ADDQ $64, SI
	ADDQ $8, DI
	DECQ CX
	JNZ loop

	MOVQ BX, ret+32(FP)
	RET
