/*
 * cli_signals.c: how the eventhub tool stops on SIGINT and SIGTERM (at
 * once, or through watch's and get's loop with a bounded grace), and the
 * monotonic clock its waits use.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define STOP_TICK_MS 100		/* after a signal: SIGALRM this often */
#define STOP_TICKS 30			/* after a signal: 3 s for the whole stop */

/*
 * SIGINT and SIGTERM in watch and get: signalled, then a byte to
 * signal_pipe, which every wait of theirs polls (the loop's, with the
 * connection, and write_out's for stdout): a signal that arrives while a
 * query runs or a reader stalls is not lost.
 */
int			signal_pipe[2] = {-1, -1};
volatile sig_atomic_t signalled;

/*
 * After the first signal, a timer sends SIGALRM every STOP_TICK_MS: each
 * interrupts what the process may be blocked in (a write to a terminal
 * that stopped reading, which poll() called writable), so that the stop
 * goes on; the STOP_TICKS-th ends the process.
 */
static timer_t stop_timer;
static volatile sig_atomic_t stop_ticks;

/*
 * SIGINT and SIGTERM of watch and get: tells their loop, which stops
 * printing and ends as usual (the replica deregisters), and starts the
 * stop timer.  A second signal, or a stop that takes longer than
 * STOP_TICKS ticks, ends the process at once.
 */
static void
on_signal(int signo)
{
	char		byte = (char) signo;
	int			saved = errno;

	struct itimerspec tick = {
		.it_interval = {.tv_nsec = STOP_TICK_MS * 1000000L},
		.it_value = {.tv_nsec = STOP_TICK_MS * 1000000L},
	};

	if (signalled)
		_exit(EXIT_INTERRUPTED);
	signalled = 1;
	timer_settime(stop_timer, 0, &tick, NULL);
	if (write(signal_pipe[1], &byte, 1) < 0)
	{
		/* cannot fail: one byte at most; signalled tells the loop anyway */
	}
	errno = saved;
}

/*
 * Ends the process quietly, as interrupted: SIGINT and SIGTERM of the
 * commands with nothing to undo.
 */
static void
exit_interrupted(int signo)
{
	(void) signo;
	_exit(EXIT_INTERRUPTED);
}

/* A tick of the stop timer: the last one ends a stop that takes too long. */
static void
on_stop_tick(int signo)
{
	(void) signo;
	if (++stop_ticks >= STOP_TICKS)
		_exit(EXIT_INTERRUPTED);
}

/*
 * SIGINT and SIGTERM: watch and get stop through their loop (on_signal),
 * the other commands at once; either way quietly, with EXIT_INTERRUPTED.
 * No SA_RESTART: a wait or write that a signal interrupts returns EINTR,
 * which is no error: the caller looks at signalled.  SIGPIPE is ignored:
 * a closed stdout shows as EPIPE, so that watch can deregister first.
 * Returns 0, or -1 with errno set.
 */
int
handle_signals(cli_command command)
{
	struct sigaction sa;
	struct sigevent tick = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM};

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	if (command == CMD_WATCH || command == CMD_GET)
	{
		sa.sa_handler = on_stop_tick;
		if (pipe(signal_pipe) != 0 ||
			fcntl(signal_pipe[0], F_SETFL, O_NONBLOCK) != 0 ||
			fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK) != 0 ||
			timer_create(CLOCK_MONOTONIC, &tick, &stop_timer) != 0 ||
			sigaction(SIGALRM, &sa, NULL) != 0)
			return -1;
		sa.sa_handler = on_signal;
	}
	else
		sa.sa_handler = exit_interrupted;
	if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
		return -1;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* Seconds on the monotonic clock. */
double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}
