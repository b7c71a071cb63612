/*
 * The command's exit status as sluice's own (DESIGN "sluice exec": the
 * status, or 128+N when killed by signal N, as a shell reports it), and the
 * signals sluice passes on to it while it runs.
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/sandbox.h"

const int sandbox_forwarded[] = {
	SIGHUP,
	SIGINT,
	SIGQUIT,
	SIGTERM,
	SIGUSR1,
	SIGUSR2,
	SIGWINCH,
};
const size_t sandbox_nforwarded = SL_NELEM(sandbox_forwarded);

static volatile sig_atomic_t forward_pid;

int
sandbox_exit_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return 255;
}

int
sandbox_wait(pid_t pid)
{
	pid_t r;
	int st;

	do
		r = waitpid(pid, &st, 0);
	while (r == -1 && errno == EINTR);
	if (r == -1)
		return -1;
	return sandbox_exit_code(st);
}

static void
forward(int sig)
{
	int saved = errno;
	pid_t pid = (pid_t)forward_pid;

	if (pid > 0)
		(void)kill(pid, sig);
	errno = saved;
}

int
sandbox_forward_signals(pid_t pid)
{
	struct sigaction sa;
	size_t i;

	forward_pid = (sig_atomic_t)(pid > 0 ? pid : 0);
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = pid > 0 ? forward : SIG_DFL;
	sa.sa_flags = SA_RESTART;
	for (i = 0; i < sandbox_nforwarded; i++)
		if (sigaction(sandbox_forwarded[i], &sa, NULL) == -1)
			return -1;
	return 0;
}

void
sandbox_forward_stop(void)
{
	(void)sandbox_forward_signals(0);
}
