// A fork-and-exit chain: each link forks its successor and exits at once
// (after setsid, with "setsid"), so links are born and die between two
// looks of a scan. The subject exits after starting the chain, unless
// "stay" is given. The chain ends by itself after LIFETIME seconds.
//
// With "wide", eight chains run side by side.
//
//	chain MARKER LIFETIME [stay] [setsid] [wide]
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	time_t end = time(NULL) + atoi(argv[2]);
	int stay = 0, sid = 0, width = 1;
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "stay") == 0) stay = 1;
		if (strcmp(argv[i], "setsid") == 0) sid = 1;
		if (strcmp(argv[i], "wide") == 0) width = 8;
	}
	signal(SIGTERM, SIG_IGN);
	printf("subject %d\n", getpid());
	fflush(stdout);
	pid_t first = 1;
	for (int i = 0; i < width && first > 0; i++) first = fork();
	if (first < 0) return 1;
	if (first > 0) {
		if (!stay) return 0;
		alarm(atoi(argv[2]));
		for (;;) pause();
	}
	while (time(NULL) < end) {
		if (sid) setsid();
		pid_t next = fork();
		if (next < 0) { usleep(1000); continue; }
		if (next > 0) _exit(0);
	}
	return 0;
}
