/*
 * The daemon's shared context (struct proxy_env, proxy.h): its clock.
 */
#include <sys/time.h>

#include <time.h>

#include <event2/event.h>

#include "proxy/proxy.h"

int64_t
proxy_env_now(const struct proxy_env *env)
{
	struct timeval tv;

	if (env == NULL || env->pe_base == NULL ||
	    event_base_gettimeofday_cached(env->pe_base, &tv) == -1)
		return (int64_t)time(NULL);
	return (int64_t)tv.tv_sec;
}
