#include "textflag.h"

// func countSignal()
// Called by the kernel as void handler(int sig), sig in R0: adds one to
// sigCounts[sig] and returns to the vDSO's sigreturn trampoline in LR.
TEXT ·countSignal(SB), NOSPLIT|NOFRAME, $0-0
	CMP	$64, R0
	BHI	done
	MOVD	$·sigCounts(SB), R1
	ADD	R0<<3, R1, R1
again:
	LDAXR	(R1), R2
	ADD	$1, R2, R2
	STLXR	R2, (R1), R3
	CBNZ	R3, again
done:
	RET

// func handlerAddrs() (handler, restorer uintptr)
TEXT ·handlerAddrs(SB), NOSPLIT, $0-16
	MOVD	$·countSignal(SB), R0
	MOVD	R0, handler+0(FP)
	MOVD	ZR, restorer+8(FP)
	RET
