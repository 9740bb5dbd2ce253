#include "textflag.h"

// func countSignal()
// Called by the kernel as void handler(int sig), sig in DI: adds one to
// sigCounts[sig] and returns to the restorer.
TEXT ·countSignal(SB), NOSPLIT|NOFRAME, $0-0
	CMPQ	DI, $64
	JHI	done
	LEAQ	·sigCounts(SB), AX
	LOCK
	INCQ	(AX)(DI*8)
done:
	RET

// sigReturn is the restorer: the handler returns here, and it asks the
// kernel to restore the interrupted context.
TEXT ·sigReturn(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ	$15, AX // SYS_rt_sigreturn
	SYSCALL
	INT	$3

// func handlerAddrs() (handler, restorer uintptr)
TEXT ·handlerAddrs(SB), NOSPLIT, $0-16
	LEAQ	·countSignal(SB), AX
	MOVQ	AX, handler+0(FP)
	LEAQ	·sigReturn(SB), AX
	MOVQ	AX, restorer+8(FP)
	RET
