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

// func chainKeys16AES(parent uint64, tokens *uint32, n int, out *uint64) uint64
TEXT ·chainKeys16AES(SB), NOSPLIT, $0-40
	MOVQ parent+0(FP), BX
	MOVQ tokens+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+24(FP), DI
	MOVOU hashKeys<>+0x00(SB), X8
	MOVOU hashKeys<>+0x10(SB), X9
	MOVOU hashKeys<>+0x20(SB), X10
	MOVQ $0x9e3779b97f4a7c15, R9

loop:
	// The block's hash: tokens 0–3 into the state, 4–15 as round keys.
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	PXOR X8, X0
	AESENC X1, X0
	AESENC X2, X0
	AESENC X3, X0
	AESENC X9, X0
	AESENC X10, X0
	MOVQ X0, AX

	// The key: the folded 128-bit product of the hash and the parent's key.
	XORQ R9, AX
	MULQ BX
	XORQ DX, AX
	MOVQ AX, BX
	MOVQ AX, 0(DI)

	ADDQ $64, SI
	ADDQ $8, DI
	DECQ CX
	JNZ loop

	MOVQ BX, ret+32(FP)
	RET
