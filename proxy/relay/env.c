/*
 * The daemon's shared context (struct proxy_env, proxy.h): its clock.
 */
#include <sys/time.h>

#include <time.h>

#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

int64_t
proxy_env_now(const struct proxy_env *env)
{
	struct timeval tv;

	if (env == NULL || env->pe_base == NULL ||
	    event_base_gettimeofday_cached(env->pe_base, &tv) == -1)
		return (int64_t)time(NULL);
	return (int64_t)tv.tv_sec;
}

int64_t
proxy_env_mono_us(const struct proxy_env *env)
{
	(void)env;
	return sl_mono_us();
}

int
proxy_env_revoked(const struct proxy_env *env, const struct config *cf,
    const char *jti)
{
	if (env->pe_revfile_set)
		return revocations_has(env->pe_revs, env->pe_revfile,
		    env->pe_nrevfile, jti);
	return revocations_has(env->pe_revs, cf->cf_revoked, cf->cf_nrevoked,
	    jti);
}
