/*
 * The "exec" section (docs/exec.md): what `sluice exec` adds to the
 * command's confinement. Today: Landlock, off unless asked for, with the
 * paths the command may write (rw) and read and execute (ro).
 */
#include <stdlib.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"

/* A Landlock path: absolute, as the kernel opens it. */
static int
abs_path(struct cfctx *cx, const char *jp, const char *s)
{
	if (s[0] != '/')
		return cf_err(cx, jp, "\"%s\" is not an absolute path", s);
	return 0;
}

int
cf_load_exec(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "landlock", NULL };
	static const char *const ll_keys[] = { "rw", "ro", NULL };
	struct exec_conf *ec = &cx->cf->cf_exec;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "exec"), *ll;

	if (obj == NULL)
		return 0;
	if (cf_keys(cx, "exec", obj, keys) == -1)
		return -1;
	if ((ll = cJSON_GetObjectItemCaseSensitive(obj, "landlock")) == NULL)
		return 0;
	ec->ec_landlock = 1;
	if (cf_keys(cx, "exec.landlock", ll, ll_keys) == -1 ||
	    cf_strlist(cx, "exec.landlock", ll, "rw", &ec->ec_rw, &ec->ec_nrw,
		abs_path) == -1 ||
	    cf_strlist(cx, "exec.landlock", ll, "ro", &ec->ec_ro, &ec->ec_nro,
		abs_path) == -1)
		return -1;
	return 0;
}

void
cf_exec_free(struct exec_conf *ec)
{
	cf_strlist_free(ec->ec_rw, ec->ec_nrw);
	cf_strlist_free(ec->ec_ro, ec->ec_nro);
}
