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

// NODE sets out to the address of node idx (a register, not out or tmp)
// of the pages at R12, each a 24-byte slice header; it uses tmp.
#define NODE(idx, out, tmp) \
	MOVQ idx, tmp; \
	SHRQ $12, tmp; \
	LEAQ (tmp)(tmp*2), tmp; \
	MOVQ (R12)(tmp*8), tmp; \
	MOVQ idx, out; \
	ANDQ $4095, out; \
	SHLQ $5, out; \
	ADDQ tmp, out

// DROP records the slots that drop out at the node at DX, with DI = ^a
// (anyW &^ a ≠ 0), and takes them out of R10 and R11; it uses AX and DI.
// It jumps to miss when the drop buffer is full and to ended when no
// slot is left.
#define DROP \
	MOVQ 88(R8), AX; \
	CMPQ AX, 96(R8); \
	JAE miss; \
	LEAQ (AX)(AX*2), AX; \
	SHLQ $3, AX; \
	ADDQ 80(R8), AX; \
	MOVQ R10, 0(AX); \
	ANDQ DI, 0(AX); \
	MOVQ R11, 8(AX); \
	ANDQ DI, 8(AX); \
	MOVQ 104(R8), DI; \
	ADDQ 16(R8), DI; \
	SUBQ CX, DI; \
	MOVQ DI, 16(AX); \
	INCQ 88(R8); \
	MOVQ 16(DX), DI; \
	ANDQ DI, R10; \
	ANDQ DI, R11; \
	TESTQ R10, R10; \
	JZ ended

// INLINEOK jumps to miss unless the inline node at DX is held on GPU by
// the one slot left in R10, so that nothing drops; it uses DI.
#define INLINEOK \
	LEAQ -1(R10), DI; \
	TESTQ R10, DI; \
	JNZ miss; \
	BSFQ R10, DI; \
	CMPW 24(DX), DI; \
	JNE miss; \
	CMPW 26(DX), $0; \
	JEQ miss

// func walk16AES(st *walk16State)
//
// walk16Go in assembly. walk16State's offsets (walk16.go, checked by
// TestWalk16StateLayout): h 0, tokens 8, left 16, prev 24, pages 32,
// anyW 40, gpuW 48, runs 56, nruns 64, capRuns 72, drops 80, ndrops 88,
// capDrops 96, at 104, k 112, stop 120; a drop is 24 bytes (any, gpu,
// depth). A node (nodes.go, checked by TestNodeLayout) is 32 bytes: key
// at 0, next at 12, a at 16, b at 24.
//
// Registers: R8 st, BX h, SI tokens, CX left, R13 prev, DI prev's node
// (on the common path), R12 pages, R10 anyW, R11 gpuW, R14 the open run's
// count, R9 the node as of which that count stands (a step to the node
// below adds one, counted when the run closes); AX, DX scratch.
TEXT ·walk16AES(SB), NOSPLIT, $0-8
	MOVQ st+0(FP), R8
	MOVQ 0(R8), BX
	MOVQ 8(R8), SI
	MOVQ 16(R8), CX
	MOVQ 24(R8), R13
	MOVQ 32(R8), R12
	MOVQ 40(R8), R10
	MOVQ 48(R8), R11
	MOVQ 56(R8), R14
	MOVQ 64(R8), DX
	LEAQ -4(R14)(DX*4), R14
	MOVQ R13, R9
	NODE(R13, DI, DX)
	SETUP

loop:
	TESTQ CX, CX
	JZ finished
	CHAIN

	// The node below prev: 32 bytes lower, unless prev starts its page.
	TESTQ $4095, R13
	JZ belowfar
	LEAQ -32(DI), DX

below:
	CMPQ 0(DX), BX
	JNE successor
	MOVQ 24(DX), AX
	SHRQ $61, AX
	CMPQ AX, $2
	JEQ belowshared
	CMPQ AX, $4
	JNE miss
	INLINEOK
	JMP belowtaken

belowshared:
	MOVQ 16(DX), AX
	NOTQ AX
	TESTQ R10, AX
	JNZ belowdrop

belowtaken:
	DECQ R13
	MOVQ DX, DI
	ADDQ $64, SI
	DECQ CX
	JMP loop

belowfar:
	LEAQ -1(R13), AX
	NODE(AX, DX, DI)
	JMP below

belowdrop:
	MOVQ AX, DI
	DROP
	JMP belowtaken

successor:
	// prev's successor in the LRU list, which starts a new run.
	NODE(R13, DI, AX)
	MOVL 12(DI), AX
	NODE(AX, DX, DI)
	CMPQ 0(DX), BX
	JNE miss
	MOVQ 64(R8), DI
	ADDQ $2, DI
	CMPQ DI, 72(R8)
	JA miss
	MOVQ 24(DX), DI
	SHRQ $61, DI
	CMPQ DI, $2
	JEQ succshared
	CMPQ DI, $4
	JNE miss
	INLINEOK
	JMP newrun

succshared:
	MOVQ 16(DX), DI
	NOTQ DI
	TESTQ R10, DI
	JZ newrun
	VMOVQ AX, X1
	DROP
	VMOVQ X1, AX

newrun:
	// Close the open run, open one at node AX.
	MOVQ R9, DI
	SUBQ R13, DI
	ADDL DI, 0(R14)
	MOVQ 64(R8), DI
	SHLQ $2, DI
	ADDQ 56(R8), DI
	MOVL AX, 0(DI)
	MOVL $1, 4(DI)
	LEAQ 4(DI), R14
	ADDQ $2, 64(R8)
	MOVQ AX, R9
	MOVQ AX, R13
	MOVQ DX, DI
	ADDQ $64, SI
	DECQ CX
	JMP loop

miss:
	MOVQ BX, 112(R8)
	MOVQ $2, 120(R8)
	JMP out

ended:
	MOVQ $1, 120(R8)
	JMP out

finished:
	MOVQ $0, 120(R8)

out:
	// Close the open run; at += blocks walked; the rest as they stand.
	MOVQ R9, DI
	SUBQ R13, DI
	ADDL DI, 0(R14)
	MOVQ 16(R8), DX
	SUBQ CX, DX
	ADDQ DX, 104(R8)
	MOVQ CX, 16(R8)
	MOVQ BX, 0(R8)
	MOVQ SI, 8(R8)
	MOVQ R13, 24(R8)
	MOVQ R10, 40(R8)
	MOVQ R11, 48(R8)
	RET
