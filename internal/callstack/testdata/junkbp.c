// C callers of a Go callback (purego) whose frame-pointer register holds
// what C code without frame pointers may leave there: the Go frames above
// the callback then chain to a junk address. Built at test time by
// callback_test.go; the library itself has no Go counterpart.
#include <pthread.h>
#include <stdint.h>

typedef void (*fn_t)(void);

// call_with_bp calls fn with %rbp set to bp, restoring it after.
__attribute__((naked)) void call_with_bp(fn_t fn, uintptr_t bp) {
	__asm__(
		"push %rbp\n"
		"mov %rsi, %rbp\n"
		"call *%rdi\n"
		"pop %rbp\n"
		"ret\n");
}

// call_near_sp calls fn with %rbp pointing a little above the C stack
// pointer: a plausible address, in a different stack from the Go frames.
__attribute__((naked)) void call_near_sp(fn_t fn) {
	__asm__(
		"push %rbp\n"
		"lea 256(%rsp), %rbp\n"
		"call *%rdi\n"
		"pop %rbp\n"
		"ret\n");
}

struct job { fn_t fn; uintptr_t bp; };

static void *run(void *p) {
	struct job *j = p;
	call_with_bp(j->fn, j->bp);
	return 0;
}

// call_on_thread runs fn on a thread of its own (an extra M in Go) with
// %rbp set to bp.
void call_on_thread(fn_t fn, uintptr_t bp) {
	pthread_t t;
	struct job j = {fn, bp};
	pthread_create(&t, 0, run, &j);
	pthread_join(t, 0);
}
