// clone(CLONE_PARENT): the child gets the subject's parent (the relayd
// thread that forked the subject) as its own, so it is not a descendant of
// the subject. With "setsid" it leaves the session too; with "exit" the
// subject exits at once instead of running on.
//
//	cloneparent MARKER LIFETIME [setsid] [exit]
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	int lifetime = atoi(argv[2]);
	int sid = 0, leave = 0;
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "setsid") == 0) sid = 1;
		if (strcmp(argv[i], "exit") == 0) leave = 1;
	}
	signal(SIGTERM, SIG_IGN);
	long pid = syscall(SYS_clone, CLONE_PARENT, 0, 0, 0, 0);
	if (pid < 0) return 1;
	if (pid == 0) {
		if (sid) setsid();
		alarm(lifetime);
		for (;;) pause();
	}
	printf("subject %d sibling %ld\n", getpid(), pid);
	fflush(stdout);
	if (leave) return 0;
	alarm(lifetime);
	for (;;) pause();
}
