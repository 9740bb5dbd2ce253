// The main thread exits while a second thread lives on: /proc/PID/stat
// shows the process as a zombie although it runs. The live thread also
// forks a child, which is listed only in that thread's children file.
//
//	leaderexit MARKER LIFETIME
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static int lifetime;

static void *live(void *arg) {
	(void)arg;
	pid_t child = fork();
	if (child == 0) {
		alarm(lifetime);
		for (;;) pause();
	}
	printf("child %d\n", child);
	fflush(stdout);
	for (;;) pause();
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	lifetime = atoi(argv[2]);
	signal(SIGTERM, SIG_IGN);
	alarm(lifetime); // SIGALRM ends the whole thread group
	printf("pid %d\n", getpid());
	fflush(stdout);
	pthread_t t;
	if (pthread_create(&t, NULL, live, NULL) != 0) return 1;
	usleep(20000); // let the thread fork first
	syscall(SYS_exit, 0); // this thread only
	return 0;
}
