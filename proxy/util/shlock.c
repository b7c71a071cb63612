/*
 * A lock several processes share (the engines of `workers`, a reload's
 * draining ones, the parent): a robust, process-shared pthread mutex in
 * memory mapped MAP_SHARED before the forks. A holder killed with the
 * lock held (kill -9, SIGSYS, OOM) does not leave the others waiting for
 * ever: the next one gets the lock, told that its holder died, so that
 * it can repair what the dead one may have left half done.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "proxy/util/util.h"

int
sl_shlock_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t ma;
	int err;

	if ((err = pthread_mutexattr_init(&ma)) != 0)
		return err;
	if ((err = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED)) ==
		0 &&
	    (err = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST)) == 0)
		err = pthread_mutex_init(m, &ma);
	(void)pthread_mutexattr_destroy(&ma);
	return err;
}

int
sl_shlock(pthread_mutex_t *m, const char *what)
{
	int err = pthread_mutex_lock(m);

	if (err == EOWNERDEAD) {
		if ((err = pthread_mutex_consistent(m)) == 0)
			return 1;
	}
	if (err != 0)
		fatalx("%s: lock: %s", what, strerror(err));
	return 0;
}

void
sl_shunlock(pthread_mutex_t *m)
{
	(void)pthread_mutex_unlock(m);
}
